"""Streaming rollouts (``training.max_staleness: k`` ≥ 1): groups roll out continuously, the trainer takes finished ones.

A step of the synchronous trainer waits for its slowest episode, and the servers wait while it trains. Here each
*group* (one prompt's ``num_generations`` episodes) is its own rollout call, run on its own worker thread, up to
``max_inflight`` at once; a finished, scored group goes into a buffer, and each step takes ``groups_per_step`` of
them, the oldest weights first. A slow episode no longer holds up a step: the step trains on groups that finished, and
the slow one joins a later step, if it is still fresh enough.

The bound (AReaL's bounded staleness, Fu et al. 2025, arXiv:2505.24298; prime-rl's ``max_off_policy_steps``): a
group sampled with weight version ``v`` (the oldest version any of its answers carried) is trained at version
``current`` only when ``current - v <= k``. An older one is dropped and its prompt rolled out again (both counted).
Groups in flight, buffered, or taken by the trainer at its current version are at most ``(k + 1) ×
groups_per_step`` (the groups the next ``k + 1`` steps train), so a group that finishes in time is never dropped;
the sampler correction (``training.sampler_correction``) weighs every token by what sampled it.

Prompt order: this rank's prompts are a sequence of *positions* (``row_at(position)`` gives the step a position
belongs to and its dataset row). Groups start in position order, a dropped one goes back to the front of the queue,
and every position is trained once (or, with ``keep`` returning False, e.g. dynamic sampling's groups without reward
variance, left out once). :meth:`GroupStream.state` names the first position not yet used and the used ones after it,
so a resumed run rolls out again exactly what was in flight or buffered at its checkpoint.

The run's end: with ``end`` (the run's last step × ``groups_per_step``), no group starts at a position past the last
step's, so the last steps wait for their own groups (stragglers included) instead of taking the next epoch's fast
ones. A position left out (refused by ``keep``, failed under ``rollout.on_error``, or stale ``max_attempts`` times)
moves the end one position on: the next prompt takes its place, and every step still takes ``groups_per_step``.

Threads: a plain ``def`` rollout runs on the group's worker thread; an ``async def`` one runs on one event loop shared
by every group (:class:`~grpo_rollout.user_code.coroutines.SharedLoop`), its worker thread waiting for it. Rewards are
scored on the worker thread. Workers and the loop are daemon threads, so an interrupted run exits without waiting for
episodes still running.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Deque, Dict, List, Optional, Set, Tuple

from ..user_code.coroutines import SharedLoop, shared_loop
from .batch import ScoredBatch
from .stream_stats import StreamStats

#: ``roll(position, step, row, attempt)``: one group's scored batch (``attempt``: 0, then 1, 2, ... for a prompt
#: rolled again), or ``None`` for a group left out of its epoch (its episodes failed outside the model: on_error).
Roll = Callable[[int, int, Dict[str, Any], int], Optional[ScoredBatch]]


@dataclass(order=True)
class _Finished:
    version: int
    position: int
    batch: ScoredBatch = field(compare=False)
    attempt: int = field(compare=False, default=0)
    forced: bool = field(compare=False, default=False)  # refused by keep, taken anyway (max_refused reached)


class GroupStream:
    """Keeps up to ``max_inflight`` groups rolling out and hands finished ones to the trainer.

    Args:
        roll: rolls out and scores one group (see :data:`Roll`); raises what the rollout or a reward raised.
        row_at: ``position → (step, row)`` (the step the position belongs to: its seed; the dataset row).
        groups_per_step: groups one step takes (this rank's share of ``training.prompts_per_step``).
        max_staleness: ``k``, versions a group may be behind the trainer's weights when it is trained (≥ 1).
        max_inflight: groups rolling out at once. start: the first position. used: positions after ``start``
            already used (a resumed run's :meth:`state`). keep: whether a finished group is trained (``False``: left
            out and counted, e.g. no reward variance); default keeps all. max_refused: groups ``keep`` may refuse
            between two steps; later ones are taken anyway (dynamic sampling's ``max_rounds`` × groups per step;
            ``None``: no bound). max_attempts: rollouts of one prompt dropped as stale before it is left out of the
            epoch (its episodes take longer than ``k`` steps; named in :class:`StreamStats`). ready: whether a new
            position's row can be known yet (a curriculum's draw waits for earlier steps' rewards: :meth:`wake` once
            it can); default always. end: the first position no group may start at (the run's steps × groups per
            step; ``None``: no end). replaced: positions left out before a resume (its :meth:`state`), each
            moving ``end`` one on.
    """

    def __init__(self, roll: Roll, row_at: Callable[[int], Tuple[int, Dict[str, Any]]], *,
                 ready: Optional[Callable[[int], bool]] = None, groups_per_step: int,
                 max_staleness: int, max_inflight: int, start: int = 0, used: Tuple[int, ...] = (),
                 keep: Optional[Callable[[ScoredBatch], bool]] = None, max_refused: Optional[int] = None,
                 max_attempts: int = 3, end: Optional[int] = None, replaced: int = 0):
        self.roll, self.row_at, self.keep, self.max_refused, self.max_attempts = roll, row_at, keep, max_refused, \
            max_attempts
        self.ready = ready
        self.per_step, self.k, self.max_inflight = groups_per_step, max_staleness, max_inflight
        self.cap = (max_staleness + 1) * groups_per_step  # running + buffered + taken for the step being trained
        self._next, self._used = start, set(used)
        self._frontier = start
        self._replaced = replaced  # positions left out, each replaced by one past the end
        self._end = None if end is None else end + replaced
        self._again: Deque[Tuple[int, int]] = deque()  # (position, attempt) to roll out before new positions
        self._running: Set[int] = set()
        self._buffer: List[_Finished] = []
        self._error: Optional[BaseException] = None
        self._dropped_stale = self._dropped_no_signal = self._refused = 0
        self._skipped: List[Any] = []  # prompts left out after max_attempts stale rollouts, since the last step
        self._taken: List[int] = []  # positions the step being trained took: used once it is (commit)
        self._idle_s, self._idle_since = 0.0, time.perf_counter()  # no group running: in all, and since when
        self._last_take = time.perf_counter()
        self._cond = threading.Condition()
        self._closed = False
        self._loop = SharedLoop("grpo-rollout-stream-loop")

    # -- producing --------------------------------------------------------------------------------------------------
    def _next_position(self) -> Tuple[int, int]:
        if self._again:
            return self._again.popleft()
        self._next = max(self._next, self._frontier)  # the frontier may have passed positions used before a resume
        while self._next in self._used:  # used before a resume
            self._next += 1
        self._next += 1
        return self._next - 1, 0

    def _peek_new(self) -> int:
        """The next new position, not taken yet (holding the lock)."""
        position = max(self._next, self._frontier)
        while position in self._used:
            position += 1
        return position

    def _fill(self) -> None:
        """Start groups while there is room (call holding the lock)."""
        while (not self._closed and self._error is None and len(self._running) < self.max_inflight
               and len(self._running) + len(self._buffer) + len(self._taken) < self.cap):
            if not self._again and self._end is not None and self._peek_new() >= self._end:
                break  # past the run's last step: no step would take it
            if not self._again and self.ready is not None and not self.ready(self._peek_new()):
                break  # its row is not known yet: wake() starts it
            position, attempt = self._next_position()
            if not self._running:
                self._idle_s += time.perf_counter() - self._idle_since
            self._running.add(position)
            threading.Thread(target=self._run, args=(position, attempt), daemon=True,
                             name=f"grpo-rollout-group-{position}").start()

    def _run(self, position: int, attempt: int) -> None:
        try:
            step, row = self.row_at(position)
            with shared_loop(self._loop):
                batch = self.roll(position, step, row, attempt)
            kept = batch is not None and (self.keep is None or self.keep(batch))
        except BaseException as exc:  # noqa: BLE001 - handed to the trainer, which stops the run naming it
            with self._cond:
                self._ended(position)
                self._error = self._error or exc
                self._cond.notify_all()
            return
        with self._cond:
            self._ended(position)
            if batch is None:  # failed outside the model on every attempt: left out (roll counted it)
                self._left_out(position)
                self._fill()
                self._cond.notify_all()
                return
            forced = not kept and self.max_refused is not None and self._refused >= self.max_refused
            if kept or forced:  # forced: the step must go on, so it is taken anyway
                version = batch.rollout.weight_version
                self._buffer.append(_Finished(-1 if version is None else version, position, batch, attempt, forced))
            else:
                self._dropped_no_signal, self._refused = self._dropped_no_signal + 1, self._refused + 1
                self._left_out(position)
            self._fill()
            self._cond.notify_all()

    def _ended(self, position: int) -> None:
        """A group stopped running (holding the lock)."""
        self._running.discard(position)
        if not self._running:
            self._idle_since = time.perf_counter()

    def _idle_share(self) -> float:
        """The share of the time since the last take with no group running (holding the lock; starts a new count)."""
        now = time.perf_counter()
        idle = self._idle_s + (0.0 if self._running else now - self._idle_since)
        window, self._last_take, self._idle_s = now - self._last_take, now, 0.0
        if not self._running:
            self._idle_since = now
        return min(1.0, idle / window) if window > 0 else 0.0

    def _left_out(self, position: int) -> None:
        """Position ``position`` is used without being trained: the next one past the end takes its place (holding
        the lock)."""
        self._mark_used(position)
        self._replaced += 1
        if self._end is not None:
            self._end += 1

    def _exhausted(self) -> bool:
        """Whether no group is left to come: none running, buffered or to roll again, and no position before the end
        (holding the lock)."""
        return (not self._running and not self._buffer and not self._again and self._end is not None
                and self._peek_new() >= self._end)

    def _mark_used(self, position: int) -> None:
        self._used.add(position)
        while self._frontier in self._used:
            self._used.discard(self._frontier)
            self._frontier += 1

    # -- consuming --------------------------------------------------------------------------------------------------
    def take(self, version: int) -> Tuple[List[ScoredBatch], StreamStats]:
        """Wait for ``groups_per_step`` groups at most ``k`` versions behind ``version`` (the trainer's weights) and
        take them, oldest weights first; older ones are dropped and rolled again.

        Raises:
            whatever a rollout or reward raised (the first one; no group is started after it).
            RuntimeError: no group is left to take (a step past the run's last: every position before ``end`` was
                taken).
        """
        start = time.perf_counter()
        taken: List[_Finished] = []
        with self._cond:
            self._taken = []  # the last step's groups were trained (commit) or the run stopped: they leave the cap
            self._fill()
            in_flight = len(self._running)
            while len(taken) < self.per_step:
                if self._error is not None:
                    raise self._error
                self._drop_stale(version)
                if self._buffer:
                    self._buffer.sort()
                    taken.append(self._buffer.pop(0))
                    self._taken.append(taken[-1].position)
                    continue
                self._fill()
                if self._exhausted():
                    raise RuntimeError(f"the rollout stream has no group left for this step: every position before "
                                       f"{self._end} (the run's last step's end) was taken")
                self._cond.wait(timeout=1.0)
            self._fill()
            no_signal = None if self.keep is None else self._dropped_no_signal
            stats = StreamStats([0 if f.version < 0 else version - f.version for f in taken], self._dropped_stale,
                                no_signal, in_flight, len(self._buffer), time.perf_counter() - start,
                                self._idle_share(), sum(f.forced for f in taken), self._skipped)
            self._dropped_stale = self._dropped_no_signal = self._refused = 0
            self._skipped = []
        return [f.batch for f in taken], stats

    def wake(self) -> None:
        """Start the groups that were waiting for their rows (see ``ready``)."""
        with self._cond:
            self._fill()
            self._cond.notify_all()

    def commit(self) -> None:
        """The groups of the last :meth:`take` were trained: their prompts count as used (a checkpoint made after an
        interrupted step rolls them out again)."""
        with self._cond:
            for position in self._taken:
                self._mark_used(position)

    def _drop_stale(self, version: int) -> None:
        """Put the buffered groups more than ``k`` versions behind back in the queue (holding the lock)."""
        stale = [f for f in self._buffer if f.version >= 0 and version - f.version > self.k]
        for f in sorted(stale):
            self._buffer.remove(f)
            self._dropped_stale += 1
            if f.attempt + 1 < self.max_attempts:
                self._again.append((f.position, f.attempt + 1))
            else:  # its episodes outlast k steps every time: left out of the epoch, and named
                prompts = getattr(getattr(f.batch, "scores", None), "prompts", None)
                self._skipped.append(prompts[0] if prompts else f"prompt at position {f.position}")
                self._left_out(f.position)

    def state(self) -> Dict[str, Any]:
        """Where this rank's prompt sequence stands: ``first_unused`` (every earlier position was trained or left
        out), ``used`` (the later ones that were; running, buffered and taken but uncommitted groups count as
        unused) and ``replaced`` (positions left out so far, each replaced by one past the end)."""
        with self._cond:
            return {"first_unused": self._frontier, "used": sorted(self._used), "replaced": self._replaced}

    def close(self) -> None:
        """Start no more groups (running ones end on their daemon threads, their results unused)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._loop.close()
