"""The config's JSON Schema and its validator as module fixtures, and documents for it with one key set."""

from __future__ import annotations

import copy
from typing import Any, Dict, List

import jsonschema
import pytest

from grpo_rollout.config.json_schema import config_json_schema


@pytest.fixture(scope="module")
def schema() -> Dict[str, Any]:
    return config_json_schema()


@pytest.fixture(scope="module")
def validator(schema) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(schema)


def errors(validator, document) -> List[jsonschema.ValidationError]:
    return list(validator.iter_errors(document))


def with_value(dotted: str, value: Any, base: Dict[str, Any] | None = None) -> Dict[str, Any]:
    """``base`` (default: {}) with ``section.key`` (or ``section.sub.key``) set to ``value``."""
    doc = copy.deepcopy(base) if base is not None else {}
    *sections, key = dotted.split(".")
    node = doc
    for section in sections:
        node = node.setdefault(section, {})
    node[key] = value
    return doc
