"""Loading a YAML config: interpolations, command-line overrides, unreadable files and strict mode."""

from __future__ import annotations

import pytest
import yaml

from grpo_rollout.config import ConfigError, config_from_dict, load_config, to_yaml
from grpo_rollout.preflight import check_config


# --- interpolation --------------------------------------------------------------------------------------------------

def test_interpolation_and_env_variables_resolve(project, monkeypatch):
    monkeypatch.setenv("GRPO_TEST_OUT", str(project.root / "env_out"))
    monkeypatch.setenv("GRPO_TEST_STEPS", "17")
    text = """\
    sampling:
      num_generations: 6
    training:
      micro_batch_size: ${sampling.num_generations}
      output_dir: ${oc.env:GRPO_TEST_OUT}
      max_steps: ${oc.env:GRPO_TEST_STEPS}
    rollout:
      kwargs:
        n: ${sampling.num_generations}
    """
    loaded = load_config(project.write_config(text))
    assert loaded.problems == []
    t = loaded.config.training
    assert (t.micro_batch_size, t.output_dir, t.max_steps) == (6, str(project.root / "env_out"), 17)
    assert loaded.config.rollout.kwargs == {"n": 6}


@pytest.mark.parametrize("expr, needle", [
    ("${sampling.nope}", "sampling.nope"),
    ("${oc.env:GRPO_TEST_SURELY_UNSET}", "GRPO_TEST_SURELY_UNSET"),
    ("${oc.env:GRPO_TEST_WORDS}", "could not be converted"),  # resolves to a string that is no int
])
def test_broken_interpolation_names_the_key(project, errs, monkeypatch, expr, needle):
    monkeypatch.delenv("GRPO_TEST_SURELY_UNSET", raising=False)
    monkeypatch.setenv("GRPO_TEST_WORDS", "many")
    loaded = load_config(project.write_config(f"training:\n  max_steps: {expr}\n  save_steps: 3\n"))
    [p] = errs(loaded.problems)
    assert p.key == "training.max_steps"
    assert p.value == expr
    assert p.message.startswith("interpolation failed") and needle in p.message
    assert loaded.config.training.max_steps == 100  # schema default put back
    assert loaded.config.training.save_steps == 3


# --- overrides ------------------------------------------------------------------------------------------------------

def test_overrides_apply_over_the_file(project):
    path = project.write_config(project.baseline())
    loaded = load_config(path, ["sampling.temperature=0.7", "training.max_steps=5", "rewards.0.weight=2.5"])
    assert loaded.problems == []
    assert loaded.config.sampling.temperature == 0.7
    assert loaded.config.training.max_steps == 5
    assert loaded.config.rewards[0].weight == 2.5
    assert loaded.config.rewards[0].function == "rewards.py:accuracy"


def test_override_with_unknown_key_or_wrong_type(project, errs):
    path = project.write_config(project.baseline())
    loaded = load_config(path, ["sampling.temprature=0.2", "training.max_steps=abc"])
    problems = {p.key: p for p in errs(loaded.problems)}
    assert set(problems) == {"sampling.temprature", "training.max_steps"}
    assert "sampling.temperature" in problems["sampling.temprature"].fix
    assert problems["training.max_steps"].value == "abc"


def test_an_empty_value_of_a_text_key_is_empty_not_null(project, errs):
    """Issue 28: `data.eval=` on the command line (and `eval:` with nothing in YAML) read as null, refused with
    "expected str, got NoneType"; it is the empty text. A key that takes null keeps null."""
    path = project.write_config(project.baseline())
    loaded = load_config(path, ["data.eval=", "rollout.function=", "vllm.url="])
    assert loaded.problems == []
    assert loaded.config.data.eval == "" and loaded.config.rollout.function == "" and loaded.config.vllm.url is None
    written = project.write("empty.yaml", "data:\n  train: data.jsonl\n  eval:\nvllm:\n  url:\n")
    loaded = load_config(written)
    assert loaded.problems == [] and loaded.config.data.eval == "" and loaded.config.vllm.url is None
    [problem] = errs(load_config(path, ["data.eval=null"]).problems)
    assert (problem.key, problem.message) == ("data.eval", "expected str, got null")
    assert problem.fix == 'for none, leave it empty: `data.eval: ""` in YAML, `data.eval=` on the command line'


def test_override_of_a_list_item_with_brackets(project):
    loaded = load_config(project.write_config(project.baseline()), ["rewards[0].weight=0.5"])
    assert loaded.problems == []
    assert loaded.config.rewards[0].weight == 0.5


def test_hydra_style_plus_override_adds_a_key(project, errs):
    loaded = load_config(project.write_config(project.baseline()),
                         ["+rollout.kwargs.env_kwargs.hint_bonus=0.2", "+training.max_steps=4"])
    assert loaded.problems == []
    assert loaded.config.rollout.kwargs == {"env_kwargs": {"hint_bonus": 0.2}}
    assert loaded.config.training.max_steps == 4
    [p] = errs(load_config(project.write_config(project.baseline()), ["+training.max_stepz=4"]).problems)
    assert p.key == "training.max_stepz" and "training.max_steps" in p.fix


@pytest.mark.parametrize("bad", ["foo", "=5"])
def test_malformed_override_is_a_problem(project, errs, bad):
    loaded = load_config(project.write_config(project.baseline()), [bad, "training.max_steps=3"])
    [p] = errs(loaded.problems)
    assert p.key == bad
    assert p.message == "override is not of the form key=value"
    assert loaded.config.training.max_steps == 3  # the good override still applies


@pytest.mark.parametrize("bad, key", [("sampling.temperature=[0.5", "sampling.temperature"),  # not YAML
                                      ("rewards.3.weight=2", "rewards.3.weight")])  # no such list item
def test_override_that_cannot_be_applied_is_a_problem(project, errs, bad, key):
    loaded = load_config(project.write_config(project.baseline()), [bad, "training.max_steps=3"])
    [p] = errs(loaded.problems)
    assert p.key == key
    assert p.message.startswith("override could not be applied")
    assert loaded.config.training.max_steps == 3
    assert loaded.config.sampling.temperature == 1.0


def test_a_single_value_for_a_list_key_gets_the_list_written_out(project, errs):
    """A new user's `logging.report_to=jsonl`: the fix said "set it to a list of str", without the syntax."""
    [p] = errs(load_config(project.write_config(project.baseline()), ["logging.report_to=jsonl"]).problems)
    assert p.key == "logging.report_to" and p.message == "expected a list of str, got str"
    assert p.fix == "write it as a list: `logging.report_to: [jsonl]` in YAML, `logging.report_to=[jsonl]` on the " \
        "command line"


# --- unreadable files and strict mode -------------------------------------------------------------------------------

def test_yaml_syntax_error_is_a_problem(project, errs):
    loaded = load_config(project.write_config("sampling:\n  temperature: [0.5,\n"))
    [p] = errs(loaded.problems)
    assert (p.key, loaded.config) == ("<config>", None)
    assert p.message.startswith("not valid YAML")


def test_missing_file_is_a_problem(project, errs):
    loaded, problems = check_config(project.root / "nope.yaml")
    [p] = errs(problems)
    assert (p.key, p.message, loaded.config) == ("<config>", "config file not found", None)


def test_strict_raises_config_error_with_every_problem(project):
    cfg = project.baseline()
    cfg["sampling"]["temprature"] = 0.5
    cfg["training"]["learning_rate"] = "fast"
    with pytest.raises(ConfigError) as info:
        load_config(project.write_config(cfg), strict=True)
    assert [p.key for p in info.value.problems] == ["sampling.temprature", "training.learning_rate"]
    assert str(info.value).startswith("2 problem(s) in the config:")
    assert "sampling.temprature: unknown key Fix: did you mean `sampling.temperature`?" in str(info.value)
    with pytest.raises(ConfigError):
        load_config(project.root / "nope.yaml", strict=True)


def test_strict_does_not_raise_for_a_valid_config(project):
    loaded = load_config(project.write_config(project.baseline()), strict=True)
    assert loaded.config.training.micro_batch_size == 4


def test_config_from_dict_and_to_yaml_round_trip():
    config, problems = config_from_dict({"sampling": {"temperature": 0.6, "temprature": 1}, "rewards": ["m:f"]})
    assert [p.key for p in problems] == ["sampling.temprature"]
    assert config.sampling.temperature == 0.6
    again, problems = config_from_dict(yaml.safe_load(to_yaml(config)))
    assert problems == []
    assert again == config


# Found by config fuzzing (issue 9): an interpolation that fails inside a list escaped as an OmegaConf exception.
def test_failed_interpolations_inside_lists_are_problems():
    cfg, problems = config_from_dict({"rewards": ["${nope}"],
                                      "logging": {"report_to": ["jsonl", "${oc.env:GRPO_NO_SUCH_VARIABLE}"]}})
    assert [(p.key, p.value) for p in problems] == [("rewards[0]", "${nope}"),
                                                    ("logging.report_to[1]", "${oc.env:GRPO_NO_SUCH_VARIABLE}")]
    assert all(p.message.startswith("interpolation failed: ") for p in problems)
    assert cfg.logging.report_to == ["jsonl"] and cfg.rewards == []
