"""The config's JSON Schema (draft 2020-12), generated from the dataclasses of :mod:`grpo_rollout.config.schema`.

Editors' YAML language servers use it to complete keys, show defaults and flag misspelled keys, wrong types and
values outside a fixed set while the config is being written; ``grpo-rollout schema`` prints it. It is built at run
time by walking the dataclasses, so a new field is in it without anyone editing this module (a field of a type it
cannot express raises :class:`TypeError` naming the field).

What it states, and where it deliberately differs from a literal reading of the type hints, so that it accepts what
:func:`~grpo_rollout.config.load_config` accepts:

* every section is an object with ``additionalProperties: false``; ``rollout.kwargs`` and ``rewards[].kwargs``
  (``Dict[str, Any]``) are free-form objects, and a field typed ``Any`` takes anything;
* a ``float`` key takes any number (``temperature: 1`` is fine), an ``int`` key an integer (JSON cannot tell ``8``
  from ``8.0``, which the loader rejects for an ``int``), ``Optional`` keys also ``null``;
* a ``str`` key takes any plain scalar, because the loader keeps the text as written where YAML reads a number or a
  boolean (``revision: 0123456``, ``save_rollouts: 5``, ``run_name: yes``);
* keys listed in ``ENUMS`` take one of their allowed values, and ``logging.report_to`` items one of ``REPORT_TO``;
  where ``off`` is allowed, ``false`` is too (YAML 1.1, which the loader uses, reads an unquoted ``off`` as false);
* ``rewards`` items are objects or a bare string (the ``- pkg.module:function`` shorthand);
* where :mod:`~grpo_rollout.config.ranges` rules a number by a plain interval (a :class:`~.ranges.Bound`), that
  interval is stated (``minimum``, ``exclusiveMinimum``, ...); other rules (``sampling.top_k``) and every cross-key
  rule are left to ``grpo-rollout validate-config``;
* OmegaConf interpolations: any scalar key may instead hold a string containing ``${...}`` (``${sampling.seed}``,
  ``${oc.env:PORT}``): the schema cannot know what it resolves to, so it accepts it and the loader checks the
  result. A whole section or list given as an interpolation is not accepted.

The schema is what editors need, not a replacement for ``validate-config``: imports, the dataset, cross-key rules and
resolved interpolations are only checked there.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
import typing
from typing import Any, Dict, List, Optional

from .ranges import Bound, range_bounds
from .schema import ENUMS, REPORT_TO, Config

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"

# A string that contains an OmegaConf interpolation, e.g. "${sampling.seed}" or "${oc.env:PORT}".
INTERPOLATION_PATTERN = r"\$\{.+\}"
_INTERPOLATION = {"type": "string", "pattern": INTERPOLATION_PATTERN}

# Allowed values of list items (ENUMS covers single keys); the constants come from schema.py.
_ITEM_ENUMS: Dict[str, tuple] = {"logging.report_to": REPORT_TO}

#: Python scalar type → its JSON Schema type name (writing a schema; ``rollouts.tools`` has the reverse map for
#: checking a tool call's arguments).
_JSON_TYPE_OF = {bool: "boolean", int: "integer", float: "number"}


def config_json_schema() -> Dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a grpo-rollout YAML config, built from the :class:`Config` dataclasses.

    Returns:
        A JSON-serialisable dict: one ``object`` per section with ``additionalProperties: false``, each key with its
        type, default and a short ``description``; the allowed values from ``ENUMS`` as ``enum``; plain numeric
        ranges from :func:`~grpo_rollout.config.ranges.range_bounds`. See the module docstring for how YAML ints,
        plain scalars for text keys and ``${...}`` interpolations are treated.

    Raises:
        TypeError: a config field has a type the schema cannot express (the message names the field).
    """
    schema = _section_schema(Config, "", range_bounds())
    return {"$schema": SCHEMA_DIALECT, "title": "grpo-rollout config", **schema}


def _doc(cls: type) -> Optional[str]:
    """The class docstring as one paragraph per blank-line-separated block (``None`` for dataclasses' generated one)."""
    doc = cls.__doc__ or ""
    if not doc or doc.startswith(f"{cls.__name__}("):
        return None
    doc = re.sub(r":\w+:`~?([^`]+)`", r"`\1`", inspect.cleandoc(doc)).replace("``", "`")  # reST roles → Markdown
    return "\n\n".join(" ".join(block.split()) for block in doc.split("\n\n"))


def _section_schema(cls: type, prefix: str, bounds: Dict[str, Bound]) -> Dict[str, Any]:
    """``cls`` (a dataclass) as an object schema; ``prefix`` is its dotted path plus ``.`` (``""`` at the top)."""
    hints = typing.get_type_hints(cls)
    properties = {}
    for f in dataclasses.fields(cls):
        dotted = prefix + f.name
        prop = _value_schema(hints[f.name], dotted, bounds)
        default = _default(f)
        if default is not dataclasses.MISSING:
            prop["default"] = default
            prop["description"] = f"{prop.get('description') or _phrase(prop, dotted)}. Default: {json.dumps(default)}."
        properties[f.name] = prop
    out: Dict[str, Any] = {"type": "object", "additionalProperties": False, "properties": properties}
    doc = _doc(cls)
    if doc:
        out["description"] = doc
    return out


def _default(f: dataclasses.Field) -> Any:
    """The field's default as JSON data, or ``dataclasses.MISSING`` for a section (its keys carry the defaults)."""
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        value = f.default_factory()  # type: ignore[misc]
    else:
        return dataclasses.MISSING
    return dataclasses.MISSING if dataclasses.is_dataclass(value) else value


def _value_schema(tp: Any, dotted: str, bounds: Dict[str, Bound]) -> Dict[str, Any]:
    """The schema of one key typed ``tp`` at ``dotted`` (list items as ``dotted[]``)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Union:
        rest = [a for a in args if a is not type(None)]
        if len(rest) != 1 or len(args) != 2:
            raise TypeError(f"config field `{dotted}`: only Optional[X] unions fit the JSON Schema, not {tp}; "
                            "give it one type (or Any) in grpo_rollout/config/schema.py")
        inner = _value_schema(rest[0], dotted, bounds)
        if isinstance(inner.get("type"), list):
            inner["type"].append("null")
            return inner
        return {**{k: v for k, v in inner.items() if k != "anyOf"}, "anyOf": inner["anyOf"] + [{"type": "null"}]}
    if tp is Any:
        return {}
    if dataclasses.is_dataclass(tp):
        return _section_schema(tp, dotted + ".", bounds)
    if origin in (list, List):
        (item,) = args
        if dataclasses.is_dataclass(item):
            entry = _section_schema(item, dotted + "[].", bounds)
            return {"type": "array", "items": {"anyOf": [entry, {"type": "string", "description": "shorthand for "
                                                                  "`{function: <this string>}`"}]}}
        return {"type": "array", "items": _value_schema(item, dotted + "[]", bounds)}
    if origin in (dict, Dict):
        return {"type": "object", "description": "Free-form mapping (keyword arguments passed on as written)"}
    if tp is str:
        allowed = ENUMS.get(dotted) or _ITEM_ENUMS.get(dotted.removesuffix("[]"))
        if allowed is None:
            return {"type": ["string", "number", "boolean"]}  # the loader keeps a plain scalar's text for a str key
        values: List[Any] = list(allowed) + ([False] if "off" in allowed else [])  # YAML 1.1: unquoted off = false
        return {"anyOf": [{"enum": values}, dict(_INTERPOLATION)]}
    if tp in _JSON_TYPE_OF:
        # the string branch takes only an interpolation: `pattern` applies to strings, the bounds to numbers
        out: Dict[str, Any] = {"type": [_JSON_TYPE_OF[tp], "string"], "pattern": INTERPOLATION_PATTERN}
        if dotted in bounds:
            out.update(bounds[dotted].json_schema())
        return out
    raise TypeError(f"config field `{dotted}` has type {tp}, which grpo_rollout/config/json_schema.py cannot express; "
                    "use str, int, float, bool, Optional, List, Dict[str, Any], Any or a dataclass, or teach "
                    "_value_schema the new type")


def _phrase(prop: Dict[str, Any], dotted: str) -> str:
    """A short text of what a key takes, from its schema: ``integer >= 2 or null``, ``one of grpo, dapo``."""
    names = {"string": "text", "integer": "integer", "number": "number", "boolean": "true or false",
             "array": "list", "object": "mapping"}
    if "anyOf" in prop and "enum" in prop["anyOf"][0]:
        text = "one of " + ", ".join(str(v) for v in prop["anyOf"][0]["enum"] if v is not False)
        return text + (" or null" if {"type": "null"} in prop["anyOf"] else "")
    types = prop.get("type")
    if types is None:
        return "any value"
    if isinstance(types, str):
        types = [types]
    first = names[types[0]]
    if prop.get("type") == "array" and prop.get("items", {}).get("anyOf", [{}])[0].get("type") == "object":
        first = "list of entries"
    if prop.get("type") == "array" and "enum" in prop.get("items", {}).get("anyOf", [{}])[0]:
        first = "list of " + ", ".join(prop["items"]["anyOf"][0]["enum"])
    limits = {"minimum": ">=", "exclusiveMinimum": ">", "maximum": "<=", "exclusiveMaximum": "<"}
    ranges = [f"{op} {prop[word]}" for word, op in limits.items() if word in prop]
    text = first + (" " + " and ".join(ranges) if ranges else "")
    return text + (" or null" if "null" in types else "")


__all__ = ["INTERPOLATION_PATTERN", "SCHEMA_DIALECT", "config_json_schema"]
