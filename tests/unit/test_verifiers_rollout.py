"""Issue 31.2, without a server: a verifiers episode's tokens as the server returned them become one completion
(environment tokens masked), a wrong environment name, a typo in env_args, a run without a vLLM server and a
missing package each say what to fix, and the rubric becomes the run's reward functions with its weights."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from grpo_rollout.generation.transformers_client import TransformersClient
from grpo_rollout.rollouts.contract import RolloutError
from grpo_rollout.integrations.verifiers.verifiers import _endpoints, episode_tokens, rubric_rewards, verifiers_rollout
from grpo_rollout.integrations.verifiers.verifiers_loading import load_env, load_function

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = "examples/verifiers_sums/env.py:load_environment"


def _turn(prompt_ids, completion_ids, logprobs):
    return {"tokens": {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "completion_logprobs": logprobs}}


def test_a_two_turn_episode_is_one_completion_with_the_environments_tokens_masked():
    state = {"trajectory": [_turn([1, 2, 3], [10, 11], [-0.5, -0.25]),
                            _turn([1, 2, 3, 10, 11, 20, 21, 22], [12], [-1.0])]}
    prompt_ids, ids, logprobs, mask, rebased = episode_tokens(state, "episode")
    assert prompt_ids == [1, 2, 3]
    assert ids == [10, 11, 20, 21, 22, 12]
    assert mask == [1, 1, 0, 0, 0, 1]
    assert logprobs == [-0.5, -0.25, 0.0, 0.0, 0.0, -1.0]
    assert rebased == 0
    state["trajectory"][1]["tokens"]["completion_mask"] = [0]  # an environment may leave a turn untrained
    assert episode_tokens(state, "episode").completion_mask == [1, 1, 0, 0, 0, 0]


def test_a_turn_that_re_renders_earlier_turns_is_rebased_and_counted():
    """Found in review: a template that trims or re-spaces an earlier turn stopped the whole run; now the episode
    restarts from that turn's prompt, the earlier turns kept as masked context."""
    state = {"trajectory": [_turn([1, 2, 3], [10, 11], [-0.5, -0.25]), _turn([1, 2, 3, 10, 99, 20], [12], [-1.0])]}
    tokens = episode_tokens(state, "episode")
    assert tokens.prompt_ids == [1, 2, 3] and tokens.rebased == 1
    assert tokens.completion_ids == [10, 99, 20, 12] and tokens.completion_mask == [0, 0, 0, 1]
    assert tokens.logprobs == [0.0, 0.0, 0.0, -1.0]
    state["trajectory"][1]["tokens"]["prompt_ids"] = [7, 2, 3, 10, 11]
    with pytest.raises(RolloutError, match="turn 2: its prompt does not start with the episode's first prompt"):
        episode_tokens(state, "episode")


def test_an_episode_without_a_turn_says_why():
    with pytest.raises(RolloutError, match="sampled no turn: its first prompt is longer than the server takes"):
        episode_tokens({"trajectory": [], "prompt_too_long": True}, "episode")


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


def test_the_rubric_is_the_reward_and_each_function_is_logged(monkeypatch):
    """Found in review: one reward function per rubric function with the rubric's weight gave the wrong sum when
    two had one name (verifiers keeps one score per name) and none for an EnvGroup; the trained reward is now the sum
    verifiers computed, the functions weight-0 loggers."""
    monkeypatch.chdir(REPO)
    rewards = rubric_rewards({"env": EXAMPLE, "env_args": {"max_turns": 1}}, REPO)
    assert [(name, weight) for name, _, weight in rewards][:3] == [("rubric", 1.0), ("correct_answer", 0.0),
                                                                   ("short_reply", 0.0)]
    scores = [{"short_reply": 1.0, "correct_answer": 1.0}, {"short_reply": 0.0, "correct_answer": 1.0}]
    assert rewards[0][1](["a", "b"], verifiers_reward=[1.2, 1.0], verifiers_scores=scores) == [1.2, 1.0]
    assert rewards[2][1](["a", "b"], verifiers_reward=[1.2, 1.0], verifiers_scores=scores) == [1.0, 0.0]


def test_validate_config_reports_env_args_and_unknown_settings(project, errs):
    cfg = project.baseline()
    cfg["rewards"] = []
    cfg["rollout"] = {"function": "grpo_rollout.integrations.verifiers.verifiers:verifiers_rollout",
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


def test_a_row_reaches_the_environment_with_all_its_columns():
    from grpo_rollout.integrations.verifiers.verifiers import _input

    row = {"prompt": "2+2?", "answer": "4", "question": "2+2?", "info": '{"level": 1}', "task": "arith"}
    out = _input(row, row["prompt"], 3, "Be brief.")
    assert out["question"] == "2+2?" and out["info"] == {"level": 1} and "task" not in out
    assert out["prompt"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}]
    assert out["example_id"] == 3
    with pytest.raises(RolloutError, match="row 5 has an empty prompt"):
        _input({"prompt": []}, [], 5, None)
    with pytest.raises(RolloutError, match="row 2: its `info` column is text but not a JSON object"):
        _input({"info": "easy"}, "hi", 2, None)


def _answer(content):
    from openai.types.chat import ChatCompletion

    return ChatCompletion.model_validate({
        "id": "x", "object": "chat.completion", "created": 0, "model": "m",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}]})


def test_the_training_client_keeps_an_empty_answer_and_gives_each_turn_its_seed_and_what_is_left_of_the_budget():
    """Found in review: an answer of only the end-of-sequence token failed the episode (and the run); every turn drew
    with one seed; a 10-turn episode could sample 10 × max_completion_length."""
    import asyncio

    import verifiers as vf

    from grpo_rollout.integrations.verifiers.verifiers_play import training_client

    client = training_client("chat", object(), budget=20)
    sent = []

    async def native(prompt, model, sampling_args, tools=None, **kwargs):
        sent.append(dict(sampling_args))
        return _answer("")

    client.get_native_response = native
    state = {"trajectory": [_turn([1, 2, 3], [4] * 8, [-0.1] * 8)]}  # 8 tokens used: 12 left
    prompt = [vf.UserMessage(content="hi")]
    answer = asyncio.run(client.get_response(prompt, "m", {"seed": 5, "max_tokens": 20}, state=state))
    asyncio.run(client.get_response(prompt, "m", {"seed": 5, "max_tokens": 20}, state={"trajectory": []}))
    assert answer.message.content in ("", None)
    assert sent[0]["max_tokens"] == 12 and sent[1]["max_tokens"] == 20
    assert sent[1]["seed"] == 5 and sent[0]["seed"] not in (5, 6)  # turn 2 draws from its own seed


def test_an_environment_that_raises_is_named_and_the_loop_is_one_for_the_process(tmp_path):
    import asyncio

    import verifiers as vf
    from datasets import Dataset

    from grpo_rollout.integrations.verifiers.verifiers_play import play_groups, run_on_loop

    class Broken(vf.SingleTurnEnv):
        async def setup_state(self, state):
            return state["input"]["missing"]

    env = Broken(dataset=Dataset.from_list([{"question": "q", "answer": "a"}]), rubric=vf.Rubric(funcs=[]))
    inputs = [{"prompt": [{"role": "user", "content": "q"}], "answer": "a", "example_id": 0, "info": {}}]
    sampling = {"max_tokens": 4, "extra_body": {}}
    with pytest.raises(RolloutError, match=r"prompt 0, episode \d: the environment raised KeyError: 'missing' "
                                           r"\(at .*test_verifiers_rollout.py:\d+\)"):
        run_on_loop(play_groups(env, inputs, 2, [("http://127.0.0.1:9", None)], ["m"], sampling, 1, 8))

    async def loop():
        return asyncio.get_running_loop()

    assert run_on_loop(loop()) is run_on_loop(loop())  # an environment's async clients stay on their loop


def test_a_file_without_its_function_is_named_as_a_file():
    """Found by a trial user: `env: path/env.py` was looked up as an installed environment's id."""
    with pytest.raises(RolloutError, match=r"is a file: name the function .* env: examples/x/env.py:load_environment"):
        load_function("examples/x/env.py")
