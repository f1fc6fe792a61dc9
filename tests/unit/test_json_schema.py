"""The config's JSON Schema (grpo-rollout schema): valid, portable, fits the examples, flags typos, has every field."""

from __future__ import annotations

import json
import typing
from pathlib import Path
from typing import Any, Dict, Iterator, Tuple

import jsonschema
import pydantic
import pytest
import yaml
from typer.testing import CliRunner

from grpo_rollout.cli.main import app
from grpo_rollout.config.json_schema import SCHEMA_DIALECT
from grpo_rollout.config.schema import ENUMS, REPORT_TO, Config
from schema_helpers import errors, schema, validator, with_value  # noqa: F401 - schema, validator: fixtures


REPO = Path(__file__).resolve().parents[2]
EXAMPLE_CONFIGS = sorted((REPO / "configs").glob("*.yaml"))


def quickstart() -> Dict[str, Any]:
    """configs/quickstart.yaml as the user wrote it (PyYAML reads YAML 1.1, as OmegaConf does)."""
    return yaml.safe_load((REPO / "configs" / "quickstart.yaml").read_text())


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
