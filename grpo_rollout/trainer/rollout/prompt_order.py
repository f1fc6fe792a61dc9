"""Which prompts a step trains on: a deterministic function of the step, so resuming replays the same order."""

from __future__ import annotations

import random
from typing import List, Optional


class PromptOrder:
    """Walks the dataset epoch by epoch, ``prompts_per_step`` rows per step.

    Each epoch is a permutation of ``range(num_rows)`` seeded with ``seed + epoch`` (or the identity when
    ``shuffle`` is false); step ``s`` takes positions ``s·P … s·P + P - 1`` of the concatenated epochs. After
    :meth:`continue_from` (a resume), step ``s`` takes the ``P`` positions after the saved one instead, so a run
    resumed with another ``P`` neither repeats nor skips prompts.

    Args:
        num_rows: dataset size (> 0). prompts_per_step: ``P``. seed: base seed. shuffle: permute each epoch.
    """

    def __init__(self, num_rows: int, prompts_per_step: int, seed: int, shuffle: bool = True):
        if num_rows <= 0 or prompts_per_step <= 0:
            raise ValueError("num_rows and prompts_per_step must be positive")
        self.num_rows, self.per_step, self.seed, self.shuffle = num_rows, prompts_per_step, seed, shuffle
        self._epochs: dict[int, List[int]] = {}
        self._origin_step, self._origin_position = 0, 0
        #: streaming rollouts: every rank's place in its prompt sequence at the checkpoint resumed from
        #: (:meth:`~.stage.RolloutStage.stream_state`), or ``None``
        self.resumed_stream: Optional[List[dict]] = None

    def continue_from(self, step: int, position: dict, stream: Optional[List[dict]] = None) -> None:
        """Make step ``step`` start at ``position`` (from :meth:`position` of the run that saved it, under any
        ``prompts_per_step``); ``stream``: the saved run's streaming state, if it streamed."""
        self.resumed_stream = stream
        self._origin_step = step
        self._origin_position = int(position["epoch"]) * self.num_rows + int(position["offset"])

    def _start(self, step: int) -> int:
        return self._origin_position + (step - self._origin_step) * self.per_step

    def _epoch(self, epoch: int) -> List[int]:
        kept = self._epochs  # one read: streaming workers call this from several threads
        if epoch in kept:
            return kept[epoch]
        order = list(range(self.num_rows))
        if self.shuffle:
            random.Random(self.seed + epoch).shuffle(order)
        self._epochs = {epoch: order}  # keep only the current epoch
        return order

    def indices(self, step: int) -> List[int]:
        """Row indices of step ``step`` (0-based)."""
        start = self._start(step)
        return [self._epoch(pos // self.num_rows)[pos % self.num_rows] for pos in range(start, start + self.per_step)]

    def position(self, step: int) -> dict:
        """Where the data stands before step ``step``: epoch and row offset (stored in checkpoints)."""
        pos = self._start(step)
        return {"epoch": pos // self.num_rows, "offset": pos % self.num_rows}
