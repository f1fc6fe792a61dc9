"""Issue 31.2, without a server: a verifiers episode's tokens as the server returned them become one completion
(environment tokens masked), a wrong environment name, a typo in env_args, a run without a vLLM server and a
missing package each say what to fix, and the rubric becomes the run's reward functions with its weights."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from grpo_rollout.generation.transformers_client import TransformersClient
from grpo_rollout.rollouts.contract import RolloutError
from grpo_rollout.rollouts.verifiers import _endpoints, episode_tokens, rubric_rewards, verifiers_rollout
from grpo_rollout.rollouts.verifiers_loading import load_env, load_function

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = "examples/verifiers_sums/env.py:load_environment"


def _turn(prompt_ids, completion_ids, logprobs):
    return {"tokens": {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "completion_logprobs": logprobs}}


def test_a_two_turn_episode_is_one_completion_with_the_environments_tokens_masked():
    state = {"trajectory": [_turn([1, 2, 3], [10, 11], [-0.5, -0.25]),
                            _turn([1, 2, 3, 10, 11, 20, 21, 22], [12], [-1.0])]}
    prompt_ids, ids, logprobs, mask = episode_tokens(state, "episode")
    assert prompt_ids == [1, 2, 3]
    assert ids == [10, 11, 20, 21, 22, 12]
    assert mask == [1, 1, 0, 0, 0, 1]
    assert logprobs == [-0.5, -0.25, 0.0, 0.0, 0.0, -1.0]


def test_a_turn_that_rewrites_earlier_turns_is_refused_naming_the_turn():
    state = {"trajectory": [_turn([1, 2, 3], [10, 11], [-0.5, -0.25]), _turn([1, 2, 3, 10, 99, 20], [12], [-1.0])]}
    with pytest.raises(RolloutError, match=r"turn 2: .*does not extend .*differ from token 4"):
        episode_tokens(state, "episode")


def test_an_answer_without_token_ids_names_the_server_to_use():
    with pytest.raises(RolloutError, match="carried no token ids.*vLLM server"):
        episode_tokens({"trajectory": [{"tokens": None}]}, "episode")


def test_a_typo_in_env_args_names_the_parameter_meant(monkeypatch):
    monkeypatch.chdir(REPO)
    with pytest.raises(RolloutError, match="env_args: .*no parameter `max_turn`; did you mean `max_turns`"):
        load_env(EXAMPLE, {"max_turn": 1})


def test_an_unknown_environment_id_says_how_to_install_it():
    with pytest.raises(RolloutError, match="no installed verifiers environment has this id.*vf-install no-such-env"):
        load_function("no-such-env")


def test_an_environment_that_raises_or_is_no_environment_is_named_with_its_line(project):
    name = project.module('''
        def broken(size=3):
            raise ValueError("no data for size %d" % size)

        def not_an_env():
            return {"dataset": []}
    ''')
    with pytest.raises(RolloutError, match=rf"{name}.broken\(\*\*env_args\) raised ValueError: no data for size 3 "
                                           rf"\(at .*{name}.py:3\)"):
        load_env(f"{name}:broken")
    with pytest.raises(RolloutError, match="returned a dict; it must return a vf.Environment"):
        load_env(f"{name}:not_an_env")


def test_a_run_without_a_vllm_server_is_told_to_start_one():
    client = TransformersClient.__new__(TransformersClient)  # no model needed: only its kind is asked
    with pytest.raises(RolloutError, match="samples without a server.*vllm.mode: spawn"):
        _endpoints(client)


def test_a_missing_package_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "verifiers", None)  # import verifiers now raises ImportError
    with pytest.raises(RolloutError, match=r"verifiers is not installed.*pip install --no-deps 'verifiers==0.2.0'"):
        load_function(EXAMPLE)
    problems = verifiers_rollout.validate_kwargs({"env": EXAMPLE}, REPO)
    assert [p[0] for p in problems] == ["rollout.function"]


def test_the_rubric_becomes_reward_functions_with_its_weights(monkeypatch):
    monkeypatch.chdir(REPO)
    rewards = rubric_rewards({"env": EXAMPLE, "env_args": {"max_turns": 1}}, REPO)
    assert [(name, weight) for name, _, weight in rewards][:2] == [("correct_answer", 1.0), ("short_reply", 0.2)]
    reader = rewards[1][1]
    assert reader(["a", "b"], verifiers_scores=[{"short_reply": 1.0}, {"short_reply": 0.0}]) == [1.0, 0.0]


def test_validate_config_reports_env_args_and_unknown_settings(project, errs):
    cfg = project.baseline()
    cfg["rewards"] = []
    cfg["rollout"] = {"function": "grpo_rollout.rollouts.verifiers:verifiers_rollout",
                      "kwargs": {"env": str(REPO / EXAMPLE), "env_args": {"num_example": 4}, "enf_args": {}}}
    problems = project.check(cfg, load_data=False)
    env_args = errs(problems, "rollout.kwargs.env_args")
    assert env_args and "did you mean `num_examples`" in env_args[0].message
    unknown = errs(problems, "rollout.kwargs.enf_args")
    assert unknown and "env_args" in unknown[0].fix
    cfg["rollout"]["kwargs"] = {"env": "no-such-env"}
    assert "vf-install" in errs(project.check(cfg, load_data=False), "rollout.kwargs.env")[0].message


def test_building_an_environment_keeps_the_runs_signal_handlers_and_works_off_the_main_thread(monkeypatch):
    """verifiers' Environment installs SIGINT/SIGTERM handlers when built: off the main thread that raised
    ValueError (found by the worker-thread test), and on it the trainer's own handlers were replaced."""
    import signal
    from concurrent.futures import ThreadPoolExecutor

    monkeypatch.chdir(REPO)
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    with ThreadPoolExecutor(1) as pool:
        env = pool.submit(load_env, EXAMPLE, {"num_examples": 3, "seed": 11}).result()
    assert len(env.get_dataset()) == 3
    load_env(EXAMPLE, {"num_examples": 3, "seed": 12})  # and on the main thread
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before
