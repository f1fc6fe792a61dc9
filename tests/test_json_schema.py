"""The config's JSON Schema (``grpo-rollout schema``): built from the dataclasses, valid for every example config,
rejects what an editor should flag, and agrees with the loader and the range checks."""

from __future__ import annotations

import copy
import json
import math
import operator
import typing
from pathlib import Path
from typing import Any, Dict, Iterator, List, Tuple

import jsonschema
import pydantic
import pytest
import yaml
from typer.testing import CliRunner

from grpo_rollout.cli.main import app
from grpo_rollout.config import load_config
from grpo_rollout.config.fields import bounds_of, walk
from grpo_rollout.config.ranges import check_values
from grpo_rollout.config.json_schema import SCHEMA_DIALECT, config_json_schema
from grpo_rollout.config.schema import ENUMS, REPORT_TO, Config

REPO = Path(__file__).resolve().parents[1]
EXAMPLE_CONFIGS = sorted((REPO / "configs").glob("*.yaml"))


@pytest.fixture(scope="module")
def schema() -> Dict[str, Any]:
    return config_json_schema()


@pytest.fixture(scope="module")
def validator(schema) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(schema)


def errors(validator, document) -> List[jsonschema.ValidationError]:
    return list(validator.iter_errors(document))


def quickstart() -> Dict[str, Any]:
    """configs/quickstart.yaml as the user wrote it (PyYAML reads YAML 1.1, as OmegaConf does)."""
    return yaml.safe_load((REPO / "configs" / "quickstart.yaml").read_text())


def with_value(dotted: str, value: Any, base: Dict[str, Any] | None = None) -> Dict[str, Any]:
    """``base`` (default: {}) with ``section.key`` (or ``section.sub.key``) set to ``value``."""
    doc = copy.deepcopy(base) if base is not None else {}
    *sections, key = dotted.split(".")
    node = doc
    for section in sections:
        node = node.setdefault(section, {})
    node[key] = value
    return doc


def test_schema_is_a_valid_draft_2020_12_schema(schema):
    assert schema["$schema"] == SCHEMA_DIALECT == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)
    json.dumps(schema)  # serialisable as it is


# keywords whose meaning is the same in draft-07 and 2020-12 (the README promises the schema sticks to these)
PORTABLE_KEYWORDS = {"$schema", "title", "description", "default", "type", "properties", "additionalProperties",
                     "items", "anyOf", "enum", "pattern", "minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"}


def keywords(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for word, value in node.items():
            yield word
            if word == "properties":
                for sub in value.values():
                    yield from keywords(sub)
            elif word in ("items", "additionalProperties"):
                yield from keywords(value)
            elif word == "anyOf":
                for sub in value:
                    yield from keywords(sub)


def test_schema_uses_only_keywords_that_draft_07_reads_the_same(schema):
    used = set(keywords(schema))
    assert used <= PORTABLE_KEYWORDS, used - PORTABLE_KEYWORDS
    assert {"enum", "minimum", "exclusiveMinimum", "additionalProperties"} <= used


# --- the example configs --------------------------------------------------------------------------------------------

def test_there_are_example_configs():
    assert len(EXAMPLE_CONFIGS) >= 3


@pytest.mark.parametrize("path", EXAMPLE_CONFIGS, ids=lambda p: p.name)
def test_every_example_config_validates(validator, path):
    document = yaml.safe_load(path.read_text())
    assert [e.message for e in errors(validator, document)] == []


# --- what an editor should flag -------------------------------------------------------------------------------------

def test_misspelled_key_is_rejected_where_it_is(validator):
    doc = quickstart()
    doc["training"]["learning_rat"] = 1e-5
    [error] = errors(validator, doc)
    assert error.validator == "additionalProperties"
    assert list(error.absolute_path) == ["training"]
    assert "'learning_rat' was unexpected" in error.message


@pytest.mark.parametrize("doc, path", [
    ({"sampling": {"temprature": 0.7}}, ["sampling"]),
    ({"modle": {}}, []),
    ({"model": {"lora": {"rank": 8}}}, ["model", "lora"]),
    ({"rewards": [{"function": "m:f", "wieght": 2}]}, ["rewards", 0]),
])
def test_unknown_keys_in_every_section_are_rejected(validator, doc, path):
    [error] = errors(validator, doc)
    assert list(error.absolute_path) == path


@pytest.mark.parametrize("dotted, value", [
    ("training.loss_type", "ppo"), ("vllm.mode", "spawned"), ("model.dtype", "fp16"), ("training.device", "gpu"),
])
def test_wrong_enum_value_is_rejected(validator, dotted, value):
    [error] = errors(validator, with_value(dotted, value, quickstart()))
    assert list(error.absolute_path) == dotted.split(".")


@pytest.mark.parametrize("dotted", sorted(ENUMS))
def test_every_enum_key_takes_exactly_its_allowed_values(schema, validator, dotted):
    node = schema
    for part in dotted.split("."):
        node = node["properties"][part]
    allowed = [v for v in node["anyOf"][0]["enum"] if v is not False]
    assert allowed == list(ENUMS[dotted])
    for value in ENUMS[dotted]:
        assert errors(validator, with_value(dotted, value)) == []
    assert errors(validator, with_value(dotted, "not-" + ENUMS[dotted][0]))


def test_report_to_items_take_the_known_loggers(validator):
    assert errors(validator, {"logging": {"report_to": list(REPORT_TO)}}) == []
    [error] = errors(validator, {"logging": {"report_to": ["jsonl", "tensorboard"]}})
    assert list(error.absolute_path) == ["logging", "report_to", 1]


@pytest.mark.parametrize("dotted, bad, good", [
    ("sampling.num_generations", 1, 2),
    ("sampling.temperature", 0, 0.01),
    ("sampling.top_p", 1.01, 1.0),
    ("training.epsilon", 1.0, 0.99),
    ("vllm.port", 65536, 65535),
    ("sampling.max_prompt_length", 0, None),
])
def test_plain_ranges_are_in_the_schema(validator, dotted, bad, good):
    [error] = errors(validator, with_value(dotted, bad))
    assert error.validator in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum")
    assert errors(validator, with_value(dotted, good)) == []


def test_a_rule_that_is_not_an_interval_is_left_to_validate_config(schema, validator):
    top_k = schema["properties"]["sampling"]["properties"]["top_k"]
    assert not {"minimum", "exclusiveMinimum"} & set(top_k)  # -1 (off) or >= 1: not an interval
    assert errors(validator, with_value("sampling.top_k", -1)) == []


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


# --- every field is in it -------------------------------------------------------------------------------------------

def dataclass_fields(cls: type = Config, path: Tuple[str, ...] = ()) -> Iterator[Tuple[Tuple[str, ...], Any, Any]]:
    """(schema path to the field, its type, its default) for every field of every section model under Config; list
    items of sections as ``items`` → ``anyOf[0]``."""
    for name, info in cls.model_fields.items():
        tp = info.annotation
        here = path + ("properties", name)
        yield here, tp, info.get_default(call_default_factory=True)
        if is_section(tp):
            yield from dataclass_fields(tp, here)
        elif typing.get_args(tp) and is_section(typing.get_args(tp)[0]):
            yield from dataclass_fields(typing.get_args(tp)[0], here + ("items", "anyOf", 0))


def is_section(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, pydantic.BaseModel)


def lookup(schema: Dict[str, Any], path: Tuple[Any, ...]) -> Any:
    node = schema
    for step in path:
        node = node[step]
    return node


def test_every_field_of_every_dataclass_is_in_the_schema(schema):
    fields = list(dataclass_fields())
    assert len(fields) > 60  # the walk really visits every section
    for path, tp, default in fields:
        node = lookup(schema, path)  # KeyError here: a field the schema does not know
        if is_section(tp):
            assert node["additionalProperties"] is False, path
            assert set(node["properties"]) == set(tp.model_fields), path
            assert node["description"], path  # the class docstring
        else:
            assert node["default"] == default, path
            assert node["description"].endswith(f"Default: {json.dumps(default)}."), path


def test_top_level_has_exactly_the_sections(schema):
    assert set(schema["properties"]) == set(Config.model_fields)
    assert schema["additionalProperties"] is False


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


# --- the command ----------------------------------------------------------------------------------------------------

def test_schema_command_prints_plain_json(schema):
    result = CliRunner().invoke(app, ["schema"])
    assert result.exit_code == 0, result.output
    assert "\x1b[" not in result.stdout  # no colour codes: it must redirect into a file cleanly
    assert json.loads(result.stdout) == schema


def test_schema_command_writes_a_file(schema, tmp_path):
    out = tmp_path / "grpo-rollout.schema.json"
    result = CliRunner().invoke(app, ["schema", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text()) == schema
    assert not result.stdout.lstrip().startswith("{")  # the schema went to the file, not the terminal


def test_schema_command_reports_a_path_it_cannot_write(tmp_path):
    result = CliRunner().invoke(app, ["schema", "-o", str(tmp_path / "missing" / "schema.json")])
    assert result.exit_code == 1
    assert "cannot write" in result.output and "missing" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


@pytest.mark.parametrize("tp", [typing.Union[int, str], typing.Set[str], bytes])
def test_a_field_type_the_schema_cannot_express_names_the_field(tp):
    from grpo_rollout.config.json_schema import _value_schema

    with pytest.raises(TypeError, match=r"config field `training\.new_key`"):
        _value_schema(tp, "training.new_key", {})
