"""The group stream's end (issue 39, fault 1): a streamed run starts no group past its last step, and its last steps
wait for their own groups, so every prompt of the run is trained exactly once even when some are slow. Scripted
latencies as in test_group_stream.py: positions walk the dataset epoch after epoch (``row = position % rows``)."""

from __future__ import annotations

import pytest

from grpo_rollout.orchestrator.stream import GroupStream
from test_group_stream import Scripted, _train


def _epoch_stream(server, rows, per_step, k, steps, **kw):
    """The stream of a run of ``steps`` steps over ``rows`` prompts (position p is row p % rows)."""
    return GroupStream(server.roll, lambda p: (p // per_step, p % rows), groups_per_step=per_step, max_staleness=k,
                       max_inflight=kw.pop("max_inflight", 2 * per_step), end=kw.pop("end", steps * per_step), **kw)


@pytest.mark.parametrize("rows, slow, per_step, k, steps", [
    (8, {2, 5}, 2, 1, 4),  # the num_epochs: 1 run: 8 prompts, 2 slow, max_staleness 1
    (16, {1, 5, 9, 13}, 4, 4, 4),  # the max_steps: 4 run: 16 prompts, one in four slow, max_staleness 4
], ids=["epoch_k1", "max_steps_k4"])
def test_the_last_steps_wait_for_their_own_slow_groups_and_no_prompt_trains_twice(rows, slow, per_step, k, steps):
    server = Scripted(lambda row, attempt: 0.3 if row in slow else 0.01)
    stream = _epoch_stream(server, rows, per_step, k, steps)
    taken, stats = _train(stream, server, steps)
    stream.close()
    trained = [r for step in taken for r in step]
    assert sorted(trained) == list(range(rows))  # each prompt once: the slow ones too, no fast one twice
    assert all(len(step) == per_step for step in taken)
    assert all(age <= k for s in stats for age in s.staleness)
    assert all(row < rows for row, _ in server.calls)  # no group of a next epoch was started


def test_two_ranks_each_end_at_their_own_last_position():
    """Two processes: each rank's stream walks its own share of every step (rank r's position p is the step's row
    ``2·(p // per_step)·per_step + r·per_step + p % per_step``); together they train the epoch once."""
    rows, per_step, steps = 16, 2, 4
    servers = [Scripted(lambda row, attempt: 0.3 if row % 4 == 1 else 0.01) for _ in range(2)]

    def row_at(rank):
        return lambda p: (p // per_step, (p // per_step) * 2 * per_step + rank * per_step + p % per_step)

    streams = [GroupStream(s.roll, row_at(r), groups_per_step=per_step, max_staleness=1, max_inflight=4,
                           end=steps * per_step) for r, s in enumerate(servers)]
    trained = []
    for _ in range(steps):  # both ranks take their share of each step, then "sync"
        for stream, server in zip(streams, servers):
            trained += [g.row for g in stream.take(server.version)[0]]
            stream.commit()
        for server in servers:
            server.version += 1
    for stream in streams:
        stream.close()
    assert sorted(trained) == list(range(rows))
    assert all(row < rows for server in servers for row, _ in server.calls)


def test_a_stream_resumed_near_the_end_trains_what_is_left_once_and_nothing_after():
    rows, per_step, k, steps = 8, 2, 1, 4
    server = Scripted(lambda row, attempt: 0.3 if row in (2, 5) else 0.01)
    first = _epoch_stream(server, rows, per_step, k, steps)
    before, _ = _train(first, server, 3)  # a checkpoint after step 3 of 4
    state = first.state()
    first.close()
    calls = len(server.calls)
    second = _epoch_stream(server, rows, per_step, k, steps, start=state["first_unused"], used=tuple(state["used"]),
                           replaced=state["replaced"])
    after, _ = _train(second, server, 1)
    second.close()
    trained = [r for step in before + after for r in step]
    assert sorted(trained) == list(range(rows))
    assert all(row < rows for row, _ in server.calls[calls:])
    with pytest.raises(RuntimeError, match="no group left"):  # a step past the last one says so, never hangs
        second.take(server.version)


def test_a_prompt_left_out_is_replaced_by_the_next_one_past_the_end():
    """A position ``keep`` refuses (dynamic sampling: no reward variance) is replaced by the next prompt, so every step
    still takes its groups; the replacement count travels with the state."""
    server = Scripted(lambda row, attempt: 0.01)
    stream = GroupStream(server.roll, lambda p: (p // 2, p), groups_per_step=2, max_staleness=1, max_inflight=4,
                         keep=lambda batch: batch.row != 3, end=6)
    taken, _ = _train(stream, server, 3)
    state = stream.state()
    stream.close()
    assert sorted(r for step in taken for r in step) == [0, 1, 2, 4, 5, 6]
    assert state["replaced"] == 1 and max(row for row, _ in server.calls) == 6


def test_a_group_left_out_by_on_error_drop_is_replaced_and_the_run_ends_full():
    """A group whose episodes failed on every attempt (``roll`` returns None under ``rollout.on_error: drop``) is
    left out like a refused one: the next prompt takes its place, so the last step is full and does not stop the run
    with "no group left"."""
    server = Scripted(lambda row, attempt: 0.01)
    roll = server.roll
    server.roll = lambda position, step, row, attempt: None if row == 3 else roll(position, step, row, attempt)
    stream = GroupStream(server.roll, lambda p: (p // 2, p), groups_per_step=2, max_staleness=1, max_inflight=4,
                         end=6)
    taken, _ = _train(stream, server, 3)
    state = stream.state()
    stream.close()
    assert sorted(r for step in taken for r in step) == [0, 1, 2, 4, 5, 6]
    assert state["replaced"] == 1 and 3 in state["used"] + list(range(state["first_unused"]))


def test_the_stream_position_a_checkpoint_keeps_reads_back_typed():
    """Issue 40.3: the stream's checkpoint state was read back by string keys; a checkpoint's mapping is now a
    StreamPosition (the mapping itself unchanged, so earlier checkpoints resume)."""
    from grpo_rollout.orchestrator.stream_source import StreamPosition

    position = StreamPosition(groups_per_step=2, first_unused=7, used=(9, 11), replaced=1)
    saved = position.to_json()
    assert saved == {"groups_per_step": 2, "first_unused": 7, "used": [9, 11], "replaced": 1}
    assert StreamPosition.of(saved) == position
    older = {"groups_per_step": 2, "first_unused": 4, "used": [6]}  # written before `replaced` existed
    assert StreamPosition.of(older) == StreamPosition(2, 4, (6,), 0)
