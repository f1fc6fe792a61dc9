"""One completion as the trainer saw it: :class:`CompletionRecord`, the record every per-completion output is built from.

A step's completions leave the trainer in four shapes, each built from these records (the file formats are those of
:mod:`.names`'s files and unchanged):

- a training sample, shown on the console and appended to ``completions.jsonl``: :meth:`CompletionRecord.sample_row`;
- an evaluation record, one line of ``eval/step_<k>.jsonl`` per held-out prompt: :func:`group_columns` over the
  prompt's records (:mod:`grpo_rollout.trainer.evaluation.held_out`);
- the dry run's sample (``validate-config --dry-run``): a record plus its token counts
  (:class:`grpo_rollout.trainer.dry_run.DryRunResult`);
- a token record, one line of ``rollouts/step_<k>.jsonl``: :meth:`grpo_rollout.runs.rollouts.RolloutRecord.of`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from . import names as rn

#: extras shown as columns of a training sample (column name → name of the rollout's extra)
SAMPLE_EXTRAS = (("turns", rn.NUM_TURNS_EXTRA), ("tool_calls", rn.NUM_TOOL_CALLS_EXTRA),
                 ("ended", rn.END_REASON_EXTRA), ("end_detail", rn.END_DETAIL_EXTRA))


@dataclass(kw_only=True)
class CompletionRecord:
    """One completion and what scoring and the update gave it.

    Attributes:
        prompt: the prompt it answered, as the dataset or environment gave it (a string or chat messages).
        completion: the decoded completion. reward: the weighted sum of the reward functions (``None``: not scored).
        rewards: each reward function's value (name → value; ``nan`` where a function returned ``None``).
        advantage: its group-relative advantage (``None`` before advantages are computed, e.g. in a dry run or an
            evaluation). truncated: cut by ``sampling.max_completion_length``. extras: the rollout's extras for it.
        weight_versions: the oldest and newest weight version that sampled it (``None``: unknown, shared weights).
    """

    prompt: Any
    completion: str
    reward: Optional[float]
    rewards: Dict[str, Any] = field(default_factory=dict)
    advantage: Optional[float] = None
    truncated: bool = False
    extras: Dict[str, Any] = field(default_factory=dict)
    weight_versions: Optional[Tuple[int, int]] = None

    def sample_row(self) -> Dict[str, Any]:
        """The training sample's columns (console and ``completions.jsonl``): prompt, completion, reward, one
        ``rewards/<name>`` per function, advantage, truncated, and the multi-turn extras of :data:`SAMPLE_EXTRAS`
        under their column names."""
        return {"prompt": self.prompt, "completion": self.completion, "reward": self.reward,
                **{rn.REWARDS_PREFIX + k: v for k, v in self.rewards.items()},
                "advantage": self.advantage, "truncated": self.truncated,
                **{column: self.extras[name] for column, name in SAMPLE_EXTRAS if name in self.extras}}


def group_columns(records: Sequence[CompletionRecord]) -> Dict[str, Any]:
    """One group's records (one prompt's completions, in order) as columns: ``prompt`` (the first's),
    ``completions``, ``reward`` and one ``rewards/<name>`` per function, each a list with one value per completion
    (the shape of an evaluation record)."""
    names: List[str] = list(dict.fromkeys(k for r in records for k in r.rewards))
    return {"prompt": records[0].prompt, "completions": [r.completion for r in records],
            "reward": [r.reward for r in records],
            **{rn.REWARDS_PREFIX + name: [r.rewards.get(name) for r in records] for name in names}}
