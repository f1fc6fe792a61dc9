"""Episodes that fail outside the model (``rollout.on_error``): played again, or left out of the step, instead of
stopping the run or being scored 0 into their group's baseline.

An attempt *failed outside the model* when it raised :class:`~grpo_rollout.rollouts.contract.EpisodeFailure` (an MCP
or environment server gone, a sandbox crashed), or one of ``rollout.failure_errors`` (by default Python's and httpx's
connection and timeout errors: a third-party client the user's environment drives cannot raise EpisodeFailure) from
the rollout, an environment or a reward (:func:`failure_cause`); any other error is a bug or a bad setting and stops
the run whatever ``on_error`` says. A rollout call plays a whole step's groups; the built-in multi-turn rollouts and
``agent_rollout`` say which groups failed and keep the others (:class:`PartlyPlayed`): only the failed groups are
played again, each alone, ``1 + max_retries`` times at most with ``retry`` (once with ``drop``, i.e. left out), each
attempt with a seed of its own (:meth:`EpisodeFailures.replay_step`). A call that failed whole does not say which
group failed: the step is then played again one group at a time (:func:`play_per_group`) likewise; it counts as one
failed group (``episodes/failed`` += ``num_generations``) and all its groups as played again (``episodes/retried``). With several training processes every rank then trains the
fewest groups any rank kept (FSDP needs the same micro-batches on every rank). A streamed group that keeps failing is
left out of its step likewise (:meth:`EpisodeFailures.play_group`). Every failed attempt is recorded
(:mod:`.failure_report`).
"""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Type

from ..rollouts.contract import EpisodeFailure
from ..rollouts.failed_groups import FailedGroups
from ..runs import names as rn
from ..runs.failure_records import append_failures
from ..user_code.exception_types import resolve_exception_types
from .batch import ScoredBatch
from .failure_kinds import WRAPPERS, FailureCounts, failure_cause  # noqa: F401 - this module's API too
from .failure_report import EpochLosses, FailureRecord, failure_notes, type_name

#: ``note(attempt, raised, cause, outcome)``: one failed attempt (0-based), what it raised, the exception in it that
#: made it count (:func:`failure_cause`), and what came of it: ``retried`` or ``dropped``
Note = Callable[[int, BaseException, BaseException, str], None]


def play_group(play: Callable[[int], ScoredBatch], n: int, on_error: str, max_retries: int, counts: FailureCounts,
               types: Tuple[Type[BaseException], ...] = (), note: Optional[Note] = None,
               failed_first: Optional[BaseException] = None) -> Tuple[Optional[ScoredBatch], Optional[BaseException]]:
    """One group played with ``play(attempt)`` until it does not fail outside the model (:func:`failure_cause` with
    ``types``): at most ``1 + max_retries`` times with ``on_error: retry``, once with ``drop``; ``note`` hears of
    each failed attempt. ``failed_first``: what the first attempt raised, when it was already played (with the
    step's other groups). Returns the batch, or ``None`` and the last failure when every attempt failed (its ``n``
    episodes counted dropped). Raises what ``play`` raised when it is not a failure."""
    attempts = 1 + (max_retries if on_error == "retry" else 0)
    for attempt in range(attempts):
        try:
            if attempt == 0 and failed_first is not None:
                raise failed_first
            return play(attempt), None
        except Exception as exc:
            cause = failure_cause(exc, types)
            if cause is None:
                raise
            counts.failed += n
            last = exc
            if attempt + 1 < attempts:
                counts.retried += n
            if note is not None:
                note(attempt, exc, cause, "retried" if attempt + 1 < attempts else "dropped")
    counts.dropped += n
    return None, last


def play_per_group(play: Callable[[int, int], ScoredBatch], num_groups: int, n: int, on_error: str,
                   max_retries: int, counts: FailureCounts, types: Tuple[Type[BaseException], ...] = (),
                   note: Optional[Callable[[int], Note]] = None
                   ) -> Tuple[List[ScoredBatch], Optional[BaseException]]:
    """Each of ``num_groups`` groups played by ``play(group, attempt)`` (:func:`play_group`; ``note(group)`` hears of
    its failed attempts); the groups that were played, in order, and the last failure (``None``: none was left out)."""
    kept, last = [], None
    for group in range(num_groups):
        batch, failure = play_group(lambda attempt: play(group, attempt), n, on_error, max_retries, counts, types,
                                    note(group) if note else None)
        if batch is not None:
            kept.append(batch)
        last = failure or last
    return kept, last


class PartlyPlayed(EpisodeFailure):
    """A step's rollout call some of whose groups failed outside the model (the rollout raised
    :class:`~grpo_rollout.rollouts.failed_groups.FailedGroups`) while the others finished and were scored.

    Attributes:
        batch: the finished groups, scored, in order (``None``: none finished). kept: their positions in the call.
        errors: each failed group's position → the failure of one of its episodes.
    """

    def __init__(self, failed: FailedGroups, batch: Optional[ScoredBatch]):
        super().__init__(str(failed))
        self.batch, self.kept, self.errors = batch, list(failed.kept), dict(failed.errors)


class EpisodeFailures:
    """What a rollout stage does with an episode that failed outside the model (``rollout.on_error``,
    ``rollout.max_retries``, ``rollout.failure_errors``), the step's counts and the failed attempts' records (several
    stream workers add to them at once).

    Args:
        rollout: the config's ``rollout`` section. num_generations: episodes per group. dist: the process group.
        output_dir: the run folder, where rank 0 appends ``failures.jsonl`` (``None``: no file). num_rows,
        prompts_per_step: the dataset's size and the step's prompts, which make an epoch. base_dir: where a
        ``file.py:Error`` in ``failure_errors`` is looked up.

    Raises:
        ValueError: a ``rollout.failure_errors`` entry names no exception class (validate-config says so first).
    """

    def __init__(self, rollout: Any, num_generations: int, dist: Any, output_dir: Optional[Path] = None,
                 num_rows: int = 1, prompts_per_step: int = 1, base_dir: Optional[Path] = None):
        self.on_error, self.max_retries, self.n, self.dist = rollout.on_error, rollout.max_retries, num_generations, dist
        self.types: Tuple[Type[BaseException], ...] = ()
        if self.on_error != "stop":
            self.types, failed = resolve_exception_types(rollout.failure_errors, base_dir)
            if failed:
                i, spec, reason = failed[0]
                raise ValueError(f"rollout.failure_errors[{i}] = {spec!r}: {reason}; run validate-config")
        self.counts, self.lock = FailureCounts(), threading.Lock()
        self.records: List[FailureRecord] = []
        self.file = None if output_dir is None else Path(output_dir) / rn.FAILURES_FILE
        self.epochs = EpochLosses(num_rows, prompts_per_step)
        self.in_a_row = 0  # streamed groups left out since one was played

    def _note(self, row: Optional[int], prompt: Any) -> Note:
        """A :data:`Note` that records the failed attempts of the group at dataset row ``row`` (its ``step`` is set
        by :meth:`metrics`: the step that reports it)."""
        def note(attempt: int, raised: BaseException, cause: BaseException, outcome: str) -> None:
            bare = raised is cause and not isinstance(raised, EpisodeFailure)  # its text may not name its type
            record = FailureRecord(0, self.dist.rank, row, prompt, attempt + 1, type_name(cause),
                                   f"{type_name(raised)}: {raised}" if bare else str(raised), outcome)
            with self.lock:
                self.records.append(record)
        return note

    def play_step(self, step: int, play_all: Callable[[], ScoredBatch], play_one: Callable[[int, int], ScoredBatch],
                  groups: Sequence[Tuple[Optional[int], Any]]) -> ScoredBatch:
        """``play_all()``; when it fails outside the model (and ``on_error`` is not ``stop``) each group again with
        ``play_one(group, attempt)`` (:meth:`replay_step`). ``groups``: each group's dataset row index and prompt.

        Raises:
            what :meth:`replay_step` raises.
        """
        try:
            return play_all()
        except Exception as exc:
            return self.replay_step(step, exc, play_one, groups)

    def replay_step(self, step: int, exc: Exception, play_one: Callable[[int, int], ScoredBatch],
                    groups: Sequence[Tuple[Optional[int], Any]]) -> ScoredBatch:
        """After the step's rollout raised ``exc``: when that is a failure outside the model (and ``on_error`` is not
        ``stop``), each group again with ``play_one(group, attempt)`` (:func:`play_per_group`), the groups that
        still fail left out; only the failed groups when the others finished (a :class:`PartlyPlayed` ``exc``).
        ``groups``: each group's dataset row index and prompt (for the records).

        Raises:
            EpisodeFailure: every group failed again (step ``step``, 0-based, named 1-based).
            ``exc`` itself when it is not a failure (:func:`failure_cause`), or with ``on_error: stop``.
        """
        cause = None if self.on_error == "stop" else failure_cause(exc, self.types)
        if cause is None:
            raise exc
        if isinstance(exc, PartlyPlayed):
            return self._replay_failed(step, exc, play_one, groups)
        self._note(None, [prompt for _, prompt in groups])(0, exc, cause, "played alone")
        # which group failed is not known: counted as one failed group, every group played again
        counts = FailureCounts(failed=self.n, retried=len(groups) * self.n)
        kept, last = play_per_group(play_one, len(groups), self.n, self.on_error, self.max_retries, counts,
                                    self.types, lambda g: self._note(*groups[g]))
        return self._kept(step, counts, kept, last or exc)

    def _replay_failed(self, step: int, exc: PartlyPlayed, play_one: Callable[[int, int], ScoredBatch],
                       groups: Sequence[Tuple[Optional[int], Any]]) -> ScoredBatch:
        """After a step's call whose other groups finished (``exc``): only the failed groups, each played again
        alone with ``play_one(group, attempt)`` (:func:`play_group`, its first attempt the one that failed), put
        back among the finished ones in order."""
        counts, played, last = FailureCounts(), {}, None
        for g in sorted(exc.errors):
            played[g], failure = play_group(lambda attempt, g=g: play_one(g, attempt), self.n, self.on_error,
                                            self.max_retries, counts, self.types, self._note(*groups[g]),
                                            failed_first=exc.errors[g])
            last = failure or last
        kept = [exc.batch.select_groups([exc.kept.index(g)]) if g in exc.kept else played.get(g)
                for g in range(len(groups))]
        return self._kept(step, counts, [b for b in kept if b is not None], last)

    def _kept(self, step: int, counts: FailureCounts, kept: List[ScoredBatch],
              last: Optional[BaseException]) -> ScoredBatch:
        """The groups ``kept`` after a step's failure, one batch, its ``counts`` added to the step's.

        Raises:
            EpisodeFailure: none was kept (``last``: the last failure)."""
        with self.lock:
            self.counts.add(counts)
        if not kept:
            self._keep_records(step)
            raise EpisodeFailure(f"step {step + 1}: every group failed ({self._policy()}); the last failure: "
                                 f"{last}") from last
        return ScoredBatch.concat(kept)

    def failure_test(self) -> Optional[Callable[[BaseException], bool]]:
        """Whether an episode's error counts as a failure outside the model (:func:`failure_cause`), for a rollout
        that keeps its finished groups (:func:`~grpo_rollout.rollouts.failed_groups.keeping_finished`); ``None``
        with ``on_error: stop``."""
        if self.on_error == "stop":
            return None
        return lambda exc: failure_cause(exc, self.types) is not None

    def play_group(self, play: Callable[[int], ScoredBatch], row: Optional[int], prompt: Any,
                   most_in_a_row: int) -> Optional[ScoredBatch]:
        """One streamed group (dataset row ``row``, ``prompt``), ``play(attempt)`` retried
        as :func:`play_group` says; ``None`` when it is left out (every attempt failed).

        Raises:
            EpisodeFailure: the ``most_in_a_row``-th group in a row left out (e.g. a step's worth: the sandbox is
                down for good; a synchronous step whose groups all failed stops likewise).
            anything else ``play`` raised (``on_error: stop``: everything).
        """
        if self.on_error == "stop":
            return play(0)
        counts = FailureCounts()
        batch, failure = play_group(play, self.n, self.on_error, self.max_retries, counts, self.types,
                                    self._note(row, prompt))
        with self.lock:
            self.counts.add(counts)
            self.in_a_row = 0 if batch is not None else self.in_a_row + 1
            give_up = self.in_a_row >= most_in_a_row
        if give_up:
            self._keep_records(None)
            raise EpisodeFailure(f"{most_in_a_row} streamed groups in a row failed ({self._policy()}); the last "
                                 f"failure: {failure}") from failure
        return batch

    def _policy(self) -> str:
        """``rollout.on_error: drop``, or ``rollout.on_error: retry, max_retries: N``: what the messages quote."""
        tail = f", max_retries: {self.max_retries}" if self.on_error == "retry" else ""
        return f"rollout.on_error: {self.on_error}{tail}"

    def _keep_records(self, step: Optional[int]) -> None:
        """This rank's failed attempts appended to ``failures.jsonl`` now, without a collective: the run is about to
        stop with them (``step``: 0-based, the step that failed; ``None``: not known, a streamed group)."""
        with self.lock:
            records, self.records = self.records, []
        if records and self.file is not None:
            append_failures(self.file, [replace(r, step=None if step is None else step + 1).to_json()
                                        for r in records])

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

    def metrics(self, step: Optional[int] = None, say: Callable[[str], None] = lambda line: None
                ) -> Dict[str, float]:
        """The step's ``episodes/failed``, ``episodes/retried``, ``episodes/dropped`` and
        ``episodes/prompts_dropped`` over every rank (a collective with ``on_error`` retry or drop; nothing with
        ``stop``), then counted from 0 again. With ``step`` (0-based, the step being logged) also
        ``episodes/epoch_prompts_dropped`` and the failed attempts' records, gathered: rank 0 appends them to
        ``failures.jsonl`` and tells ``say`` the first of each kind and, at an epoch's end, the prompts it lost."""
        if self.on_error == "stop":
            return {}
        with self.lock:
            counts, self.counts = self.counts, FailureCounts()
            records, self.records = self.records, []
        failed, retried, dropped = (int(x) for x in self.dist.sum([counts.failed, counts.retried, counts.dropped]))
        out = {**FailureCounts(failed, retried, dropped).metrics(), rn.EPISODES_PROMPTS_DROPPED: dropped // self.n}
        if step is None:
            return out
        records = [replace(r, step=step + 1) for rank in self.dist.gather(records) for r in rank]
        out[rn.EPISODES_EPOCH_PROMPTS_DROPPED], epoch_line = self.epochs.add(step + 1, dropped // self.n)
        if self.dist.is_main:
            if records and self.file is not None:
                append_failures(self.file, [r.to_json() for r in records])
            for line in failure_notes(records, self.on_error, str(self.file or "(no run folder)")):
                say(f"Step {step + 1}: {line}")
            if epoch_line:
                say(epoch_line)
        return out
