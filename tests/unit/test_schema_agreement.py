"""The config's JSON Schema agrees with the range checks (a hand-written table of bounds) and with the loader."""

from __future__ import annotations

import math
import operator
import typing
from typing import Any, Dict, List

import pytest
import yaml

from grpo_rollout.config import load_config
from grpo_rollout.config.fields import bounds_of, walk
from grpo_rollout.config.ranges import check_values
from grpo_rollout.config.schema import Config
from schema_helpers import errors, schema, validator, with_value  # noqa: F401 - schema, validator: fixtures


# Each bounded key's interval, written out by hand from the keys' documented ranges (the config reference), NOT read
# from the schema's metadata: a bound changed in schema.py (>= for >, a lost upper limit) fails against this table.
EXPECTED_RANGES: Dict[str, Dict[str, float]] = {
    "model.lora.r": {"ge": 0},
    "model.lora.alpha": {"gt": 0},
    "model.lora.dropout": {"ge": 0, "lt": 1},
    "sampling.num_generations": {"ge": 2},
    "sampling.temperature": {"gt": 0},
    "sampling.top_p": {"gt": 0, "le": 1},
    "sampling.min_p": {"ge": 0, "le": 1},
    "sampling.repetition_penalty": {"gt": 0},
    "sampling.max_prompt_length": {"ge": 1},
    "sampling.max_completion_length": {"ge": 1},
    "training.max_steps": {"ge": 1},
    "training.num_epochs": {"gt": 0},
    "training.prompts_per_step": {"ge": 1},
    "training.micro_batch_size": {"ge": 1},
    "training.learning_rate": {"ge": 0},
    "training.weight_decay": {"ge": 0},
    "training.warmup_steps": {"ge": 0},
    "training.max_grad_norm": {"ge": 0},
    "training.beta": {"ge": 0},
    "training.entropy_coef": {"ge": 0, "le": 1},
    "training.cispo_epsilon_low": {"ge": 0, "le": 1},
    "training.cispo_epsilon_high": {"gt": 0},
    "training.sapo_tau_positive": {"gt": 0},
    "training.sapo_tau_negative": {"gt": 0},
    "training.overlong_buffer": {"ge": 0},
    "rollout.max_retries": {"ge": 0, "le": 10},
    "rollout.env_timeout_s": {"gt": 0, "le": 86400},
    "data.curriculum_patience": {"ge": 1, "le": 1000},
    "data.curriculum_pause": {"ge": 1, "le": 1000},
    "training.turn_discount": {"ge": 0, "le": 1},
    "training.overlong_penalty": {"ge": 0},
    "training.epsilon": {"gt": 0, "lt": 1},
    "training.epsilon_high": {"gt": 0},
    "training.dynamic_sampling.max_rounds": {"ge": 1},
    "training.num_iterations": {"ge": 1},
    "training.sampler_correction_cap": {"gt": 0},
    "training.logprob_chunk_size": {"ge": 1},
    "training.save_steps": {"ge": 0},
    "training.save_total_limit": {"ge": 1},
    "training.max_nonfinite_steps": {"ge": 1},
    "training.logging_steps": {"ge": 1},
    "training.log_completions": {"ge": 0},
    "training.max_staleness": {"ge": 0, "le": 64},
    "training.max_inflight_groups": {"ge": 1},
    "evaluation.every_steps": {"ge": 0},
    "evaluation.num_generations": {"ge": 1},
    "evaluation.temperature": {"ge": 0},
    "evaluation.max_prompts": {"ge": 1},
    "vllm.num_servers": {"ge": 1},
    "vllm.port": {"ge": 0, "le": 65535},
    "vllm.max_model_len": {"ge": 1},
    "vllm.gpu_memory_utilization": {"gt": 0, "le": 1},
    "vllm.kv_cache_space_gib": {"ge": 1},
    "vllm.startup_timeout_s": {"gt": 0},
    "vllm.sync_timeout_s": {"gt": 0},
    "vllm.max_logprob_mismatch": {"gt": 0},
}
COMPARE = {"ge": operator.ge, "gt": operator.gt, "le": operator.le, "lt": operator.lt}
PROBES = [-1, 0, 0.5, 1, 2, 3, 65535, 65536]
#: other keys set while a key is probed, so that a rule across keys does not speak at it (greedy n > 1 is refused)
PROBE_CONTEXT = {"evaluation.num_generations": {"evaluation.temperature": 1.0}}


def expected_to_pass(dotted: str, value: float) -> bool:
    return all(COMPARE[name](value, bound) for name, bound in EXPECTED_RANGES[dotted].items())


def is_integer_key(dotted: str) -> bool:
    section, *rest = dotted.split(".")
    cls = typing.get_type_hints(Config)[section]
    for part in rest[:-1]:
        cls = typing.get_type_hints(cls)[part]
    tp = typing.get_type_hints(cls)[rest[-1]]
    return tp is int or typing.get_args(tp)[:1] == (int,)


def probes_for(dotted: str) -> List[float]:
    """PROBES, and each expected bound of the key with its neighbours (only whole numbers for an integer key)."""
    near = {bound + d for bound in EXPECTED_RANGES[dotted].values() for d in (-1, -0.5, 0, 0.5, 1)}
    return [v for v in sorted(set(PROBES) | near) if not is_integer_key(dotted) or float(v).is_integer()]


def range_check_passes(dotted: str, value: Any) -> bool:
    """Whether check_values reports no error at ``dotted`` for a default Config with ``value`` set there (and the
    key's PROBE_CONTEXT)."""
    config = Config()
    for key, v in {**PROBE_CONTEXT.get(dotted, {}), dotted: value}.items():
        *sections, name = key.split(".")
        node = config
        for section in sections:
            node = getattr(node, section)
        setattr(node, name, v)
    problems: list = []
    check_values(config, problems)
    return not [p for p in problems if p.is_error and p.key == dotted]


@pytest.mark.parametrize("dotted", sorted(EXPECTED_RANGES))
def test_schema_ranges_agree_with_the_range_checks(validator, dotted):
    """The JSON Schema and check_values each give the hand-written EXPECTED_RANGES' verdict for every probe."""
    for value in probes_for(dotted):
        expected = expected_to_pass(dotted, value)
        assert (errors(validator, with_value(dotted, value)) == []) == expected, ("schema", dotted, value, expected)
        assert range_check_passes(dotted, value) == expected, ("check_values", dotted, value, expected)


def schema_ranged_keys(node: Dict[str, Any], prefix: str = "") -> set:
    """The dotted keys whose schema states a minimum or a maximum (exclusive or not), nested sections included."""
    keys = set()
    for name, sub in node.get("properties", {}).items():
        if {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"} & set(sub):
            keys.add(prefix + name)
        keys |= schema_ranged_keys(sub, f"{prefix}{name}.")
    return keys


def test_every_range_check_that_is_an_interval_is_stated(schema):
    stated = schema_ranged_keys(schema)
    assert stated == {key for key, info in walk(Config) if bounds_of(info)}  # no bound lost on the way to the schema
    assert stated == set(EXPECTED_RANGES)  # and a new bounded key gets its row in EXPECTED_RANGES
    assert "sampling.top_k" not in stated


# --- the loader's rules for types, interpolations and YAML quirks -------------------------------------------------

# (YAML text, does the loader take it): the schema must give the same verdict
AGREEMENT = [
    ("sampling:\n  temperature: 1\n", True),                      # a YAML int for a float
    ("sampling:\n  num_generations: 2.5\n", False),               # a float for an int
    ("sampling:\n  num_generations: eight\n", False),             # text for an int
    ("sampling:\n  seed: ${training.seed}\n", True),              # an interpolation for an Optional[int]
    ("sampling:\n  max_prompt_length: null\n", True),
    ("training:\n  max_steps: null\n", False),                    # null for a key that is not Optional
    ("model:\n  revision: 0123456\n", True),                      # a number for a text key keeps its text
    ("model:\n  revision: yes\n", True),                          # a boolean word too (YAML 1.1 reads yes as true)
    ("vllm:\n  mode: off\n", True),                               # ... and off as false, which vllm.mode takes
    ("data:\n  shuffle: maybe\n", False),
    ("model: builtin:smollm2-135m-instruct\n", False),            # a section given as text
    ("rewards:\n  - pkg.module:function\n", True),                # the shorthand for {function: ...}
    ("rewards: pkg.module:function\n", False),                    # not a list
    ("rollout:\n  kwargs: {anything: [1, {deep: true}]}\n", True),  # free-form
    ("model:\n  lora:\n    target_modules: [q_proj, v_proj]\n", True),  # typed Any
    ("training:\n  learning_rat: 1.0e-5\n", False),
]


@pytest.mark.parametrize("text, loads", AGREEMENT, ids=[t.replace("\n", " ").strip() for t, _ in AGREEMENT])
def test_schema_and_loader_agree(validator, tmp_path, text, loads):
    path = tmp_path / "config.yaml"
    path.write_text(text)
    assert (load_config(path).problems == []) is loads  # the premise: what the loader does
    assert (errors(validator, yaml.safe_load(text)) == []) is loads


def test_interpolation_is_accepted_for_any_scalar_but_not_plain_text(validator):
    for dotted in ("sampling.num_generations", "sampling.temperature", "data.shuffle", "training.loss_type",
                   "model.lora.r"):
        assert errors(validator, with_value(dotted, "${oc.env:VALUE}")) == [], dotted
    for dotted in ("sampling.num_generations", "sampling.temperature", "data.shuffle"):
        assert errors(validator, with_value(dotted, "plain text")), dotted


def test_nan_is_outside_every_bound():
    floats = [key for key in EXPECTED_RANGES if not is_integer_key(key)]
    assert "sampling.temperature" in floats and [key for key in floats if range_check_passes(key, math.nan)] == []
