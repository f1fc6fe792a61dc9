"""Issue 51.8: a rollout call some of whose groups failed outside the model keeps the groups that finished
(``FailedGroups``): the episodes of the other groups play on, a bug still cancels them all, the trainer plays only the
failed groups again (counted), and a rollout's own ``FailedGroups`` that names no prompt of the call is refused."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from grpo_rollout import EpisodeFailure
from grpo_rollout.generation.sampling_settings import SamplingSettings
from grpo_rollout.orchestrator.failures import PartlyPlayed
from grpo_rollout.rollouts.contract import RolloutContext, RolloutError
from grpo_rollout.rollouts.episodes import gather_settled
from grpo_rollout.rollouts.failed_groups import FailedGroups, failure_test, finished_groups, keeping_finished
from grpo_rollout.rollouts.rollout_call import call_rollout
from test_episode_failures import N, _batch, _failures, _groups


def _is_failure(exc):
    return isinstance(exc, EpisodeFailure)


def test_finished_groups_cut_the_output_to_the_groups_none_of_whose_episodes_failed():
    out = {"completion_ids": [[i] for i in range(6)], "per_prompt": ["a", "b", "c"], "scalar": 7}
    assert finished_groups(out, {}, 3, 2) is out
    with pytest.raises(FailedGroups) as raised:
        finished_groups(out, {3: EpisodeFailure("timed out"), 2: EpisodeFailure("also")}, 3, 2)
    assert raised.value.output == {"completion_ids": [[0], [1], [4], [5]], "per_prompt": ["a", "c"], "scalar": 7}
    assert raised.value.failed == [1] and raised.value.kept == [0, 2]
    assert "1 of 3 groups failed outside the model (prompt 1: EpisodeFailure: also)" in str(raised.value)
    assert isinstance(raised.value, EpisodeFailure)  # whoever does not know it: a failed call, as before


def test_a_failure_cancels_only_its_group_and_a_bug_cancels_every_episode():
    finished = []

    async def episode(i, fails=None, seconds=0.05):
        await asyncio.sleep(0.01 if fails else seconds)
        if fails:
            raise fails
        finished.append(i)
        return i

    async def play(errors):
        failed = {}
        coros = [episode(i, errors.get(i)) for i in range(6)]
        return await gather_settled(coros, _is_failure, failed, 2), failed

    results, failed = asyncio.run(play({2: EpisodeFailure("gone")}))
    assert results == [0, 1, None, None, 4, 5] and list(failed) == [2] and sorted(finished) == [0, 1, 4, 5]
    finished.clear()
    with pytest.raises(ValueError, match="a bug"):
        asyncio.run(play({2: EpisodeFailure("gone"), 4: ValueError("a bug")}))
    assert finished == []  # every other episode cancelled


def test_the_failure_test_is_the_trainers_only_within_its_block():
    assert failure_test() is None
    with keeping_finished(_is_failure):
        assert failure_test() is _is_failure
    assert failure_test() is None
    assert _failures("stop").failure_test() is None
    test = _failures("retry").failure_test()
    assert test(EpisodeFailure("x")) and test(RolloutError("wrapped")) is False


def _call(rollout, prompts=("p0", "p1", "p2")):
    return call_rollout(rollout, list(prompts), SamplingSettings(n=N), {}, RolloutContext())


def _rows(k):
    return {"prompt_ids": [[1]] * (k * N), "completion_ids": [[2]] * (k * N), "logprobs": None}


@pytest.mark.parametrize("failed, kept_rows, says", [
    ({5: EpisodeFailure("x")}, 2, r"raised FailedGroups for prompts \[5\]; name one or more of the call's 3 prompts "
                                  r"by index \(0 to 2\)"),
    ({-1: EpisodeFailure("x")}, 2, r"prompts \[-1\]"),
    ({}, 3, r"prompts \[\]"),
    ({1: EpisodeFailure("x")}, 3, r"rollout: `completion_ids` has 6 entries; expected 4"),
])
def test_a_rollouts_own_failed_groups_is_checked(failed, kept_rows, says):
    def rollout(prompts, **kwargs):
        raise FailedGroups(_rows(kept_rows), failed, len(prompts))

    with pytest.raises(RolloutError, match=says) as raised:
        _call(rollout)
    assert not isinstance(raised.value, FailedGroups)  # a broken report is a bug: the run stops


def test_a_rollouts_own_failed_groups_reaches_the_trainer_checked():
    def rollout(prompts, **kwargs):
        raise FailedGroups(_rows(2), {1: EpisodeFailure("the sandbox went away")}, len(prompts))

    with pytest.raises(FailedGroups) as raised:
        _call(rollout)
    assert raised.value.rollout.num_prompts == 2 and len(raised.value.rollout) == 2 * N


def _partly(errors, kept):
    failed = FailedGroups({}, errors, 3)
    return PartlyPlayed(failed, _batch(*kept) if kept else None)


@pytest.mark.parametrize("on_error", ["retry", "drop"])
def test_only_the_failed_group_is_played_again_and_put_back_in_order(on_error):
    failures, calls = _failures(on_error), []

    def play_one(group, attempt):
        calls.append((group, attempt))
        if attempt < 1:
            raise EpisodeFailure("still gone")
        return _batch(group)

    batch = failures.replay_step(0, _partly({1: EpisodeFailure("gone")}, [0, 2]), play_one, _groups(3))
    record = failures.records[0]  # the step's call: its failed group
    assert (record.row, record.prompt, record.attempt, record.message) == (1, "Count to 1.", 1, "gone")
    assert record.outcome == ("retried" if on_error == "retry" else "dropped")
    if on_error == "retry":  # the first attempt was the step's call: the group alone is its second
        assert calls == [(1, 1)] and [ids[0] for ids in batch.rollout.completion_ids] == [0, 0, 1, 1, 2, 2]
        assert failures.metrics() == {"episodes/failed": 2, "episodes/retried": 2, "episodes/dropped": 0,
                                      "episodes/prompts_dropped": 0}
    else:
        assert calls == [] and [ids[0] for ids in batch.rollout.completion_ids] == [0, 0, 2, 2]
        assert failures.metrics() == {"episodes/failed": 2, "episodes/retried": 0, "episodes/dropped": 2,
                                      "episodes/prompts_dropped": 1}


def test_every_group_failed_and_a_bug_in_a_group():
    with pytest.raises(EpisodeFailure, match=r"step 1: every group failed \(rollout.on_error: drop\)"):
        _failures("drop").replay_step(0, _partly({0: EpisodeFailure("a"), 1: EpisodeFailure("b")}, []),
                                      None, _groups(2))
    with pytest.raises(ValueError, match="a bug"):  # a rollout that says a group failed of a bug: the run stops
        _failures("retry").replay_step(0, _partly({1: ValueError("a bug")}, [0, 2]), None, _groups(3))
    with pytest.raises(PartlyPlayed):  # on_error: stop
        _failures("stop").replay_step(0, _partly({1: EpisodeFailure("gone")}, [0, 2]), None, _groups(3))
