"""Issue 32.6: episodes that fail outside the model are played again or left out, with hand-counted episodes; any
other error still stops the run; the ranks are evened out; the built-in infrastructure errors are EpisodeFailures.
Issue 39.6 and 39.12: the failures' texts in failures.jsonl and on the console, the prompts an epoch lost;
rollout.failure_errors (a client's connection error is a failed episode, a bug is not), checked by validate-config;
a streamed group that keeps failing is left out."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from grpo_rollout import EpisodeFailure
from grpo_rollout.rollouts.contract import RolloutError, RolloutOutput
from grpo_rollout.integrations.mcp.mcp_tools import MCPServerGone
from grpo_rollout.orchestrator.batch import CompletionScores, ScoredBatch
from grpo_rollout.config.schema import FAILURE_ERRORS
from grpo_rollout.orchestrator.failures import EpisodeFailures, FailureCounts, play_group

N = 2


def _batch(*groups):
    ids = [[g] for g in groups for _ in range(N)]
    out = RolloutOutput([[1]] * len(ids), ids, None, [[1]] * len(ids), {}, len(groups), N)
    scores = CompletionScores(rewards=[0.0] * len(ids), per_function={}, timed_out={},
                              time_limits={}, prompts=["p"] * len(ids), texts=["t"] * len(ids),
                              lengths=[1] * len(ids), truncated=[False] * len(ids), extras={},
                              weight_versions=[None] * len(ids))
    return ScoredBatch(out, scores, 0.0)


class FakeDist:
    rank, is_main = 0, True

    def __init__(self, others):
        self.others = others

    def gather(self, obj):
        return [obj]

    def min(self, values):
        return [min(values[0], self.others)]

    def sum(self, values):
        return values


def _failures(on_error, max_retries=2, others=99, errors=FAILURE_ERRORS, **kw):
    return EpisodeFailures(SimpleNamespace(on_error=on_error, max_retries=max_retries, failure_errors=list(errors)), N,
                           FakeDist(others), **kw)


def _groups(k):
    return [(i, f"Count to {i}.") for i in range(k)]


def test_a_group_is_retried_until_it_plays_then_counted():
    tries = []

    def play(attempt):
        tries.append(attempt)
        if attempt < 2:
            raise EpisodeFailure("sandbox crashed")
        return _batch(0)

    counts = FailureCounts()
    batch, failure = play_group(play, N, "retry", 2, counts)
    assert batch is not None and failure is None and tries == [0, 1, 2]
    assert counts == FailureCounts(failed=4, retried=4, dropped=0)
    counts = FailureCounts()
    assert play_group(play, N, "drop", 2, counts)[0] is None  # drop: one attempt only
    assert counts == FailureCounts(failed=2, retried=0, dropped=2)


def test_a_failed_step_is_played_per_group_and_the_failing_group_left_out():
    failures = _failures("drop")

    def play_all():
        raise EpisodeFailure("the environment server for group 1 is gone")

    def play_one(group, attempt):
        if group == 1:
            raise EpisodeFailure("still gone")
        return _batch(group)

    batch = failures.play_step(0, play_all, play_one, _groups(3))
    assert [ids[0] for ids in batch.rollout.completion_ids] == [0, 0, 2, 2]
    # the failed call: one group's episodes failed, all 3 groups played again; then group 1 failed and was dropped
    assert failures.metrics() == {"episodes/failed": 4, "episodes/retried": 6, "episodes/dropped": 2,
                                  "episodes/prompts_dropped": 1}
    assert failures.metrics() == {"episodes/failed": 0, "episodes/retried": 0, "episodes/dropped": 0,
                                  "episodes/prompts_dropped": 0}  # per step


def test_stop_other_errors_and_a_step_with_nothing_left():
    def play_all():
        raise EpisodeFailure("gone")

    with pytest.raises(EpisodeFailure, match="gone"):
        _failures("stop").play_step(0, play_all, None, _groups(2))
    assert _failures("stop").metrics() == {}

    def bug():
        raise RolloutError("`completion_ids` has 3 entries; expected 4")

    with pytest.raises(RolloutError, match="expected 4"):  # not an episode failure: never retried
        _failures("retry").play_step(0, bug, None, _groups(2))
    with pytest.raises(EpisodeFailure, match=r"step 3: every group failed \(rollout.on_error: retry, max_retries: 1\)"):
        _failures("retry", 1).play_step(2, play_all, lambda g, a: play_all(), _groups(2))


def test_every_rank_trains_the_fewest_groups_any_rank_kept():
    failures = _failures("drop", others=1)
    batch = failures.even_out(_batch(0, 1, 2))
    assert batch.num_groups == 1 and failures.metrics()["episodes/dropped"] == 4
    assert _failures("stop", others=1).even_out(_batch(0, 1, 2)).num_groups == 3


def test_the_built_in_infrastructure_errors_are_episode_failures():
    assert issubclass(MCPServerGone, EpisodeFailure) and issubclass(EpisodeFailure, RolloutError)


def test_a_streamed_group_played_again_gets_a_seed_no_other_attempt_has():
    """A streamed group's seed used ``attempt + 100 × retry``: the 100th stale re-roll and the first retry after an
    EpisodeFailure shared a seed. The retry is now a part of the seed of its own; a first play keeps its seed."""
    from grpo_rollout.generation.seeds import derive_seed
    from grpo_rollout.orchestrator.stage import RolloutStage

    from grpo_rollout.generation.sampling_settings import SamplingSettings

    stage = SimpleNamespace(sampling_settings=lambda step: SamplingSettings(seed=7 + step, n=4),
                            dist=SimpleNamespace(rank=1))
    seed = lambda attempt, retry: RolloutStage.group_sampling(stage, 3, 5, attempt, retry).seed  # noqa: E731
    assert seed(0, 0) == derive_seed(10, "group", 1, 5, 0)  # as before
    seeds = {seed(attempt, retry) for attempt in (0, 1, 100) for retry in (0, 1, 2)}
    assert len(seeds) == 9
