"""Loading a YAML config: unknown keys, wrong types, interpolations, overrides, unreadable files, strict mode."""

from __future__ import annotations

import pytest
import yaml

from grpo_rollout.config import Config, ConfigError, config_from_dict, load_config, to_yaml
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


# --- the training data (data.train) ---------------------------------------------------------------------------------

def with_data(project, train, **data):
    cfg = project.baseline()
    cfg["data"] = {"train": train, **data}
    return cfg


def test_csv_and_parquet_files_load(project):
    import datasets

    project.write("rows.csv", "prompt,answer\nWhat is 1+1?,2\nWhat is 2+2?,4\n")
    datasets.Dataset.from_list([{"prompt": "What is 3+3?", "answer": "6"}]).to_parquet(str(project.root / "rows.parquet"))
    assert project.check(with_data(project, "rows.csv")) == []
    assert project.check(with_data(project, "rows.parquet")) == []


DATA_FUNCTIONS = """\
import datasets

def as_dataset():
    return datasets.Dataset.from_list([{"prompt": "What is 1+1?", "answer": "2"}])

def as_list():
    return [{"prompt": "What is 1+1?", "answer": "2"}]

def as_splits():
    return datasets.DatasetDict({"train": as_dataset(), "test": as_dataset()})

def empty():
    return []

def number():
    return 5

def broken():
    raise ValueError("no data today")
"""


@pytest.mark.parametrize("fn, split", [("as_dataset", "train"), ("as_list", "train"), ("as_splits", "test")])
def test_function_returning_rows_loads(project, fn, split):
    name = project.module(DATA_FUNCTIONS, prefix="data")
    assert project.check(with_data(project, f"{name}:{fn}", split=split)) == []
    assert project.check(with_data(project, f"{name}.{fn}", split=split)) == []
    project.write(f"{name}_file.py", DATA_FUNCTIONS)
    assert project.check(with_data(project, f"{name}_file.py:{fn}", split=split)) == []


@pytest.mark.parametrize("train, needle", [
    ("nope.jsonl", "data file `nope.jsonl` not found"),
    ("{mod}:broken", "failed: ValueError: no data today"),
    ("{mod}:number", "returned int; it must return a datasets.Dataset or a list of dicts"),
    ("{mod}:empty", "has no rows"),
    ("{mod}:as_splits", "returned splits ['train', 'test'], none named `validation`"),
    ("{mod}:missing_fn", "has no attribute `missing_fn`"),
])
def test_data_that_does_not_load(project, errs, train, needle):
    train = train.format(mod=project.module(DATA_FUNCTIONS, prefix="data"))
    # the reward needs the `answer` column: with no dataset that must not be reported as well
    [p] = errs(project.check(with_data(project, train, split="validation")))
    assert (p.key, p.value) == ("data.train", train)
    assert needle in p.message


def test_no_training_data(project, errs):
    [p] = errs(project.check(with_data(project, "")))
    assert (p.key, p.message) == ("data.train", "no training data given")


def test_missing_prompt_column(project, errs):
    [p] = errs(project.check(with_data(project, "data.jsonl", prompt_column="question")))
    assert (p.key, p.value) == ("data.prompt_column", "question")
    assert "no column `question` (columns: prompt, answer)" in p.message
    assert project.check(with_data(project, "data.jsonl", prompt_column="answer")) == []  # any string column works


@pytest.mark.parametrize("prompts, message", [
    (["fine", 5], "row 1: the prompt is int 5, neither a plain string nor a list of chat messages"),
    (["", "fine"], "row 0: the prompt is an empty string"),
    ([[{"text": "hi"}]], "row 0: message 0 has no string `role` (missing)"),  # a list, but not of messages
    ([[{"role": "user"}]], "row 0: message 0 has no string `content` (missing)"),
    ([[{"role": "user", "content": "hi"}], [{"role": "usr", "content": "hi"}]],
     "row 1: message 0 has the unknown role 'usr' (roles: system, user, assistant, tool)"),
    ([[{"role": "user", "content": "hi"}], []], "row 1: the prompt is an empty list of messages"),
])
def test_prompt_that_is_not_text_or_chat(project, errs, prompts, message):
    project.write_jsonl("bad.jsonl", [{"prompt": p, "answer": "1"} for p in prompts])
    [p] = errs(project.check(with_data(project, "bad.jsonl")))
    assert p.key == "data.prompt_column" and p.message == message


# Issue 9.2: a dataset mixing plain-string and message-list prompts passed validate-config and broke a chat reward.
def test_mixed_prompt_formats_are_rejected_naming_the_row_and_both_formats(project, errs):
    project.write_jsonl("mixed.jsonl", [{"prompt": "What is 2+3?", "answer": "5"},
                                        {"prompt": [{"role": "user", "content": "What is 4+4?"}], "answer": "8"}])
    [p] = errs(project.check(with_data(project, "mixed.jsonl")))
    assert p.key == "data.prompt_column"
    assert p.message == ("row 1's prompt is a list of chat messages but row 0's is a plain string: every prompt "
                         "must use the same format")
    # every row is checked, not only the first few
    project.write_jsonl("late.jsonl", [{"prompt": f"Q{i}", "answer": "1"} for i in range(40)] +
                        [{"prompt": [{"role": "user", "content": "Q"}], "answer": "1"}])
    [p] = errs(project.check(with_data(project, "late.jsonl")))
    assert p.message.startswith("row 40's prompt is a list of chat messages but row 0's")


def test_chat_prompts_pass(project):
    project.write_jsonl("chat.jsonl", [{"prompt": [{"role": "system", "content": "Be brief."},
                                                   {"role": "user", "content": "1+1?"}], "answer": "2"}])
    assert project.check(with_data(project, "chat.jsonl")) == []


def test_reward_needing_a_column_the_data_lacks(project, errs):
    project.write_jsonl("prompts_only.jsonl", [{"prompt": "What is 1+1?"}])
    [p] = errs(project.check(with_data(project, "prompts_only.jsonl")))
    assert p.key == "rewards[0].function" and "requires `answer`" in p.message


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


# Found by config fuzzing (issue 9): an interpolation that fails inside a list escaped as an OmegaConf exception.
def test_failed_interpolations_inside_lists_are_problems():
    cfg, problems = config_from_dict({"rewards": ["${nope}"],
                                      "logging": {"report_to": ["jsonl", "${oc.env:GRPO_NO_SUCH_VARIABLE}"]}})
    assert [(p.key, p.value) for p in problems] == [("rewards[0]", "${nope}"),
                                                    ("logging.report_to[1]", "${oc.env:GRPO_NO_SUCH_VARIABLE}")]
    assert all(p.message.startswith("interpolation failed: ") for p in problems)
    assert cfg.logging.report_to == ["jsonl"] and cfg.rewards == []
