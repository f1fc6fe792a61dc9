"""What a step logs: its metrics (rewards, lengths, extras, the update's statistics, times), one sample record per
completion for the console and ``completions.jsonl``, and the token-level records of ``rollouts/step_<k>.jsonl``
(``k`` 1-based, :mod:`grpo_rollout.runs.names`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

import torch

from ...runs import names as rn
from ...rewards.scores import mean_std
from ..update.advantages import zero_std_fraction
from ...orchestrator.batch import CompletionScores, StepTimes
from ...runs.completion import CompletionRecord
from ...runs.rollouts import RolloutRecord, write_rollouts
from ...orchestrator.stats import episode_metrics, extras_means, tool_metrics
from ..update.policy_update import UpdateResult

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

def step_metrics(whole: CompletionScores, advantages: torch.Tensor, update: UpdateResult, times: StepTimes,
                 num_generations: int, sampler_lag: Optional[int]) -> Tuple[Dict[str, Any], List[CompletionRecord]]:
    """The logged numbers of a step and one record per completion (in rollout order, with its advantage).

    Args:
        whole: every rank's completions of the step. advantages: ``(len(whole),)``. update: the update's result.
        times: the step's time marks. num_generations: the group size. sampler_lag: weight versions the batch's
            sampler was behind the trainer (``None``: shared weights, not logged).
    """
    n, g = len(whole.rewards), num_generations
    lengths = whole.lengths
    mean, std = mean_std(whole.rewards)  # float64, the sample std: as every *_std metric
    metrics: Dict[str, Any] = {
        rn.REWARD: mean,
        rn.REWARD_STD: std,
        rn.REWARD_MIN: min(whole.rewards), rn.REWARD_MAX: max(whole.rewards),  # the plot's band stays inside
        **whole.stats(),
        rn.FRAC_REWARD_ZERO_STD: zero_std_fraction(torch.tensor(whole.rewards, dtype=torch.float64), g),
        **update.metrics(),
        **extras_means(whole.extras),
        **tool_metrics(whole.extras),
        **episode_metrics(whole.extras),
        rn.MEAN_LENGTH: sum(lengths) / n,
        rn.MAX_LENGTH: max(lengths),
        rn.MIN_LENGTH: min(lengths),
        rn.TRUNCATED_FRACTION: sum(whole.truncated) / n,
        **({rn.UNTRAINED: len(whole.untrained())} if whole.trained_tokens else {}),
        **({} if sampler_lag is None else {rn.SAMPLER_WEIGHT_VERSION_LAG: sampler_lag}),
        **times.metrics(),
    }
    return metrics, whole.records(advantages.tolist())


def save_rollouts(output_dir: Path, step: int, records: List[CompletionRecord], tokens: List[Dict[str, Any]],
                  tokenizer: PreTrainedTokenizerBase, num_generations: int) -> None:
    """Write ``rollouts/step_<step>.jsonl`` (``step`` 1-based): every completion's tokens, mask, sampler and trainer
    log-probs, importance weights, advantage, rewards and extras (a :class:`~...runs.rollouts.RolloutRecord` each,
    from the step's ``records`` (:func:`step_metrics`'s) and ``tokens``, every rank's
    :func:`~...runs.rollouts.token_record` in rank order)."""
    lines = [RolloutRecord.of(record, tok, step=step, index=i, group=i // num_generations,
                              prompt_text=tokenizer.decode(tok["prompt_ids"], skip_special_tokens=False))
             for i, (record, tok) in enumerate(zip(records, tokens))]
    write_rollouts(output_dir, step, lines)
