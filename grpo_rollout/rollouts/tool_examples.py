"""Example calls of a tool, for the system prompt: plausible placeholder arguments from its JSON schema."""

from __future__ import annotations

from typing import Any, Dict, Mapping

from .tool_parsing import format_tool_call

_EXAMPLE_VALUES = {"integer": [3, 4, 5, 6], "number": [2.5, 1.5, 0.5, 4.0], "boolean": [True, False],
                   "string": ["text", "more text"], "array": [[1, 2]], "object": [{}], "null": [None]}
#: nested objects deeper than this get ``{}``
_MAX_DEPTH = 3


def _example_value(prop: Any, defs: Mapping[str, Any], used: Dict[str, int], depth: int) -> Any:
    """A value that fits ``prop``: its default, first enum value or constant, an object with its fields filled in,
    an array of one example item, else the next placeholder of its type."""
    if not isinstance(prop, Mapping):
        return "text"
    ref = prop.get("$ref")
    if isinstance(ref, str) and ref.split("/")[-1] in defs and depth < _MAX_DEPTH:
        prop = {**defs[ref.split("/")[-1]], **{k: v for k, v in prop.items() if k != "$ref"}}
    if "default" in prop and prop["default"] is not None:
        return prop["default"]
    if prop.get("enum"):
        return prop["enum"][0]
    if "const" in prop:
        return prop["const"]
    options = prop.get("anyOf") or prop.get("oneOf")
    if isinstance(options, list) and options:  # the first option that is not null
        return _example_value(next((o for o in options if o.get("type") != "null"), options[0]), defs, used, depth)
    kind = prop.get("type", "string")
    kind = next((k for k in kind if k != "null"), "null") if isinstance(kind, list) else kind
    if kind == "object" and isinstance(prop.get("properties"), Mapping) and depth < _MAX_DEPTH:
        return {k: _example_value(v, defs, used, depth + 1) for k, v in prop["properties"].items()}
    if kind == "array" and isinstance(prop.get("prefixItems"), list):
        return [_example_value(p, defs, used, depth + 1) for p in prop["prefixItems"]]
    if kind == "array" and isinstance(prop.get("items"), Mapping) and prop["items"]:
        return [_example_value(prop["items"], defs, used, depth + 1)]
    values = _EXAMPLE_VALUES.get(kind, ["text"])
    value = values[used.get(kind, 0) % len(values)]
    used[kind] = used.get(kind, 0) + 1
    return value


def example_arguments(schema: Mapping[str, Any]) -> Dict[str, Any]:
    """Plausible placeholder arguments for a tool schema, that fit it: integers 3, 4, ...; strings "text"; enums
    their first value; the fields of nested objects filled in the same way."""
    params = schema.get("function", schema).get("parameters", {})
    defs = params.get("$defs") or params.get("definitions") or {}
    used: Dict[str, int] = {}
    return {name: _example_value(prop, defs, used, 0) for name, prop in params.get("properties", {}).items()}


def example_call(schema: Mapping[str, Any]) -> str:
    """One call of the tool described by ``schema``, written in the ``<tool_call>`` format."""
    return format_tool_call(schema.get("function", schema)["name"], example_arguments(schema))
