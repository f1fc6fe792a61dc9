"""Loading a YAML config: unknown keys, wrong types, YAML quirks and the text a string key keeps."""

from __future__ import annotations

import pytest

from grpo_rollout.config import Config, config_from_dict, load_config, to_yaml
from grpo_rollout.preflight import check_config
from grpo_rollout.config.key_suggestions import suggest_key
from grpo_rollout.config.schema import LoraConfig, RewardConfig, SamplingConfig, TrainingConfig


def test_baseline_config_is_valid(project):
    loaded, problems = check_config(project.write_config(project.baseline()))
    assert problems == []
    assert loaded.config.sampling.num_generations == 4
    assert loaded.config.training.prompts_per_step == 2
    assert loaded.config.rewards[0].function == "rewards.py:accuracy"
    assert loaded.base_dir == project.root.resolve()


def test_missing_sections_take_schema_defaults(project):
    loaded = load_config(project.write_config("sampling:\n  temperature: 0.5\n"))
    assert loaded.problems == []
    assert loaded.config.sampling.temperature == 0.5
    assert loaded.config.sampling.num_generations == SamplingConfig().num_generations == 8
    assert loaded.config.training.loss_type == "dapo"
    assert loaded.config.rewards == []


def test_empty_file_loads_defaults(project):
    loaded = load_config(project.write("empty.yaml", ""))
    assert loaded.problems == []
    assert loaded.config == Config()


# --- unknown keys ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("section, bad, suggestion", [
    ("sampling", "temprature", "sampling.temperature"),   # typo in the right section
    ("training", "temperature", "sampling.temperature"),  # right name, wrong section
    ("training", "batch_size", "training.micro_batch_size"),
    ("sampling", "learning_rate", "training.learning_rate"),
    ("training", "lerning_rate", "training.learning_rate"),
    ("vllm", "max_model_length", "vllm.max_model_len"),
])
def test_unknown_key_suggests_nearest_valid_key(project, errs, section, bad, suggestion):
    cfg = project.baseline()
    cfg.setdefault(section, {})[bad] = 0.5
    problems = project.check(cfg)
    [p] = errs(problems)
    assert p.key == f"{section}.{bad}"
    assert p.message == "unknown key"
    assert p.value == 0.5
    assert f"`{suggestion}`" in p.fix


@pytest.mark.parametrize("section, bad, fix_start", [
    ("training", "gradient_accumulation_steps", "none needed: accumulation follows from training.prompts_per_step × "
                                                "sampling.num_generations ÷ training.micro_batch_size"),
    ("training", "generation_batch_size", "a step generates training.prompts_per_step × sampling.num_generations"),
    ("training", "steps_per_generation", "a step generates once, then makes training.num_iterations updates"),
    ("training", "bf16", "set model.dtype: bfloat16"),
    ("training", "fp16", "set model.dtype: bfloat16 (mixed precision"),  # float16 itself is refused
    ("vllm", "use_vllm", "set vllm.mode: spawn"),
])
def test_another_trainers_key_says_what_to_set_instead(project, errs, section, bad, fix_start):
    """Issue 28: TRL's `training.gradient_accumulation_steps` got the list of 40 valid keys; `generation_batch_size`
    was pointed at micro_batch_size and `steps_per_generation` at async_generation, neither of which means that."""
    cfg = project.baseline()
    cfg.setdefault(section, {})[bad] = 4
    [p] = errs(project.check(cfg))
    assert (p.key, p.value, p.message) == (f"{section}.{bad}", 4, "unknown key (another trainer's setting)")
    assert p.fix.startswith(fix_start) and "valid keys here" not in p.fix


def test_unknown_top_level_and_reward_item_keys(project, errs):
    cfg = project.baseline()
    cfg["modle"] = {"dtype": "float32"}
    cfg["rewards"][0]["weigth"] = 2.0
    problems = errs(project.check(cfg))
    assert {p.key: p.fix for p in problems} == {"modle": "did you mean `model`?",
                                                "rewards[0].weigth": "did you mean `rewards[0].weight`?"}


@pytest.mark.parametrize("section, bad", [("vllm", "zzzzqqq"), ("training", "lr"), ("training", "foo")])
def test_unknown_key_without_any_close_match_lists_valid_keys(project, errs, section, bad):
    cfg = project.baseline()
    cfg.setdefault(section, {})[bad] = 1
    [p] = errs(project.check(cfg))
    assert p.key == f"{section}.{bad}"
    assert p.fix.startswith("valid keys here: ")  # not "did you mean `training`?" (its own section)
    assert "max_steps" in p.fix if section == "training" else "max_model_len" in p.fix


def test_unknown_nested_key_is_not_matched_through_the_section_it_shares(project, errs):
    """`model.lora.sync_mode` used to get `did you mean model.trust_remote_code?`: the shared `model.` made the two
    dotted keys look close. Nothing is close to `sync_mode`, so the fix lists `model.lora`'s own keys."""
    assert suggest_key("sync_mode", LoraConfig, "model.lora.") is None
    cfg = project.baseline()
    cfg["model"]["lora"] = {"sync_mode": "merged"}
    [p] = errs(project.check(cfg))
    assert (p.key, p.fix) == ("model.lora.sync_mode", "valid keys here: r, alpha, dropout, target_modules")
    # a close key in the same section still wins, and an exact name from another section is still found
    assert suggest_key("dropuot", LoraConfig, "model.lora.") == "model.lora.dropout"
    assert suggest_key("trust_remote_code", LoraConfig, "model.lora.") == "model.trust_remote_code"


def test_suggest_key_never_offers_the_section_itself():
    assert suggest_key("lr", TrainingConfig, "training.") is None
    assert suggest_key("zz", RewardConfig, "rewards[0].") is None
    assert suggest_key("sampling_temperature", Config, "") == "sampling.temperature"


def test_valid_keys_next_to_an_unknown_one_are_kept(project):
    cfg = project.baseline()
    cfg["sampling"].update(temprature=0.3, top_p=0.9)
    loaded = load_config(project.write_config(cfg))
    assert [p.key for p in loaded.problems] == ["sampling.temprature"]
    assert loaded.config.sampling.top_p == 0.9
    assert loaded.config.sampling.temperature == 1.0  # the misspelt key did not set it


# --- wrong types ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("key, value, expected", [
    ("training.learning_rate", "fast", "float"),
    ("training.max_steps", "many", "int"),
    ("sampling.num_generations", [4], "int"),
    ("training.gradient_checkpointing", "maybe", "bool"),
    ("sampling.max_prompt_length", "long", "int or null"),
])
def test_wrong_type_is_a_problem_and_default_is_kept(project, errs, key, value, expected):
    section, name = key.split(".")
    cfg = project.baseline()
    cfg[section][name] = value
    loaded = load_config(project.write_config(cfg))
    [p] = errs(loaded.problems)
    assert p.key == key
    assert p.value == value
    assert p.message.startswith(f"expected {expected}, got ")
    assert getattr(getattr(loaded.config, section), name) == getattr(getattr(Config(), section), name)


def test_exponent_without_dot_is_a_float(project):
    # plain YAML 1.1 reads `3e-6` as a string; the config must still take it as a learning rate
    loaded = load_config(project.write_config("training:\n  learning_rate: 3e-6\n  beta: 1e-3\n"))
    assert loaded.problems == []
    assert loaded.config.training.learning_rate == pytest.approx(3e-6)
    assert loaded.config.training.beta == pytest.approx(1e-3)


def test_section_that_is_not_a_mapping(project, errs):
    loaded = load_config(project.write_config("sampling: 5\nrewards: accuracy\n"))
    assert [(p.key, p.message) for p in errs(loaded.problems)] == [
        ("sampling", "expected a mapping of SamplingConfig keys"), ("rewards", "expected a list")]
    assert loaded.config.sampling == SamplingConfig()


def test_top_level_list_is_a_problem(project, errs):
    loaded = load_config(project.write_config("- a\n- b\n"))
    [p] = errs(loaded.problems)
    assert p.key == "<config>" and "expected a mapping" in p.message
    assert loaded.config == Config()


def test_reward_shorthand_string_is_a_function(project, errs):
    cfg = project.baseline()
    cfg["rewards"] = ["rewards.py:accuracy"]
    loaded, problems = check_config(project.write_config(cfg))
    assert errs(problems) == []
    assert loaded.config.rewards[0].function == "rewards.py:accuracy"
    assert loaded.config.rewards[0].weight == 1.0


def test_integer_for_a_float_key_is_a_float_without_warnings(project):
    import warnings

    cfg = project.baseline()
    cfg["sampling"] = {**cfg.get("sampling", {}), "temperature": 1}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # OmegaConf's deprecated int -> float conversion warns
        loaded = load_config(project.write_config(cfg), ["training.learning_rate=1", "vllm.gpu_memory_utilization=1"])
    assert loaded.problems == []
    assert type(loaded.config.sampling.temperature) is float and loaded.config.sampling.temperature == 1.0
    assert type(loaded.config.training.learning_rate) is float


def test_unquoted_off_is_the_off_mode_and_other_yaml_booleans_are_explained(project, errs):
    import warnings

    text = project.write_config(project.baseline()).read_text().replace("mode: 'off'", "mode: off")
    assert "mode: off" in text
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loaded = load_config(project.write_config(text))
    assert loaded.problems == [] and loaded.config.vllm.mode == "off"
    assert load_config(project.write_config(project.baseline()), ["vllm.mode=off"]).config.vllm.mode == "off"
    # the Python dict path has no text to go back to: False is taken as `off` there too
    cfg, problems = config_from_dict({"vllm": {"mode": False}})
    assert cfg.vllm.mode == "off" and problems == []
    # any other YAML boolean given to a text key stays the word written, and is checked as such
    [p] = errs(project.check(project.baseline(), ["model.dtype=yes"]))
    assert p.key == "model.dtype" and p.value == "yes" and "must be one of float32" in p.message


# Issue 9.1: a key typed `str` keeps exactly the text written, in YAML, in overrides and in the dict path.
def test_string_keys_keep_the_text_written(project):
    text = project.write_config(project.baseline()).read_text()
    text += "logging:\n  run_name: 1e5\n"
    text = text.replace("model:\n", "model:\n  revision: 0123456\n", 1)
    loaded = load_config(project.write_config(text))
    assert loaded.problems == []
    assert loaded.config.model.revision == "0123456"  # not YAML 1.1's octal 42798
    assert loaded.config.logging.run_name == "1e5"  # not 100000.0
    over = load_config(project.write_config(project.baseline()),
                       ["logging.run_name=1e5", "model.revision=0123456", "rewards.0.function=rewards.py:accuracy"])
    assert over.problems == []
    assert (over.config.logging.run_name, over.config.model.revision) == ("1e5", "0123456")
    quoted = load_config(project.write_config(project.baseline()), ["logging.run_name='1e5'"])
    assert quoted.config.logging.run_name == "1e5"
    cfg, problems = config_from_dict({**project.baseline(), "logging": {"run_name": "1e5"}})
    assert cfg.logging.run_name == "1e5" and problems == []
    # numbers keep being numbers where the schema wants them
    assert load_config(project.write_config(project.baseline()), ["training.learning_rate=1e-5"]
                       ).config.training.learning_rate == 1e-5
    assert "run_name: '1e5'" in to_yaml(over.config)  # the saved config.yaml reads back as text
