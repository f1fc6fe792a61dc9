"""Episodes that fail outside the model (``rollout.on_error``): played again, or left out of the step, instead of
stopping the run or being scored 0 into their group's baseline.

A rollout, or an environment, raises :class:`~grpo_rollout.rollouts.contract.EpisodeFailure` when an episode failed
for a reason that is not the model's (an MCP or environment server gone, a sandbox crashed); any other error is a bug
or a bad setting and stops the run whatever ``on_error`` says. Since a rollout call plays a whole step's groups, a
failed call does not say which group failed: the step is then played again one group at a time
(:func:`play_per_group`), each group ``1 + max_retries`` times at most with ``retry`` (once with ``drop``), each
attempt with a seed of its own; the groups that still fail are left out. The failed call counts as one failed group
(``episodes/failed`` += ``num_generations``) and all its groups as played again (``episodes/retried``). With several
training processes every rank then trains the fewest groups any rank kept (FSDP needs the same micro-batches on every
rank).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, fields
from typing import Any, Callable, Dict, List, Optional, Tuple

from ...rollouts.contract import EpisodeFailure
from ...runs import names as rn
from ..batch import ScoredBatch


@dataclass
class FailureCounts:
    """Episodes of a step (``num_generations`` per failed group): ``failed`` (every failed attempt), ``retried``
    (attempts played again), ``dropped`` (left out of the step)."""

    failed: int = 0
    retried: int = 0
    dropped: int = 0

    def add(self, other: "FailureCounts") -> None:
        """Add ``other``'s counts to these."""
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def metrics(self) -> Dict[str, float]:
        """The ``episodes/*`` metrics (episodes, not groups)."""
        return {rn.EPISODES_FAILED: self.failed, rn.EPISODES_RETRIED: self.retried, rn.EPISODES_DROPPED: self.dropped}


def play_group(play: Callable[[int], ScoredBatch], n: int, on_error: str, max_retries: int,
               counts: FailureCounts) -> Tuple[Optional[ScoredBatch], Optional[EpisodeFailure]]:
    """One group played with ``play(attempt)`` until it does not raise :class:`EpisodeFailure`: at most
    ``1 + max_retries`` times with ``on_error: retry``, once with ``drop``. Returns the batch, or ``None`` and the last
    failure when every attempt failed (its ``n`` episodes counted dropped)."""
    attempts = 1 + (max_retries if on_error == "retry" else 0)
    for attempt in range(attempts):
        try:
            return play(attempt), None
        except EpisodeFailure as exc:
            counts.failed += n
            last = exc
            if attempt + 1 < attempts:
                counts.retried += n
    counts.dropped += n
    return None, last


def play_per_group(play: Callable[[int, int], ScoredBatch], num_groups: int, n: int, on_error: str,
                   max_retries: int, counts: FailureCounts) -> Tuple[List[ScoredBatch], Optional[EpisodeFailure]]:
    """Each of ``num_groups`` groups played by ``play(group, attempt)`` (:func:`play_group`); the groups that were
    played, in order, and the last failure (``None``: none was left out)."""
    kept, last = [], None
    for group in range(num_groups):
        batch, failure = play_group(lambda attempt: play(group, attempt), n, on_error, max_retries, counts)
        if batch is not None:
            kept.append(batch)
        last = failure or last
    return kept, last


class EpisodeFailures:
    """What a rollout stage does with :class:`EpisodeFailure` (``rollout.on_error``, ``rollout.max_retries``), and the
    step's counts (several stream workers add to them at once).

    Args:
        rollout: the config's ``rollout`` section. num_generations: episodes per group. dist: the process group.
    """

    def __init__(self, rollout: Any, num_generations: int, dist: Any):
        self.on_error, self.max_retries, self.n, self.dist = rollout.on_error, rollout.max_retries, num_generations, dist
        self.counts, self.lock = FailureCounts(), threading.Lock()

    def play_step(self, step: int, play_all: Callable[[], ScoredBatch], play_one: Callable[[int, int], ScoredBatch],
                  num_groups: int) -> ScoredBatch:
        """``play_all()``; when it raises :class:`EpisodeFailure` (and ``on_error`` is not ``stop``) each group again
        with ``play_one(group, attempt)`` (:func:`play_per_group`), the groups that still fail left out.

        Raises:
            EpisodeFailure: ``on_error: stop``, or every group failed (step ``step``, 0-based, named 1-based).
        """
        try:
            return play_all()
        except EpisodeFailure as exc:
            if self.on_error == "stop":
                raise
            first = exc
        # which group failed is not known: counted as one failed group, every group played again
        counts = FailureCounts(failed=self.n, retried=num_groups * self.n)
        kept, last = play_per_group(play_one, num_groups, self.n, self.on_error, self.max_retries, counts)
        with self.lock:
            self.counts.add(counts)
        if not kept:
            raise EpisodeFailure(f"step {step + 1}: every group failed (rollout.on_error: {self.on_error}, "
                                 f"max_retries: {self.max_retries}); the last failure: {last or first}") from last
        return ScoredBatch.concat(kept)

    def play_group(self, play: Callable[[int], ScoredBatch]) -> ScoredBatch:
        """One streamed group, ``play(attempt)`` retried as :func:`play_group` says.

        Raises:
            EpisodeFailure: ``on_error: stop``, or every attempt failed (a stream cannot leave a group out yet:
                validate-config refuses ``on_error: drop`` with ``training.max_staleness`` >= 1).
        """
        if self.on_error == "stop":
            return play(0)
        counts = FailureCounts()
        batch, failure = play_group(play, self.n, self.on_error, self.max_retries, counts)
        if batch is None:
            counts.dropped -= self.n  # not left out: the stream stops the run
        with self.lock:
            self.counts.add(counts)
        if batch is None:
            raise EpisodeFailure(f"a group failed {1 + self.max_retries} times (rollout.on_error: retry): "
                                 f"{failure}") from failure
        return batch

    def even_out(self, batch: ScoredBatch) -> ScoredBatch:
        """With ``on_error`` retry or drop, this rank's batch cut to the fewest groups any rank kept (a collective:
        FSDP needs the same micro-batches on every rank); the groups cut count as dropped."""
        if self.on_error == "stop":
            return batch
        [fewest] = self.dist.min([batch.num_groups])
        if batch.num_groups > fewest:
            with self.lock:
                self.counts.dropped += (batch.num_groups - int(fewest)) * self.n
            batch = batch.select_groups(range(int(fewest)))
        return batch

    def metrics(self) -> Dict[str, float]:
        """The step's ``episodes/failed``, ``episodes/retried``, ``episodes/dropped`` over every rank (a collective
        with ``on_error`` retry or drop; nothing with ``stop``), then counted from 0 again."""
        if self.on_error == "stop":
            return {}
        with self.lock:
            counts, self.counts = self.counts, FailureCounts()
        failed, retried, dropped = self.dist.sum([counts.failed, counts.retried, counts.dropped])
        return FailureCounts(int(failed), int(retried), int(dropped)).metrics()
