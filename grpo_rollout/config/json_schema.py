"""The config's JSON Schema (draft 2020-12) for editors' YAML language servers (``grpo-rollout schema``): pydantic's
``Config.model_json_schema()``, adjusted to accept what :func:`~grpo_rollout.config.load_config` accepts and to read
the same in draft-07 servers. Sections are inlined (no ``$ref``, which older servers stop at); any single value may be
an OmegaConf interpolation (a string holding ``${...}``, checked by the loader once resolved); a text key takes any
plain scalar (the loader keeps the text written) and, where ``off`` is allowed, ``false`` (YAML 1.1's reading of an
unquoted off); a ``rewards`` item may be a bare string; each description ends with the key's range and default.
Imports, the dataset and rules across keys are ``validate-config``'s.
"""

from __future__ import annotations

import inspect
import json
import re
import typing
from typing import Any, Dict

from pydantic import TypeAdapter

from .fields import range_text, section_of, strip_optional, walk
from .schema import Config

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"

# A string that contains an OmegaConf interpolation, e.g. "${sampling.seed}" or "${oc.env:PORT}".
INTERPOLATION_PATTERN = r"\$\{.+\}"
_INTERPOLATION = {"type": "string", "pattern": INTERPOLATION_PATTERN}
_SCALAR_TEXT = {"type": ["string", "number", "boolean"]}


def config_json_schema() -> Dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a grpo-rollout YAML config, from :class:`Config`'s fields: one ``object``
    per section (``additionalProperties: false``), each key with its type, ``enum``, range, default and description.

    Raises:
        TypeError: a config field has a type the YAML loader cannot take (the message names the field).
    """
    raw = Config.model_json_schema()
    keys = dict(walk(Config))
    for key, info in keys.items():
        _check_type(info.annotation, key)
    body = _inline(raw, raw.get("$defs", {}))
    return {"$schema": SCHEMA_DIALECT, "title": "grpo-rollout config", **_section(body, Config, "", keys)}


def _inline(node: Any, defs: Dict[str, Any]) -> Any:
    """``node`` with every ``$ref`` replaced by the definition it names (keys next to the ``$ref`` kept)."""
    if isinstance(node, list):
        return [_inline(v, defs) for v in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = _inline(defs[node["$ref"].rsplit("/", 1)[-1]], defs)
        return {**target, **{k: v for k, v in node.items() if k not in ("$ref", "description")}}
    return {k: _inline(v, defs) for k, v in node.items() if k != "$defs"}


def _section(node: Dict[str, Any], model: type, prefix: str, keys: Dict[str, Any]) -> Dict[str, Any]:
    properties = {}
    for name, prop in node["properties"].items():
        info = keys[prefix + name]
        sub = section_of(info.annotation)
        if sub is not None and typing.get_origin(info.annotation) is list:
            entry = _section(prop["items"], sub, f"{prefix}{name}[].", keys)
            items = {"anyOf": [entry, {"type": "string", "description": "shorthand for `{function: <this string>}`"}]}
            properties[name] = {**_leaf({}, info), "type": "array", "items": items}
        elif sub is not None:
            properties[name] = _section(prop, sub, f"{prefix}{name}.", keys)
        else:
            properties[name] = _leaf(prop, info)
    out = {"type": "object", "additionalProperties": False, "properties": properties}
    doc = model_doc(model)
    return {**out, "description": doc} if doc else out


def _leaf(prop: Dict[str, Any], info: Any) -> Dict[str, Any]:
    """One key: its value's schema (or an interpolation), its description with range and default."""
    default = info.get_default(call_default_factory=True)
    value = _value(prop, info.annotation) if prop else {}
    text = " ".join(filter(None, [info.description or "", f"({range_text(info)})" if range_text(info) else ""]))
    return {**value, "default": default, "description": f"{text}. Default: {json.dumps(default)}."}


def _value(prop: Dict[str, Any], tp: Any) -> Dict[str, Any]:
    """The schema of a value, without its title, default or description."""
    prop = {k: v for k, v in prop.items() if k not in ("title", "default", "description")}
    inner, optional = strip_optional(tp)
    if optional:
        value = _value(next(b for b in prop["anyOf"] if b.get("type") != "null"), inner)  # a number or text
        return {**value, "type": value["type"] + ["null"]} if "type" in value else {
            "anyOf": value["anyOf"] + [{"type": "null"}]}
    if typing.get_origin(tp) is list:
        return {"type": "array", "items": _value(prop.get("items", {}), typing.get_args(tp)[0])}
    if not _scalar(tp):
        return prop
    if "enum" in prop:
        values = prop["enum"] + ([False] if "off" in prop["enum"] else [])  # YAML 1.1: an unquoted off is false
        return {"anyOf": [{"enum": values}, dict(_INTERPOLATION)]}
    if tp is str:
        return {"anyOf": [dict(_SCALAR_TEXT), dict(_INTERPOLATION)]}
    # a number or boolean, or a string holding an interpolation: `pattern` applies to strings, the bounds to numbers
    return {**prop, "type": [prop["type"], "string"], "pattern": INTERPOLATION_PATTERN}


def _scalar(tp: Any) -> bool:
    return tp in (str, int, float, bool) or typing.get_origin(tp) is typing.Literal


def _check_type(tp: Any, key: str) -> None:
    """Refuse a field type the YAML loader and this schema cannot take: unions other than ``Optional[X]``, sets,
    tuples, bytes."""
    inner, _ = strip_optional(tp)
    origin = typing.get_origin(inner)
    if origin is typing.Union or origin in (set, frozenset, tuple) or inner in (bytes, set, tuple):
        raise TypeError(f"config field `{key}` has type {tp}, which a YAML config cannot hold; give it one type (or "
                        "Any) in grpo_rollout/config/schema.py")
    if origin is list:
        _check_type(typing.get_args(inner)[0], key + "[]")


def _value_schema(tp: Any, key: str, bounds: Dict[str, Any]) -> Dict[str, Any]:
    """The schema of one value typed ``tp`` at ``key`` (refused with :class:`TypeError` like a config field)."""
    _check_type(tp, key)
    return _value(TypeAdapter(tp).json_schema(), tp)


def model_doc(model: type) -> str:
    """The class docstring as one paragraph per blank-line-separated block, reST roles as Markdown."""
    doc = re.sub(r":\w+:`~?([^`]+)`", r"`\1`", inspect.cleandoc(model.__doc__ or "")).replace("``", "`")
    return "\n\n".join(" ".join(block.split()) for block in doc.split("\n\n"))


__all__ = ["INTERPOLATION_PATTERN", "SCHEMA_DIALECT", "config_json_schema", "model_doc"]
