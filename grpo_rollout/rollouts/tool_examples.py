"""Example calls of a tool, for the system prompt: plausible placeholder arguments from its JSON schema."""

from __future__ import annotations

from typing import Any, Dict, Mapping

from .tool_parsing import format_tool_call

_EXAMPLE_VALUES = {"integer": [3, 4, 5, 6], "number": [2.5, 1.5, 0.5, 4.0], "boolean": [True, False],
                   "string": ["text", "more text"], "array": [[1, 2]], "object": [{}]}


def example_arguments(schema: Mapping[str, Any]) -> Dict[str, Any]:
    """Plausible placeholder arguments for a tool schema (integers 3, 4, ...; strings "text"; enums: first value)."""
    props = schema.get("function", schema).get("parameters", {}).get("properties", {})
    out: Dict[str, Any] = {}
    used: Dict[str, int] = {}
    for pname, prop in props.items():
        if prop.get("enum"):
            out[pname] = prop["enum"][0]
            continue
        kind = prop.get("type", "string")
        kind = kind[0] if isinstance(kind, list) else kind
        values = _EXAMPLE_VALUES.get(kind, ["text"])
        out[pname] = values[used.get(kind, 0) % len(values)]
        used[kind] = used.get(kind, 0) + 1
    return out


def example_call(schema: Mapping[str, Any]) -> str:
    """One call of the tool described by ``schema``, written in the ``<tool_call>`` format."""
    return format_tool_call(schema.get("function", schema)["name"], example_arguments(schema))
