"""A step without learning signal: whether a step has one (the same answer on every rank), and what a step without
one reports instead of an update.

A step has no signal when no trained token on any rank has a nonzero advantage (every group's rewards were equal;
with ``training.credit: turn``, every turn's) and no term of the loss has a gradient without one
(:func:`~.objective.gradient_without_advantages`: ``beta > 0``, ``entropy_coef > 0``, a ``loss_function``). Its
gradient would be exactly 0, and AdamW would still move every weight through its momentum and weight decay: so the
step makes no forward or backward pass, no optimizer or learning-rate schedule step (:func:`skipped_update`, chosen by
:meth:`..recipe.GRPORecipe.update` with :func:`step_has_signal`), and the
recipe sends no weights (:meth:`..recipe.GRPORecipe.sync`).

Saying so (issue 51.10: a run whose rewards never varied said nothing until its final panel, and not even then):
:func:`no_signal_note` is what the dry run says when every group's rewards were equal, :class:`SignalWatch` what the
console says after :data:`FLAT_STEPS_WARNED` such steps in a row, and it counts the steps that changed the weights for
the final panel and for the checkpoint (which does not write unchanged weights again, :mod:`..checkpoint`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

from ...runs import names as rn
from ...runs.rollouts import fold_segments, token_record
from ...orchestrator.batch import ScoredBatch, TrainingRows
from ...distributed import Dist
from .objective import gradient_without_advantages
from .policy_update import PolicyUpdate, UpdateResult, UpdateStats


def moving_tokens(rows: TrainingRows) -> int:
    """This rank's trained tokens (its completions' and their episodes' earlier sequences') whose advantage is not 0
    (a NaN counts: the update's non-finite guard deals with it)."""
    if isinstance(rows.advantages, list):
        return sum(1 for row, mask in zip(rows.advantages, rows.masks) for a, m in zip(row, mask) if m and a != 0)
    return sum(sum(mask) for a, mask in zip(rows.advantages.tolist(), rows.masks) if a != 0)


def step_has_signal(batch: ScoredBatch, training: "object", dist: Dist) -> bool:
    """Whether the step's update can change the weights: a loss term has a gradient without advantages, or a
    trained token on any rank has a nonzero advantage. A collective (every rank calls it and gets the same answer:
    one rank with signal means every rank updates)."""
    if gradient_without_advantages(training):
        return True
    [moving] = dist.max([moving_tokens(batch.training_rows(training.mask_truncated_completions))])
    return moving > 0


def skipped_update(updater: PolicyUpdate, batch: ScoredBatch, keep_tokens: bool) -> UpdateResult:
    """What a step without signal reports (a collective), with the metric names of an update: ``loss``,
    ``grad_norm``, ``kl`` and the clip ratios 0 and ``ratio/max`` 1 (what its passes would give),
    ``no_signal_skipped`` 1, ``tokens/forward`` and ``tokens/padded`` 0 (no pass ran), ``entropy`` and the sampler
    comparison ``nan`` (not measured: the stale-weights guard checks the next step that updates); with
    ``keep_tokens``, token records without trainer log-probs or importance weights."""
    t, out = updater.cfg.training, batch.rollout
    rows = batch.training_rows(t.mask_truncated_completions)
    [num_tokens] = updater.dist.sum([sum(map(sum, rows.masks))])
    n = t.num_iterations
    stats = UpdateStats(losses=[0.0] * n, grad_norms=[0.0] * n, no_signal=True, entropy=math.nan, ratio_max=1.0,
                        lp_diff=math.nan, sampler_weight_sum=math.nan,
                        learning_rate=updater.optimizer.param_groups[0]["lr"])  # the rate a step would use
    records = fold_segments([token_record(rows.prompt_ids[i], rows.completion_ids[i], rows.masks[i],
                                          None if rows.logprobs is None else rows.logprobs[i], None, None)
                             for i in range(len(rows))], rows.owners, len(out)) if keep_tokens else []
    return UpdateResult(stats, num_tokens=int(num_tokens), num_iterations=n,
                        has_sampler_logprobs=out.logprobs is not None, tokens_forward=0, tokens_padded=0,
                        token_records=records)


#: steps in a row whose every group's rewards were equal before the console warns (once per such run of steps)
FLAT_STEPS_WARNED = 3

#: what gives GRPO a signal: the end of each "no learning signal" message
WHAT_TO_CHANGE = ("GRPO learns only from differences between the completions of one prompt. To get some: a reward "
                  "that varies between them (partial credit instead of all-or-nothing), more completions per prompt "
                  "(sampling.num_generations), a higher sampling.temperature, or easier prompts that the model solves "
                  "some of the time")


def no_signal_note(rewards: Sequence[float], num_generations: int, configured: int) -> Optional[str]:
    """What the dry run says when every group of ``rewards`` (``num_generations`` completions a prompt, prompt by
    prompt; ``configured``: training's ``sampling.num_generations``) scored alike, else ``None``."""
    groups = [rewards[i:i + num_generations] for i in range(0, len(rewards), max(num_generations, 1))]
    if num_generations < 2 or not groups or any(max(g) != min(g) for g in groups):
        return None
    alike = (f"every completion scored {rewards[0]:.3f}" if min(rewards) == max(rewards)
             else "the completions of each prompt scored alike")
    few = (f" With {num_generations} completions a prompt this may be chance (training samples {configured}); if "
           "training's first steps say the same, the run will not learn." if num_generations < configured else "")
    return f"No learning signal: {alike}, so every advantage is 0 and a step would not change the weights.{few} " \
           f"{WHAT_TO_CHANGE}."


def updated_weights(metrics: Dict[str, Any]) -> bool:
    """Whether the step whose metrics (a ``history`` row) these are changed the weights: it had signal and not every
    one of its ``num_iterations`` optimizer updates was skipped for a NaN/inf loss."""
    iterations = sum(1 for k in metrics if k.startswith(f"{rn.LOSS}/iteration_")) or 1
    return not metrics.get(rn.NO_SIGNAL_SKIPPED) and (metrics.get(rn.NONFINITE_SKIPPED) or 0) < iterations


class SignalWatch:
    """Per run (every rank the same): which steps changed the weights and which had no signal, said on the console.

    Attributes:
        updated: steps of this session that changed the weights. unchanged_since: the checkpoint folder where the
        weights as they are now already lie, or ``None`` (changed since the last save, or never saved in this run).
    """

    def __init__(self, say: Callable[[str], None], unchanged_since: Optional[Path] = None):
        self.say, self.unchanged_since = say, unchanged_since
        self.updated = self.flat = 0

    def after_update(self, step: int, result: UpdateResult) -> None:
        """Count step ``step``'s (0-based) update; say when it made none for want of signal."""
        if result.stats.no_signal:
            self.say(f"Step {step + 1}: every group's rewards were equal (all advantages 0, no KL or entropy term): no "
                     "update this step, its forward and backward passes skipped; the weights, AdamW's moments and the "
                     "learning-rate schedule are unchanged")
        elif result.skipped < result.num_iterations:
            self.updated += 1
            self.unchanged_since = None

    def after_step(self, step: int, metrics: Dict[str, Any]) -> None:
        """After step ``step``'s (0-based) metrics: warn once when :data:`FLAT_STEPS_WARNED` steps in a row had every
        group's rewards equal (``frac_reward_zero_std`` 1)."""
        self.flat = self.flat + 1 if metrics.get(rn.FRAC_REWARD_ZERO_STD) == 1.0 else 0
        if self.flat == FLAT_STEPS_WARNED:
            first = step + 2 - self.flat
            self.say(f"No learning signal in steps {first}-{step + 1}: every group's rewards were equal in "
                     f"{self.flat} steps in a row (frac_reward_zero_std 1.0), so the rewards do not move the "
                     f"weights. {WHAT_TO_CHANGE}; the completions are in completions.jsonl.")

    def saved(self, path: Path, unchanged: Optional[Path]) -> None:
        """After checkpoint ``path`` was saved with ``unchanged`` (:func:`..checkpoint.save_checkpoint`): say what
        was not written again; the weights now lie in ``path``."""
        if unchanged is not None:
            self.say(f"{path.name}: the weights are unchanged since {Path(unchanged).name}; its files are linked, "
                     "not written again")
        self.unchanged_since = path
