"""What moving the config onto pydantic (issue 21) fixed or must keep: each fault found on the way, with its input,
and the rules the loader adds around pydantic (value errors kept for the range checks, no follow-on errors)."""

from __future__ import annotations

import warnings

import pytest

from grpo_rollout.config import Config, config_from_dict, load_config
from grpo_rollout.config.ranges import check_values
from grpo_rollout.preflight import validate


def test_an_interpolation_omegaconf_cannot_parse_is_a_problem_not_a_traceback():
    # config_from_dict handed this to OmegaConf.create, which raised GrammarParseError out of the loader
    config, problems = config_from_dict({"logging": {"run_name": "price ${"}})
    [p] = problems
    assert p.message.startswith("interpolation failed") and p.key == "<config>"
    assert config.logging.run_name == "price ${"  # left as written


@pytest.mark.parametrize("value", [-1, "7", 2])
def test_a_boolean_key_takes_only_booleans(value):
    # OmegaConf took -1 and "7" for `data.shuffle` (as true); pydantic reads only true/false, 0/1 and yes/no words
    config, problems = config_from_dict({"data": {"shuffle": value}})
    [p] = problems
    assert (p.key, p.value, p.message) == ("data.shuffle", value, f"expected bool, got {type(value).__name__}")
    assert config.data.shuffle is True


def test_loading_warns_nothing_for_values_it_converts(tmp_path):
    # OmegaConf's structured configs warned "Implicit conversion from str to int ... is deprecated" for these
    path = tmp_path / "c.yaml"
    path.write_text("sampling:\n  num_generations: '8'\nmodel:\n  name_or_path: 5\n  revision: 0123456\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loaded = load_config(path)
    assert loaded.problems == []
    assert (loaded.config.sampling.num_generations, loaded.config.model.name_or_path) == (8, "5")
    assert loaded.config.model.revision == "0123456"


def test_a_failed_interpolation_inside_a_list_item_names_its_key(monkeypatch):
    # it was reported at `<config>` ("fix the key named above", no key named) and the whole rewards list was lost
    monkeypatch.delenv("GRPO_TEST_UNSET", raising=False)
    config, problems = config_from_dict({"rewards": [{"function": "m:f", "weight": "${oc.env:GRPO_TEST_UNSET}"}]})
    [p] = problems
    assert (p.key, p.value) == ("rewards[0].weight", "${oc.env:GRPO_TEST_UNSET}")
    assert "GRPO_TEST_UNSET" in p.message
    assert [(r.function, r.weight) for r in config.rewards] == [("m:f", 1.0)]


def test_a_section_interpolated_from_another_kind_is_one_problem():
    config, problems = config_from_dict({"rollout": "${model}"})
    [p] = problems
    assert (p.key, p.value) == ("rollout", "${model}")
    assert p.message.startswith("interpolation failed: what it resolved to is not RolloutConfig")
    assert config.rollout == Config().rollout


def test_a_value_outside_its_range_is_kept_in_its_type_and_reported_once(project):
    cfg = project.baseline()
    cfg["sampling"]["temperature"] = 0  # a YAML int for a float key, outside the range
    config, load_problems = config_from_dict(cfg)
    assert load_problems == []  # ranges are the range checks' job, as before
    assert type(config.sampling.temperature) is float and config.sampling.temperature == 0.0
    found = [p for p in validate(config, project.root, known=load_problems) if p.key == "sampling.temperature"]
    assert len(found) == 1 and found[0].value == 0.0


def test_a_rule_across_keys_of_a_section_skips_a_key_with_its_own_error():
    config, _ = config_from_dict({"training": {"epsilon": 0.0, "epsilon_high": 0.1}})
    problems = []
    check_values(config, problems)
    assert [p.key for p in problems] == ["training.epsilon"]  # not also "epsilon_high is below epsilon"
    config, _ = config_from_dict({"training": {"epsilon": 0.3, "epsilon_high": 0.1}})
    problems = []
    check_values(config, problems)
    assert [(p.key, p.message) for p in problems] == [("training.epsilon_high", "is below training.epsilon (0.3)")]


def test_a_config_changed_in_python_is_checked_as_it_is_now():
    config = Config()
    config.sampling.temperature = "hot"  # no validation on assignment: validate() sees it
    problems = []
    check_values(config, problems)
    assert [(p.key, p.value, p.message) for p in problems] == [
        ("sampling.temperature", "hot", "expected float, got str")]


# --- found by a new user trying to break validate-config (issue 21) -----------------------------------------------

def test_an_interpolation_omegaconf_cannot_parse_in_a_file_names_its_key(project, errs):
    # it was "<config>: not valid YAML: no viable alternative at input '${'", fix "at the line named" (none named)
    loaded = load_config(project.write_config('training:\n  output_dir: "price ${"\n'))
    [p] = errs(loaded.problems)
    assert p.key == "training.output_dir" and p.message.startswith("interpolation OmegaConf cannot parse")
    assert "\\${" in p.fix


def test_a_yaml_error_names_its_line_and_column(project, errs):
    [p] = errs(load_config(project.write_config("sampling:\n  temperature: 0.5\n  top_p: [0.5,\n")).problems)
    assert p.message.startswith("not valid YAML (line 4, column 1)")


@pytest.mark.parametrize("text, key", [(".nan", "sampling.temperature"), (".inf", "sampling.temperature"),
                                       ("-.inf", "training.learning_rate"), (".inf", "training.num_epochs")])
def test_nan_and_infinity_are_refused_as_not_finite(project, errs, text, key):
    # `.nan` got "must be > 0: at temperature 0 ..." (the wrong reason) and `.inf` passed everywhere
    [p] = errs(project.check(project.baseline(), [f"{key}={text}"]))
    assert p.key == key and p.message.startswith("must be a finite number")


def test_top_k_zero_is_named_as_allowed():
    config, _ = config_from_dict({"sampling": {"top_k": -5}})
    problems = []
    check_values(config, problems)
    assert [p.message for p in problems] == ["must be -1 or 0 (disabled) or >= 1"]


def test_the_same_name_in_another_section_beats_a_close_one_here(project, errs):
    # `training.num_generations` suggested `training.num_iterations`
    [p] = errs(project.check(project.baseline(), ["training.num_generations=8"]))
    assert p.fix == "did you mean `sampling.num_generations`?"


def test_an_override_of_a_shorthand_reward_keeps_its_function(project, errs):
    # `rewards: [rewards.py:accuracy]` with `rewards.0.weight=2` replaced the entry: "empty reward function"
    cfg = project.baseline()
    cfg["rewards"] = ["rewards.py:accuracy"]
    loaded = load_config(project.write_config(cfg), ["rewards.0.weight=2"])
    assert loaded.problems == []
    assert [(r.function, r.weight) for r in loaded.config.rewards] == [("rewards.py:accuracy", 2.0)]


@pytest.mark.parametrize("change, overrides, key", [
    ({"rewards": {"function": "rewards.py:accuracy"}}, [], "rewards"),           # no "no reward function configured"
    ({"rewards": [5]}, [], "rewards[0]"),                                         # no "empty reward function"
    ({}, ["vllm.mode=attach", "vllm.urls=http://x:8000"], "vllm.urls"),           # no "no server URL is set"
    ({}, ["vllm.num_servers=abc", 'vllm.server_devices=["0","1"]'], "vllm.num_servers"),  # no "num_servers is 1"
])
def test_one_mistake_gives_one_error(project, errs, change, overrides, key):
    cfg = {**project.baseline(), **change}
    [p] = errs(project.check(cfg, overrides))
    assert p.key == key


def test_a_missing_data_file_names_each_folder_once(project, errs):
    cfg = project.baseline()
    cfg["data"]["train"] = "nope.jsonl"
    [p] = errs(project.check(cfg))  # the project's folder is both the current one and the config's
    assert p.message.count(str(project.root.resolve())) == 1


def test_a_top_level_list_gets_a_fix_that_says_what_to_write(project, errs):
    [p] = errs(load_config(project.write_config("- a\n- b\n")).problems)
    assert p.fix.startswith("write the config as a mapping of sections, such as model, data, rollout")


@pytest.mark.parametrize("text, message, fix", [
    # a new user's inputs: they said only "while constructing a mapping" and "while parsing a flow sequence"
    ("training:\n  max_steps: 2\ntraining:\n  learning_rate: 1.0\n",
     "not valid YAML (line 3, column 1): found duplicate key training, while constructing a mapping that starts at "
     "line 1, column 1", "write each key once"),
    ("sampling: {top_k: [1, 2\ntraining: {max_steps: 3}\n",
     "not valid YAML (line 2, column 9): did not find expected ',' or ']', while parsing a flow sequence that starts "
     "at line 1, column 19", "fix the YAML syntax there"),
])
def test_a_yaml_error_says_what_is_wrong_and_where_it_started(project, errs, text, message, fix):
    [p] = errs(load_config(project.write_config(text)).problems)
    assert p.message == message and p.fix.startswith(fix)
