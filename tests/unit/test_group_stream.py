"""The group stream (training.max_staleness >= 1, grpo_rollout/orchestrator/stream.py) with scripted latencies: a
"server" whose weight version the test's "trainer" loop advances after every step, and groups that sleep a set time.
Checked: every trained group's age <= k, drops of stale groups and their counts, each prompt trained once, a resume
from the stream's state, groups left out by ``keep``, a rollout that raises."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

from grpo_rollout.orchestrator.stream_stats import StreamStats
from grpo_rollout.orchestrator.stream import GroupStream


class Scripted:
    """Groups of position p sleep ``latency(p, attempt)`` seconds and are stamped with the server's version at their
    start (as a vLLM answer is); every call is noted."""

    def __init__(self, latency, fail_at=None):
        self.latency, self.fail_at, self.version = latency, fail_at, 1
        self.calls, self.lock = [], threading.Lock()

    def roll(self, position, step, row, attempt):
        with self.lock:
            started = self.version
            self.calls.append((row, attempt))
        if row == self.fail_at:
            raise ValueError(f"rollout broke on row {row}")
        time.sleep(self.latency(row, attempt))
        return SimpleNamespace(rollout=SimpleNamespace(weight_version=started), row=row, step=step,
                               rewards=[float(row % 3 == 0)] * 2)


def _train(stream, server, steps, update=True):
    """The trainer's side: take a step's groups at the server's version, train them (commit), then "sync" (the
    version goes up; not after a step without an update)."""
    taken, stats = [], []
    for _ in range(steps):
        groups, s = stream.take(server.version)
        taken.append([g.row for g in groups])
        stats.append(s)
        time.sleep(0.01)  # the update
        stream.commit()
        if update:
            with server.lock:
                server.version += 1
    return taken, stats


def _stream(server, k, per_step=4, **kw):
    return GroupStream(server.roll, lambda p: (p // per_step, p), groups_per_step=per_step, max_staleness=k,
                       max_inflight=kw.pop("max_inflight", 2 * per_step), **kw)


@pytest.mark.parametrize("k", [1, 2, 4])
def test_every_trained_group_is_at_most_k_versions_behind_and_each_prompt_is_trained_once(k):
    # a long tail: every 7th group takes 15 times as long as the others
    server = Scripted(lambda row, attempt: 0.3 if row % 7 == 3 and attempt == 0 else 0.02)
    stream = _stream(server, k)
    taken, stats = _train(stream, server, 8)
    stream.close()
    assert all(len(step) == 4 for step in taken)
    assert all(0 <= age <= k for s in stats for age in s.staleness)
    rows = [r for step in taken for r in step]
    assert len(rows) == len(set(rows)) == 32  # none twice
    state = stream.state()
    assert set(range(state["first_unused"])) | set(state["used"]) == set(rows)  # none skipped below the frontier
    # the slow group did not hold its step up: the step trained the next prompt instead
    assert 3 not in taken[0]


def test_a_group_older_than_k_is_dropped_counted_and_rolled_again_with_another_attempt():
    # row 1's first attempt takes as long as several steps; rolled again it is quick
    server = Scripted(lambda row, attempt: 0.25 if row == 1 and attempt == 0 else 0.01)
    stream = _stream(server, 1, per_step=2, max_inflight=2)
    taken, stats = _train(stream, server, 30)
    stream.close()
    assert sum(s.dropped_stale for s in stats) >= 1
    assert (1, 1) in server.calls  # rolled again, as attempt 1
    rows = [r for step in taken for r in step]
    assert rows.count(1) == 1 and len(rows) == len(set(rows))
    assert all(age <= 1 for s in stats for age in s.staleness)


def test_a_resumed_stream_rolls_out_exactly_what_was_not_trained():
    server = Scripted(lambda row, attempt: 0.25 if row == 2 else 0.01)
    first = _stream(server, 2)
    taken, _ = _train(first, server, 3)
    state = first.state()
    first.close()
    before = {r for step in taken for r in step}
    assert 2 not in before and state["first_unused"] == 2  # the slow group was still running at the checkpoint
    calls_before = len(server.calls)
    second = _stream(server, 2, start=state["first_unused"], used=tuple(state["used"]))
    after, _ = _train(second, server, 3)
    frontier = second.state()["first_unused"]
    second.close()
    rows_after = [r for step in after for r in step]
    assert not before & set(rows_after) and len(rows_after) == len(set(rows_after))  # none twice across the resume
    assert set(range(frontier)) <= before | set(rows_after)  # none skipped: in flight or buffered ones rolled again
    assert (2, 0) in server.calls[calls_before:]  # the group running at the checkpoint is rolled out again


def test_groups_that_keep_refuses_are_left_out_once_and_counted():
    server = Scripted(lambda row, attempt: 0.01)
    stream = _stream(server, 2, keep=lambda batch: batch.row % 3 != 0)  # e.g. no reward variance
    taken, stats = _train(stream, server, 4)
    stream.close()
    rows = [r for step in taken for r in step]
    assert all(r % 3 != 0 for r in rows) and len(rows) == len(set(rows)) == 16
    assert sum(s.dropped_no_signal for s in stats) >= 5  # rows 0, 3, 6, ... below the last trained one
    assert [a for _, a in server.calls].count(1) == 0  # never rolled again
    assert StreamStats.merge(stats).metrics()["dynamic_sampling/groups_dropped"] == sum(s.dropped_no_signal
                                                                                         for s in stats)


def test_a_rollout_that_raises_stops_the_step_with_its_error_and_no_group_starts_after_it():
    server = Scripted(lambda row, attempt: 0.01, fail_at=5)
    stream = _stream(server, 1, per_step=2, max_inflight=2)
    with pytest.raises(ValueError, match="rollout broke on row 5"):
        _train(stream, server, 10)
    started = len(server.calls)
    time.sleep(0.1)
    assert len(server.calls) == started
    stream.close()


def test_the_step_metrics_of_several_ranks():
    merged = StreamStats.merge([StreamStats([0, 1], 1, None, 3, 2, 0.5, 0.25),
                                StreamStats([2, 1], 0, None, 1, 0, 1.5, 0.5)])
    assert merged.metrics() == {"async/staleness_mean": 1.0, "async/staleness_max": 2, "async/groups_dropped_stale": 1,
                                "async/groups_in_flight": 4, "async/buffer_groups": 2,
                                "time/waiting_for_rollouts": 1.5, "async/rollouts_idle_share": 0.25,
                                "async/groups_skipped_stale": 0}


def _idle_shares(update_s: float, steps: int = 8) -> list:
    """One group per step (0.1 s each, one at a time, k = 1) and a trainer whose update takes ``update_s``."""
    server = Scripted(lambda row, attempt: 0.1)
    stream = _stream(server, 1, per_step=1, max_inflight=1)
    shares = []
    for _ in range(steps):
        shares.append(stream.take(server.version)[1].idle_share)
        time.sleep(update_s)
        stream.commit()
        with server.lock:
            server.version += 1
    stream.close()
    return shares[2:]  # after the start


def test_the_idle_share_is_the_time_with_no_group_running():
    # a slow trainer (0.2 s): one group runs during the update, then the bound (one running or buffered, one taken
    # at this version) stops the next one until the trainer moves on: idle about half the time
    slow = _idle_shares(0.2)
    assert all(0.3 < x < 0.7 for x in slow), slow
    # a fast trainer: it waits for each group, and a group is always running
    fast = _idle_shares(0.0)
    assert all(x < 0.15 for x in fast), fast


def _finishes(fn, timeout_s=20.0):
    """Whether ``fn()`` returns within ``timeout_s`` (run on a thread: a hang fails the test instead of freezing it)."""
    done = threading.Event()
    threading.Thread(target=lambda: (fn(), done.set()), daemon=True).start()
    return done.wait(timeout_s)


def test_steps_without_an_update_do_not_stall_the_stream():
    """New user's trial: a step without signal makes no update and no sync, so the version stays; the bound counted
    groups per version, and after k + 1 such steps no group could start: the run hung."""
    server = Scripted(lambda row, attempt: 0.01)
    stream = _stream(server, 1, per_step=2, max_inflight=4)
    out = {}
    assert _finishes(lambda: out.update(result=_train(stream, server, 6, update=False)))
    stream.close()
    assert [len(step) for step in out["result"][0]] == [2] * 6 and all(
        age == 0 for s in out["result"][1] for age in s.staleness)


def test_dynamic_sampling_in_the_stream_takes_groups_anyway_after_max_refused():
    """New user's trial: when no group has reward variance, the stream refused every group and rolled out new prompts
    forever, with nothing said; now after max_refused refusals the step takes the next ones (and says so)."""
    server = Scripted(lambda row, attempt: 0.01)
    stream = _stream(server, 2, per_step=2, max_inflight=4, keep=lambda batch: False, max_refused=6)
    out = {}
    assert _finishes(lambda: out.update(result=_train(stream, server, 3)))
    stream.close()
    taken, stats = out["result"]
    assert [len(step) for step in taken] == [2, 2, 2]
    # the first step: exactly 6 refused, then taken anyway; every group a step took was one of those taken anyway
    assert stats[0].dropped_no_signal == 6 and all(s.dropped_no_signal <= 6 for s in stats)
    assert [s.let_through for s in stats] == [2, 2, 2]
    assert stats[0].metrics()["dynamic_sampling/filled"] == 0.0 and "without reward variance" in stats[0].notes(2)[0]


def test_groups_taken_by_a_step_that_did_not_finish_are_not_saved_as_used():
    """New user's trial: after Ctrl-C or an error during a step, the checkpoint marked that step's groups as used,
    so a resume skipped those prompts."""
    server = Scripted(lambda row, attempt: 0.01)
    stream = _stream(server, 1, per_step=2, max_inflight=2)
    _train(stream, server, 2)  # two steps trained: positions 0-3
    stream.take(server.version)  # a third step takes 4 and 5 ... and is interrupted before it trains them
    assert stream.state()["first_unused"] == 4
    stream.commit()
    assert stream.state()["first_unused"] == 6
    stream.close()


def test_a_prompt_always_too_slow_for_the_bound_is_left_out_and_named():
    """New user's trial: a prompt whose episodes always outlast k steps was dropped and rolled again forever."""
    server = Scripted(lambda row, attempt: 0.3 if row == 1 else 0.01)
    stream = _stream(server, 1, per_step=2, max_inflight=2, max_attempts=2)
    taken, stats = _train(stream, server, 30)
    stream.close()
    rows = [r for step in taken for r in step]
    assert 1 not in rows and [a for r, a in server.calls if r == 1] == [0, 1]  # two attempts, then left out
    skipped = [x for s in stats for x in s.skipped_stale]
    assert skipped == ["prompt at position 1"] and sum(s.metrics()["async/groups_skipped_stale"] for s in stats) == 1
    assert stream.state()["first_unused"] > 2  # the frontier moved past it


def test_a_resumed_stream_never_rolls_out_a_position_used_before_the_checkpoint():
    """New user's trial: the frontier passed a saved used position and dropped it from the set, and the next new
    position was that one: trained twice."""
    server = Scripted(lambda row, attempt: 0.01)
    stream = _stream(server, 1, per_step=1, max_inflight=1, start=2, used=(3,))
    taken, _ = _train(stream, server, 3)
    stream.close()
    assert [r for step in taken for r in step] == [2, 4, 5]


def test_closing_the_stream_releases_async_rollouts_waiting_on_its_loop():
    import asyncio

    from grpo_rollout.user_code.coroutines import run_coroutine

    def roll(position, step, row, attempt):
        return run_coroutine(asyncio.sleep(100), shared=True)  # an async rollout that would run for minutes

    stream = GroupStream(roll, lambda p: (0, p), groups_per_step=1, max_staleness=1, max_inflight=2)
    with stream._cond:
        stream._fill()
    time.sleep(0.2)
    stream.close()
    deadline = time.monotonic() + 10
    while any(t.name.startswith("grpo-rollout-group-") for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(t.name.startswith("grpo-rollout-group-") for t in threading.enumerate())
