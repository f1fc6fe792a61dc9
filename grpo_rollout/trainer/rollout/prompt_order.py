"""Which prompts a step trains on: a deterministic function of the step, so resuming replays the same order."""

from __future__ import annotations

import random
from typing import Any, Dict, List, Optional, Tuple


class PromptOrder:
    """Walks the dataset epoch by epoch, ``prompts_per_step`` rows per step.

    Each epoch is a permutation of ``range(num_rows)`` seeded with ``seed + epoch`` (or the identity when
    ``shuffle`` is false); step ``s`` takes positions ``s·P … s·P + P - 1`` of the concatenated epochs. After
    :meth:`continue_from` (a resume), step ``s`` takes the ``P`` positions after the saved one instead, so a run
    resumed with another ``P`` neither repeats nor skips prompts.

    With a ``curriculum`` (:class:`~.curriculum.PassRateCurriculum`) a step takes the next ``P`` positions whose row
    the curriculum admits, skipping paused rows' positions, and a row's next turn within the same step (unless the
    dataset has fewer than ``P`` rows): the order then depends on the rewards seen so far, so the steps are drawn once
    each, in order, and the curriculum's record travels with :meth:`position`.

    Args:
        num_rows: dataset size (> 0). prompts_per_step: ``P``. seed: base seed. shuffle: permute each epoch.
        curriculum: ``None``, or what decides which rows sit out their turn.
    """

    def __init__(self, num_rows: int, prompts_per_step: int, seed: int, shuffle: bool = True,
                 curriculum: Any = None):
        if num_rows <= 0 or prompts_per_step <= 0:
            raise ValueError("num_rows and prompts_per_step must be positive")
        self.num_rows, self.per_step, self.seed, self.shuffle = num_rows, prompts_per_step, seed, shuffle
        self.curriculum = curriculum
        self._epochs: dict[int, List[int]] = {}
        self._origin_step, self._origin_position = 0, 0
        # with a curriculum: step -> (first position, rows drawn, rows that sat out their turn)
        self._draws: Dict[int, Tuple[int, List[int], List[int]]] = {}
        self._end = 0  # with a curriculum: the position after the last step drawn
        #: streaming rollouts: every rank's place in its prompt sequence at the checkpoint resumed from
        #: (:meth:`~.stage.RolloutStage.stream_state`), or ``None``
        self.resumed_stream: Optional[List[dict]] = None

    def continue_from(self, step: int, position: dict, stream: Optional[List[dict]] = None) -> None:
        """Make step ``step`` start at ``position`` (from :meth:`position` of the run that saved it, under any
        ``prompts_per_step``); ``stream``: the saved run's streaming state, if it streamed."""
        self.resumed_stream = stream
        self._origin_step = step
        self._origin_position = int(position["epoch"]) * self.num_rows + int(position["offset"])
        self._draws = {}
        if self.curriculum is not None:
            self.curriculum.load(position.get("curriculum"))

    def _start(self, step: int) -> int:
        if self.curriculum is not None:
            return self._drawn_start(step)
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

    def _row(self, position: int) -> int:
        return self._epoch(position // self.num_rows)[position % self.num_rows]

    def indices(self, step: int) -> List[int]:
        """Row indices of step ``step`` (0-based).

        Raises:
            RuntimeError: with a curriculum, a step asked for before the one ahead of it was drawn.
        """
        if self.curriculum is not None:
            return list(self._draw(step)[1])
        start = self._start(step)
        return [self._row(pos) for pos in range(start, start + self.per_step)]

    def sat_out(self, step: int) -> List[int]:
        """With a curriculum: the rows that sat out their turn in step ``step``'s draw (empty without one)."""
        return list(self._draw(step)[2]) if self.curriculum is not None else []

    def _draw(self, step: int) -> Tuple[int, List[int], List[int]]:
        """With a curriculum: step ``step``'s first position, rows, and the rows that sat out their turn, drawn once
        (the curriculum's skips count)."""
        if step in self._draws:
            return self._draws[step]
        next_step, position = self._next_draw()
        if step != next_step:
            raise RuntimeError(f"the prompt order draws step {step + 1} before step {next_step + 1} (a curriculum "
                               "draws the steps in order)")
        first, rows, skipped = position, [], []
        self.curriculum.start_draw()
        distinct = self.num_rows >= self.per_step  # else a step must take some rows twice
        # ends: each skip uses up one of a paused row's turns, and a step holds at most num_rows distinct rows
        while len(rows) < self.per_step:
            row = self._row(position)
            position += 1
            if not self.curriculum.admits(row):
                skipped.append(row)
            elif distinct and row in rows:  # its next turn came within this step: passed over (its result is unknown)
                self.curriculum.pass_over(row)
                skipped.append(row)
            else:
                rows.append(row)
        self._draws = {s: d for s, d in self._draws.items() if s >= step - 1}
        self._draws[step] = (first, rows, skipped)
        self._end = position
        return self._draws[step]

    def _next_draw(self) -> Tuple[int, int]:
        """With a curriculum: the next step to draw and its first position."""
        if not self._draws:
            return self._origin_step, self._origin_position
        return max(self._draws) + 1, self._end

    def _drawn_start(self, step: int) -> int:
        """With a curriculum: the first position of the next step to draw or of the last one drawn."""
        next_step, position = self._next_draw()
        if step == next_step:
            return position
        if step == next_step - 1 and step in self._draws:
            return self._draws[step][0]
        raise RuntimeError(f"the prompt order's position before step {step + 1} is not known (next to draw: "
                           f"step {next_step + 1})")

    def position(self, step: int) -> dict:
        """Where the data stands before step ``step``: epoch and row offset (stored in checkpoints), and with a
        curriculum its record (``"curriculum"``). With a curriculum ``step`` is the next step to draw or the last one
        drawn."""
        pos = self._start(step)
        out: Dict[str, Any] = {"epoch": pos // self.num_rows, "offset": pos % self.num_rows}
        if self.curriculum is not None:  # a step drawn already (an interrupted one): the record before its draw
            out["curriculum"] = self.curriculum.state(before_draw=step in self._draws)
        return out
