"""Issue 51.10-11: a reward's parameter that cannot be served is found by validate-config, not at step 1 (a reward
taking `prompt` instead of `prompts` failed 3 min 49 s into a run while validate-config said valid). A reward receives
every dataset column, the prompt column too, as docs/rollouts.md says; what it cannot receive is named with what it
could take and a did-you-mean, statically and at run time."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from grpo_rollout.config import Config
from grpo_rollout.orchestrator.stage import RolloutStage
from grpo_rollout.rewards.calling import RewardError, RewardFunction, compute_rewards
from test_version_threads import StampingClient, plain_call

PROMPT_NOT_PROMPTS = "def echo(prompt, completions):\n    return [float(len(p)) for p in prompt]\n"
COMPLETION_NOT_COMPLETIONS = "def count(completion):\n    return [0.0] * len(completion)\n"


def _reward(project, source, fn):
    cfg = project.baseline()
    cfg["rewards"] = [{"function": f"{project.module(source)}:{fn}"}]
    return cfg


def _question_data(project, cfg):
    """The same rows with the prompts in a column `question`: no column `prompt`."""
    project.write_jsonl("questions.jsonl", [{"question": "What is 1+1?", "answer": "2"}])
    cfg["data"] = {"train": "questions.jsonl", "prompt_column": "question"}
    return cfg


def test_a_reward_taking_the_prompt_column_is_valid(project):
    assert project.check(_reward(project, PROMPT_NOT_PROMPTS, "echo")) == []  # data.jsonl has a column `prompt`


def test_a_reward_taking_prompt_without_such_a_column_is_an_error_naming_prompts(project, errs):
    [p] = errs(project.check(_question_data(project, _reward(project, PROMPT_NOT_PROMPTS, "echo"))))
    assert (p.key, p.severity) == ("rewards[0].function", "error")
    assert p.message == ("requires `prompt`, which is neither a standard argument (prompts, completions, "
                         "completion_ids, step), a dataset column (question, answer), a config kwarg, nor an extra "
                         "of the rollout; did you mean `prompts` (a standard argument)?")
    assert p.fix.startswith("rename the parameter to `prompts`, or add the column `prompt` to the dataset")


@pytest.mark.parametrize("rollout, severity", [("", "error"), ("plain", "warning")])
def test_completion_for_completions_says_did_you_mean(project, rollout, severity):
    cfg = _reward(project, COMPLETION_NOT_COMPLETIONS, "count")
    if rollout:  # a rollout that declares no extras: `completion` could still be one, so a warning
        cfg["rollout"] = {"function": f"{project.module('def rollout(prompts, **kw):' + chr(10) + '    return {}')}"
                                      f":rollout"}
    [p] = project.check(cfg)
    assert (p.key, p.severity) == ("rewards[0].function", severity)
    assert p.message.startswith("requires `completion`, which is neither")
    assert p.message.endswith("did you mean `completions` (a standard argument)?")


def test_without_the_data_a_likely_misspelling_is_still_said(project):
    """--skip-data: the columns are unknown, so `answer` passes (it may be one), and `prompt`, one letter from the
    standard `prompts`, is a warning that says both."""
    [p] = project.check(_reward(project, PROMPT_NOT_PROMPTS, "echo"), load_data=False)
    assert (p.key, p.severity) == ("rewards[0].function", "warning")
    assert "the dataset was not loaded, so it may be a column; did you mean `prompts` (a standard argument)?" \
        in p.message
    assert project.check(project.baseline(), load_data=False) == []  # accuracy(completions, answer)
    assert project.check(_reward(project, "def r(completions, level):\n    return []\n", "r"), load_data=False) == []


def test_a_config_kwarg_serves_a_parameter_and_wins_over_a_column(project):
    cfg = _reward(project, "def r(completions, answer, scale):\n    return [scale] * len(completions)\n", "r")
    cfg["rewards"][0]["kwargs"] = {"scale": 2.0}
    assert project.check(cfg) == []
    res = compute_rewards([RewardFunction("r", lambda completions, answer: [float(answer)], kwargs={"answer": 7})],
                          prompts=["p"], completions=["c"], completion_ids=[[1]], columns={"answer": ["3"]},
                          extras={}, step=0)
    assert res.rewards == [7.0]


# --- at run time ----------------------------------------------------------------------------------------------------

def _stage(tmp_path, rows, prompt_column, reward):
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = Config()
    config.data.train, config.data.shuffle, config.data.prompt_column = str(tmp_path / "data.jsonl"), False, \
        prompt_column
    config.sampling.num_generations, config.training.prompts_per_step = 2, 2
    stage = RolloutStage(config, tmp_path, SimpleNamespace(world_size=1, rank=0))
    stage.rollout_fn, stage.rewards = plain_call, [RewardFunction("seen", reward)]
    tokenizer = SimpleNamespace(batch_decode=lambda ids, **kw: ["ok"] * len(ids), decode=lambda ids, **kw: "x")
    stage.connect(StampingClient(0), tokenizer, {0}, 100)
    return stage


@pytest.mark.parametrize("column", ["prompt", "question"])
def test_the_prompt_column_reaches_the_reward_under_its_name(tmp_path, column):
    """Before, every column but `data.prompt_column` was passed: `prompt` (or `question`) was missing at step 1."""
    seen = {}

    def reward(completions, **kwargs):
        seen.update(kwargs)
        return [0.0] * len(completions)

    rows = [{column: "What is 1+1?", "answer": "2"}, {column: "What is 2+3?", "answer": "5"}]
    stage = _stage(tmp_path, rows, column, reward)
    stage.generate_and_score(0, rows, stage.sampling_settings(0))
    assert seen[column] == ["What is 1+1?"] * 2 + ["What is 2+3?"] * 2  # the row's, repeated per completion
    assert seen["answer"] == ["2", "2", "5", "5"] and len(seen["prompts"]) == 4


def test_at_run_time_the_error_lists_what_a_reward_can_take_with_did_you_mean():
    def count(completion):
        return [0.0] * len(completion)

    with pytest.raises(RewardError) as caught:
        compute_rewards([RewardFunction("count", count, kwargs={"scale": 1})], prompts=["p"], completions=["c"],
                        completion_ids=[[1]], columns={"prompt": ["p"], "answer": ["2"]}, extras={"turns": [1]},
                        step=0)
    message = str(caught.value)
    assert message.startswith("reward function `count` (defined at ")
    assert f"test_reward_arguments.py:{count.__code__.co_firstlineno})" in message
    assert ("requires `completion`, which is neither a standard argument, a dataset column, a rollout extra nor a "
            "config kwarg (it can take standard arguments: prompts, completions, completion_ids, step; dataset "
            "columns: prompt, answer; rollout extras: turns; config kwargs: scale); did you mean `completions` (a "
            "standard argument) for `completion`?") in message
