"""A pass-rate curriculum (``data.curriculum: pass_rate``): prompts that every or no completion solves sit out a
while, so the rollouts go to prompts the policy can still learn from.

A GRPO group whose completions all succeed, or all fail, has equal rewards and so a zero advantage: its rollouts
cost generation time and teach nothing. Each visit of a prompt (one group) gives its pass rate, the share of its
``num_generations`` completions whose total reward is at least ``data.curriculum_success_reward``. After
``data.curriculum_patience`` visits in a row with pass rate 0 or 1, the prompt sits out its next
``data.curriculum_pause`` turns in the prompt order (one turn per epoch), then comes back to be tried again, since
the policy may have learned a hard prompt or forgotten an easy one. One more visit with pass rate 0 or 1 pauses it
again; a visit with a mixed result starts its count from 0. A prompt that is always or never solved is then sampled
in 1 of ``1 + pause`` of its turns. No prompt leaves the data: a paused prompt keeps its place in every epoch's order
and each turn it sits out is counted (``curriculum/skipped``).

The idea follows prime-rl's easy and hard difficulty pools: DAPO's dynamic sampling (Yu et al. 2025,
arXiv:2503.14476, section 3.2) drops such groups after paying for their rollouts, a curriculum avoids rolling them
out. The rule here (patience, then a pause counted in turns) is this project's.

Every rank keeps the same record: each step's visits are gathered from every rank in rank order, and the draw of step
``s`` counts those of step ``s - lag`` (:class:`~.prompt_order.PromptOrder`: 1 in a synchronous run; ``max_staleness
+ 2`` with streamed rollouts, whose stream draws steps ahead of training), so every rank draws each step alike however
far its stream has run. The record is saved in checkpoints with the prompt order's position.
"""

from __future__ import annotations

from dataclasses import astuple, dataclass
from typing import Any, Dict, List, Optional, Sequence

from ..runs import names as rn


@dataclass
class PromptRecord:
    """One prompt's history: ``visits`` (groups rolled out), ``pass_rate`` of the last visit (0 to 1), ``streak``
    (visits in a row with pass rate 0 or 1), ``skips_left`` (turns still to sit out; > 0: paused)."""

    visits: int = 0
    pass_rate: float = 0.0
    streak: int = 0
    skips_left: int = 0


class PassRateCurriculum:
    """Which prompts sit out their turn, from each prompt's recent pass rate (see the module docstring).

    Args:
        patience: visits in a row with pass rate 0 or 1 before a prompt is paused (>= 1). pause: turns a paused
            prompt sits out (>= 1). success_reward: a completion whose total reward is at least this is solved.
    """

    def __init__(self, patience: int, pause: int, success_reward: float):
        if patience < 1 or pause < 1:
            raise ValueError("patience and pause must be at least 1")
        self.patience, self.pause, self.success_reward = patience, pause, success_reward
        self.records: Dict[int, PromptRecord] = {}
        self._skipped = self._all_solved = self._none_solved = self._mixed = 0  # since the last metrics()
        self._paused = 0  # prompts paused when the last draw began

    def admits(self, row: int) -> bool:
        """Whether dataset row ``row`` is drawn at this turn of the prompt order: false while it is paused, which
        uses up one of the turns it sits out."""
        record = self.records.get(row)
        if record is None or record.skips_left == 0:
            return True
        record.skips_left -= 1
        self._skipped += 1
        return False

    def pass_over(self, row: int) -> None:
        """Count a turn of ``row`` that the order passed over: its next turn came within the step that drew it."""
        self._skipped += 1

    def solved(self, rows: Sequence[int], rewards: Sequence[float], num_generations: int) -> List[int]:
        """How many completions of each of ``rows``' groups were solved (``rewards``: their completions' total
        rewards, ``num_generations`` per group, group after group)."""
        g = num_generations
        if len(rewards) != g * len(rows):
            raise ValueError(f"{len(rewards)} rewards for {len(rows)} groups of {g}")
        return [sum(r >= self.success_reward for r in rewards[i * g:(i + 1) * g]) for i in range(len(rows))]

    def tally(self, rows: Sequence[int], rewards: Sequence[float], num_generations: int) -> None:
        """Count the groups of a step by pass rate for :meth:`metrics` (all solved, none, mixed)."""
        for solved in self.solved(rows, rewards, num_generations):
            self._all_solved += solved == num_generations
            self._none_solved += solved == 0
            self._mixed += 0 < solved < num_generations

    def observe(self, rows: Sequence[int], rewards: Sequence[float], num_generations: int) -> None:
        """Count one visit of each of ``rows`` (dataset rows, one group each) in their records (``rewards`` as in
        :meth:`solved`); a prompt solved by every or no completion for ``patience`` visits in a row is paused."""
        g = num_generations
        for row, solved in zip(rows, self.solved(rows, rewards, g)):
            record = self.records.setdefault(int(row), PromptRecord())
            record.visits += 1
            record.pass_rate = solved / g
            record.streak = record.streak + 1 if solved in (0, g) else 0
            if record.streak >= self.patience:
                record.skips_left = self.pause  # its streak stays: one more such visit after it is back pauses it

    def draw_begins(self) -> None:
        """A step's draw begins: note how many prompts are paused (``curriculum/paused``)."""
        self._paused = len(self.paused_rows())

    def paused_rows(self) -> List[int]:
        """The dataset rows paused now (ascending)."""
        return sorted(row for row, record in self.records.items() if record.skips_left > 0)

    def metrics(self) -> Dict[str, float]:
        """The ``curriculum/*`` metrics since the last call (then counted from 0 again): the step's groups by pass
        rate (all solved, none solved, mixed), the turns sat out, and the prompts paused when the last draw began."""
        out = {rn.CURRICULUM_ALL_SOLVED: self._all_solved, rn.CURRICULUM_NONE_SOLVED: self._none_solved,
               rn.CURRICULUM_MIXED: self._mixed, rn.CURRICULUM_SKIPPED: self._skipped,
               rn.CURRICULUM_PAUSED: self._paused}
        self._skipped = self._all_solved = self._none_solved = self._mixed = 0
        return out

    def state(self) -> Dict[str, Any]:
        """The record for a checkpoint: ``{"records": {row: [visits, pass_rate, streak, skips_left]}}``."""
        return {"records": {row: list(astuple(r)) for row, r in self.records.items()}}

    def load(self, state: Optional[Dict[str, Any]]) -> None:
        """Put back :meth:`state`'s record (``None``: a checkpoint saved without a curriculum; every prompt new)."""
        self.records = {int(row): PromptRecord(int(v), float(p), int(s), int(k))
                        for row, (v, p, s, k) in ((state or {}).get("records") or {}).items()}


def pass_rate_curriculum(data: Any) -> Optional[PassRateCurriculum]:
    """The curriculum the config's ``data`` section asks for (``None`` for ``data.curriculum: none``)."""
    if data.curriculum != "pass_rate":
        return None
    return PassRateCurriculum(data.curriculum_patience, data.curriculum_pause, data.curriculum_success_reward)
