"""Issue 39.3 and 39.9, a verifiers environment played against a scripted server (tests/verifiers_helpers.py): the
episode ends at max_completion_length as the built-in rollouts' do (no turn sampled, played or scored past it), and
a rubric function that raises stops the run naming it where verifiers scored it 0 (a vf.Error or EpisodeFailure from
one fails the episode: rollout.on_error)."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from grpo_rollout import EpisodeFailure
from grpo_rollout.rollouts.contract import RolloutError, RolloutOutput
from grpo_rollout.orchestrator.batch import CompletionScores, ScoredBatch
from grpo_rollout.integrations.verifiers.verifiers import verifiers_rollout
from grpo_rollout.orchestrator.failures import EpisodeFailures
from tests.verifiers_helpers import END, ENV_SOURCE, X, ScriptedServer, rows


def _play(project, monkeypatch, answer_len, budget, env_args=None, answers=("a",), n=1, source=ENV_SOURCE):
    server = ScriptedServer(answer_len)
    client = server.install(monkeypatch)
    env = f"{project.module(source)}:load_environment"
    data = rows(*answers)
    out = verifiers_rollout([r["prompt"] for r in data], client=client, rows=data, n=n, env=env,
                            env_args=env_args or {}, max_completion_length=budget, seed=3)
    return out, server


def _scored(out, groups):
    n = len(out["completion_ids"]) // groups
    rollout = RolloutOutput(out["prompt_ids"], out["completion_ids"], out["logprobs"], out["completion_mask"], {},
                            groups, n)
    k = len(out["completion_ids"])
    scores = CompletionScores(rewards=out["verifiers_reward"], per_function={}, prompts=["p"] * k, texts=["t"] * k,
                              lengths=[1] * k, truncated=out["truncated"], extras={})
    return ScoredBatch(rollout, scores, 0.0)


def test_no_turn_is_played_after_a_turn_used_the_whole_budget(project, monkeypatch):
    """The issue's input: max_completion_length 16, a 3-turn environment, turn 1 uses all 16 tokens. Before, turns 2
    and 3 were sampled (max_tokens 1 each) and paid 1.5 of the 2.5 reward; now the episode ends after turn 1."""
    out, server = _play(project, monkeypatch, answer_len=16, budget=16)
    assert [limit for limit, _ in server.requests] == [16]  # one model call; none with nothing left
    assert out["verifiers_reward"] == [1.0] and out["num_turns"] == [1]
    assert out["completion_ids"] == [[X] * 15 + [END]] and out["completion_mask"] == [[1] * 16]
    assert out["truncated"] == [True] and out["end_reason"] == ["budget_turn"]
    assert "turn 1 used the last of max_completion_length=16 tokens" in out["end_detail"][0]


def test_a_reply_that_leaves_no_room_ends_the_episode_and_its_turn_is_not_scored(project, monkeypatch):
    """Turns of 8 tokens, replies of 7 (role, 'more', end, generation prompt): turn 2 ends at 23 of 24; turn 3's
    prompt is past the budget, so its answer is not kept (budget_reply) and the reward is that of two turns."""
    out, server = _play(project, monkeypatch, answer_len=8, budget=24)
    assert [limit for limit, _ in server.requests] == [24, 16, 1]
    assert out["num_turns"] == [2] and out["verifiers_reward"] == [1.75]
    assert len(out["completion_ids"][0]) == 23 and sum(out["completion_mask"][0]) == 16
    assert out["end_reason"] == ["budget_reply"] and out["truncated"] == [True]
    assert "the reply after turn 2 needs 7 tokens" in out["end_detail"][0]
    assert "at least 31" in out["end_detail"][0]


def test_a_turn_the_reply_left_less_room_is_sampled_again_within_it(project, monkeypatch):
    """Budget 20: turn 2 was asked for 12 tokens (20 - 8) but its prompt's reply took 7: it is sampled again with
    the 5 left, so the whole episode is 20 tokens, all played ones trained, and no turn 3."""
    out, server = _play(project, monkeypatch, answer_len=8, budget=20)
    assert [limit for limit, _ in server.requests] == [20, 12, 5]
    assert out["num_turns"] == [2] and out["verifiers_reward"] == [1.75]
    ids, mask = out["completion_ids"][0], out["completion_mask"][0]
    assert len(ids) == 20 and ids[-5:] == [X] * 5 and mask[-5:] == [1] * 5
    assert out["end_reason"] == ["budget_turn"] and out["truncated"] == [True]


def test_an_episode_within_the_budget_plays_every_turn(project, monkeypatch):
    out, server = _play(project, monkeypatch, answer_len=4, budget=64)
    assert len(server.requests) == 3 and out["verifiers_reward"] == [2.5]
    assert out["end_reason"] == ["max_turns"] and out["truncated"] == [False]


def test_a_rubric_function_that_raises_stops_the_run_naming_it_and_its_line(project, monkeypatch, caplog):
    """The issue's input: a rubric function dividing by zero was scored 0 (verifiers logged "Error calling reward
    function broken: float division by zero") and training went on."""
    with caplog.at_level(logging.ERROR), pytest.raises(RolloutError) as raised:
        _play(project, monkeypatch, answer_len=4, budget=64, env_args={"rubric": "answered,broken"}, n=4)
    assert not isinstance(raised.value, EpisodeFailure)  # a bug: the run stops whatever rollout.on_error says
    assert raised.match(r"prompt 0: the rubric function `broken` \(defined at .*usermod_\w+\.py:15\) raised "
                        r"ZeroDivisionError: float division by zero \(at .*usermod_\w+\.py:16\); fix the function")
    assert "Error calling reward function" not in caplog.text


def test_a_rubric_function_returning_no_number_is_named(project, monkeypatch):
    source = ENV_SOURCE.replace("return 1.0 + 0.75", "return None and 1.0 + 0.75")
    with pytest.raises(RolloutError, match=r"rubric function `answered` .* raised TypeError: returned a NoneType "
                                           r"\(None\); a rubric function returns a number"):
        _play(project, monkeypatch, answer_len=4, budget=64, source=source)


def test_a_judge_gone_in_the_rubric_fails_the_episode_and_on_error_drop_counts_it(project, monkeypatch):
    """A vf.Error from a rubric function (its judge's server gone: outside the user's code) is an EpisodeFailure:
    rollout.on_error: drop leaves that group out and counts its episodes failed."""
    failures = EpisodeFailures(SimpleNamespace(on_error="drop", max_retries=0, failure_errors=[]), 2,
                               SimpleNamespace(sum=lambda values: values, rank=0))
    answers = ("judge-down", "fine")

    def play(groups):
        out, _ = _play(project, monkeypatch, answer_len=4, budget=64, env_args={"rubric": "answered,judged"},
                       answers=[answers[g] for g in groups], n=2)
        return _scored(out, len(groups))

    with pytest.raises(EpisodeFailure, match=r"prompt 0: the rubric function `judged` .* raised InfraError: the "
                                             r"judge's server is gone"):
        play([0, 1])
    kept = failures.play_step(0, lambda: play([0, 1]), lambda g, attempt: play([g]), list(enumerate(answers)))
    assert kept.scores.rewards == [3.5, 3.5]  # group 1 alone: 2.5 + the judge's 1.0, each episode
    assert failures.metrics() == {"episodes/failed": 4, "episodes/retried": 4, "episodes/dropped": 2,
                                 "episodes/prompts_dropped": 1}


def test_outside_the_runs_scoring_a_guarded_rubric_function_behaves_as_written(project):
    """(verifiers' own evaluation of the same environment object still gets the function's own error)"""
    from grpo_rollout.integrations.verifiers.verifiers_loading import load_env
    from grpo_rollout.integrations.verifiers.verifiers_rubric import guard_rubric

    env = load_env(f"{project.module(ENV_SOURCE)}:load_environment", {"rubric": "broken"})
    guard_rubric(env.rubric)
    [broken] = [f for rubric in env.rubric.rubrics for f in rubric.funcs if f.__name__ == "broken"]
    assert hasattr(broken, "__wrapped__")
    with pytest.raises(ZeroDivisionError):
        broken(state={"trajectory": []})
