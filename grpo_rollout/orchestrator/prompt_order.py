"""Which prompts a step trains on: a deterministic function of the step, so resuming replays the same order."""

from __future__ import annotations

import random
import threading
from typing import Any, Dict, List, Optional, Tuple

Visits = List[Tuple[List[int], List[float]]]  # (dataset rows, their groups' rewards) rolled out in one step
KEPT_DRAWS = 512  # with a curriculum: steps whose draws are kept (a stream re-rolls positions of recent steps)


class PromptOrder:
    """Walks the dataset epoch by epoch, ``prompts_per_step`` rows per step.

    Each epoch is a permutation of ``range(num_rows)`` seeded with ``seed + epoch`` (or the identity when
    ``shuffle`` is false); step ``s`` takes positions ``s·P … s·P + P - 1`` of the concatenated epochs. After
    :meth:`continue_from` (a resume), step ``s`` takes the ``P`` positions after the saved one instead, so a run
    resumed with another ``P`` neither repeats nor skips prompts.

    With a ``curriculum`` (:class:`~.curriculum.PassRateCurriculum`) a step takes the next ``P`` positions whose row
    the curriculum admits, skipping paused rows' positions, and a row's next turn within the same step (unless the
    dataset has fewer than ``P`` rows). The order then depends on the rewards: each step's visits are handed to
    :meth:`count`, and the draw of step ``s`` applies those of step ``s - lag`` first (``lag`` 1: the previous step's;
    a stream, which draws steps ahead of training, uses a larger one, and waits (:meth:`ready`) rather than draw a
    step whose visits are not counted yet). Steps are drawn once each, in order, and kept; the record, the visits
    not applied yet and the kept draws travel with :meth:`position`, so a resumed run draws what the saved one did.

    Args:
        num_rows: dataset size (> 0). prompts_per_step: ``P``. seed: base seed. shuffle: permute each epoch.
        curriculum: ``None``, or what decides which rows sit out their turn. lag: see above (>= 1).
    """

    def __init__(self, num_rows: int, prompts_per_step: int, seed: int, shuffle: bool = True,
                 curriculum: Any = None, lag: int = 1):
        if num_rows <= 0 or prompts_per_step <= 0 or lag < 1:
            raise ValueError("num_rows, prompts_per_step and lag must be positive")
        self.num_rows, self.per_step, self.seed, self.shuffle = num_rows, prompts_per_step, seed, shuffle
        self.curriculum, self.lag = curriculum, lag
        self._epochs: dict[int, List[int]] = {}
        self._origin_step, self._origin_position = 0, 0
        # with a curriculum: step -> (first position, rows drawn, rows that sat out their turn); the next step to
        # draw and its first position; step -> visits counted in it, not applied yet; the last step counted
        self._draws: Dict[int, Tuple[int, List[int], List[int]]] = {}
        self._next_step, self._end = 0, 0
        self._pending: Dict[int, Visits] = {}
        self._counted = -1
        self._lock = threading.RLock()  # stream workers draw from their threads
        #: streaming rollouts: every rank's place in its prompt sequence at the checkpoint resumed from
        #: (:meth:`~.stream_source.StreamSource.state`), or ``None``
        self.resumed_stream: Optional[List[dict]] = None

    def continue_from(self, step: int, position: dict, stream: Optional[List[dict]] = None) -> None:
        """Make step ``step`` start at ``position`` (from :meth:`position` of the run that saved it, under any
        ``prompts_per_step``); ``stream``: the saved run's streaming state, if it streamed."""
        self.resumed_stream = stream
        self._origin_step = step
        self._origin_position = int(position["epoch"]) * self.num_rows + int(position["offset"])
        if self.curriculum is not None:
            self._load(step, position.get("curriculum") or {})

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
            RuntimeError: with a curriculum, a step dropped from the kept draws, or one whose draw needs visits not
                counted yet (see :meth:`ready`).
        """
        if self.curriculum is not None:
            return list(self._draw(step)[1])
        start = self._start(step)
        return [self._row(pos) for pos in range(start, start + self.per_step)]

    # -- with a curriculum ---------------------------------------------------------------------------------------------
    def count(self, step: int, visits: Visits) -> None:
        """Step ``step``'s visits (every rank's, in rank order: every rank must hold the same), for the draw of step
        ``step + lag``; counted again (a step replayed after a resume), they replace the first count."""
        with self._lock:
            for rows, rewards in visits:
                self.curriculum.tally(rows, rewards, len(rewards) // max(len(rows), 1))
            self._pending[step] = [(list(rows), list(rewards)) for rows, rewards in visits]
            self._counted = max(self._counted, step)

    def ready(self, step: int) -> bool:
        """Whether step ``step`` can be drawn now (or was): the visits its draw applies are counted."""
        with self._lock:
            return self.curriculum is None or step in self._draws or step - self.lag <= self._counted

    def sat_out(self, step: int) -> List[int]:
        """With a curriculum: the rows that sat out their turn in step ``step``'s draw (empty without one)."""
        return list(self._draw(step)[2]) if self.curriculum is not None else []

    def _draw(self, step: int) -> Tuple[int, List[int], List[int]]:
        """Step ``step``'s first position, rows, and the rows that sat out their turn: drawn once, after the steps
        before it (the curriculum's skips count)."""
        with self._lock:
            if step in self._draws:
                return self._draws[step]
            if step < self._next_step:
                raise RuntimeError(f"the prompt order no longer holds step {step + 1}'s draw (it keeps the last "
                                   f"{KEPT_DRAWS} steps')")
            if not self.ready(step):
                raise RuntimeError(f"step {step + 1} cannot be drawn before the visits of step "
                                   f"{step - self.lag + 1} are counted")
            while self._next_step <= step:
                self._draw_next()
            return self._draws[step]

    def _draw_next(self) -> None:
        step, position = self._next_step, self._end
        for rows, rewards in self._pending.pop(step - self.lag, []):
            self.curriculum.observe(rows, rewards, len(rewards) // max(len(rows), 1))
        self.curriculum.draw_begins()
        rows, skipped = [], []
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
        self._draws[step] = (self._end, rows, skipped)
        self._draws.pop(step - KEPT_DRAWS, None)
        self._next_step, self._end = step + 1, position

    def _drawn_start(self, step: int) -> int:
        """The first position of a kept step's draw, or of the next step to draw."""
        with self._lock:
            if step in self._draws:
                return self._draws[step][0]
            if step == self._next_step:
                return self._end
            raise RuntimeError(f"the prompt order's position before step {step + 1} is not known (next to draw: "
                               f"step {self._next_step + 1})")

    def _state(self) -> Dict[str, Any]:
        return {**self.curriculum.state(), "next": [self._next_step, self._end], "counted": self._counted,
                "pending": {step: [list(v) for v in visits] for step, visits in self._pending.items()},
                "draws": {step: [first, rows, skipped] for step, (first, rows, skipped) in self._draws.items()}}

    def _load(self, step: int, state: Dict[str, Any]) -> None:
        """Put back :meth:`_state` saved before step ``step`` (a checkpoint without a curriculum: every prompt new). Its
        draws are kept when they have this run's ``prompts_per_step``; else the order goes on from the position."""
        self.curriculum.load(state)
        self._pending = {int(s): [(list(r), list(w)) for r, w in visits]
                         for s, visits in (state.get("pending") or {}).items()}
        self._counted = int(state.get("counted", step - 1))
        draws = {int(s): (int(first), list(rows), list(skipped))
                 for s, (first, rows, skipped) in (state.get("draws") or {}).items()}
        if draws and all(len(rows) == self.per_step for _, rows, _ in draws.values()) and "next" in state:
            self._draws = draws
            self._next_step, self._end = (int(x) for x in state["next"])
        else:
            self._draws, self._next_step, self._end = {}, step, self._origin_position

    def position(self, step: int) -> dict:
        """Where the data stands before step ``step``: epoch and row offset (stored in checkpoints), and with a
        curriculum its state (``"curriculum"``: the record, the visits not applied yet, the kept draws)."""
        with self._lock:
            pos = self._start(step)
            out: Dict[str, Any] = {"epoch": pos // self.num_rows, "offset": pos % self.num_rows}
            if self.curriculum is not None:
                out["curriculum"] = self._state()
            return out
