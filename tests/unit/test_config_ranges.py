"""Static checks of one config value at a time: ranges, enums, loggers and the rules of a single key."""

from __future__ import annotations

import importlib.util
import math

import pytest

from grpo_rollout.config import Config
from grpo_rollout.config.batch_checks import check_batch
from grpo_rollout.config.fields import bounds_of, rule_of, strip_optional, walk
from grpo_rollout.config.ranges import check_values
from grpo_rollout.preflight.rollout_kwargs import check_sampling_agreement
from grpo_rollout.config.schema import ENUMS
from config_helpers import make, run


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
    "training.entropy_coef": ([-0.01, 1.5, math.nan], [0.0, 0.001, 1.0]),
    "training.cispo_epsilon_low": ([-0.1, 1.1], [0.0, 0.2, 1.0]),
    "training.cispo_epsilon_high": ([0.0, -1.0], [0.28, 5.0]),
    "training.sapo_tau_positive": ([0.0, -1.0], [0.5, 1.0]),
    "training.sapo_tau_negative": ([0.0], [1.05]),
    "training.overlong_buffer": ([-1], [0, 4]),
    "rollout.max_retries": ([-1, 11], [0, 2, 10]),
    "rollout.env_timeout_s": ([0, -1, 86401], [0.5, 300, 86400]),
    "data.curriculum_patience": ([0, 1001], [1, 2, 1000]),
    "data.curriculum_pause": ([0, -1], [1, 3]),
    "data.curriculum_success_reward": ([math.nan, math.inf], [-1.0, 0.5, 1.0]),
    "training.turn_discount": ([-0.1, 1.1, math.nan], [0.0, 0.9, 1.0]),
    "training.overlong_penalty": ([-0.5, math.nan], [0.0, 1.0]),
    "training.num_iterations": ([0], [1, 4]),
    "training.save_steps": ([-1], [0, 50]),
    "training.save_total_limit": ([0, -2], [None, 1, 3]),
    "training.max_nonfinite_steps": ([0], [1, 3]),
    "training.logging_steps": ([0], [1]),
    "training.log_completions": ([-1], [0, 4]),
    "training.logprob_chunk_size": ([0], [1, 1024]),
    "training.max_staleness": ([-1, 65], [None, 0, 1, 64]),
    "training.max_inflight_groups": ([0], [None, 1, 16]),
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
    assert p.message == "must be one of grpo, dr_grpo, dapo, bnpo, cispo, sapo"


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


def test_epsilon_high_out_of_range_is_not_also_below_epsilon():
    [p] = run(check_values, make(training__epsilon_high=-0.3))
    assert (p.key, p.message) == ("training.epsilon_high", "must be > 0 or null")
