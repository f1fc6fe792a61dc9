"""How a config key is declared (:func:`setting`) and read back: its section, its allowed values, its range.

Every key of :mod:`grpo_rollout.config.schema` is one pydantic field holding its type, default, range and a one-line
description; :class:`Rule` adds the text shown when a value is outside the range. Everything else (the range checks,
the JSON Schema, the README's config reference, the nearest-key suggestions) reads the fields through this module.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Any, Dict, Iterator, Literal, Optional, Tuple, Type

import annotated_types as at
from pydantic import BaseModel, Field
from pydantic.fields import FieldInfo


@dataclass(frozen=True)
class Rule:
    """What ``validate-config`` says about a value outside the key's range or allowed set.

    Attributes:
        fix: the suggested fix (default: ``e.g. <default>``).
        why: appended to the generated ``must be >= 1`` in parentheses.
        problem: replaces the generated text altogether.
    """

    fix: str = ""
    why: str = ""
    problem: str = ""


def setting(default: Any, doc: str, *, rule: Optional[Rule] = None, **bounds: Any) -> Any:
    """A config key: ``default`` (a list or mapping is copied per config), ``doc`` (one line: what it does, its unit),
    ``bounds`` (pydantic's ``ge``/``gt``/``le``/``lt``) and the :class:`Rule` for a value outside them."""
    info = Field(default, description=doc, **bounds)
    if rule is not None:
        info.metadata.append(rule)
    return info


def section(model: Type[BaseModel], doc: str) -> Any:
    """A nested section: a fresh ``model()`` per config."""
    return Field(default_factory=model, description=doc)


def rule_of(info: FieldInfo) -> Rule:
    """The field's :class:`Rule` (an empty one when it has none)."""
    return next((m for m in info.metadata if isinstance(m, Rule)), Rule())


def bounds_of(info: FieldInfo) -> Dict[str, float]:
    """The field's numeric bounds as ``{"ge": 0, "lt": 1}`` (empty when it has none)."""
    out: Dict[str, float] = {}
    for m in info.metadata:
        for name in ("ge", "gt", "le", "lt"):
            if isinstance(m, (at.Ge, at.Gt, at.Le, at.Lt, at.Interval)) and getattr(m, name, None) is not None:
                out[name] = getattr(m, name)
    return out


def strip_optional(tp: Any) -> Tuple[Any, bool]:
    """``(X, True)`` for ``Optional[X]``, else ``(tp, False)``."""
    if typing.get_origin(tp) is typing.Union:
        rest = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(rest) == 1:
            return rest[0], True
    return tp, False


def section_of(tp: Any) -> Optional[Type[BaseModel]]:
    """The model of a section (``LoraConfig``) or of a list of sections (``List[RewardConfig]``), else ``None``."""
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return tp
    args = typing.get_args(tp)
    if typing.get_origin(tp) is list and args and isinstance(args[0], type) and issubclass(args[0], BaseModel):
        return args[0]
    return None


def allowed_values(tp: Any) -> Optional[tuple]:
    """The values of a ``Literal[...]`` type (or of a list of one), else ``None``."""
    tp, _ = strip_optional(tp)
    if typing.get_origin(tp) is list:
        tp = typing.get_args(tp)[0]
    return typing.get_args(tp) if typing.get_origin(tp) is Literal else None


def is_text(tp: Any) -> bool:
    """``str``, ``Optional[str]``, a ``Literal`` of strings, or a list of those: keys whose value is text."""
    tp, _ = strip_optional(tp)
    if typing.get_origin(tp) is list:
        tp = typing.get_args(tp)[0]
    return tp is str or typing.get_origin(tp) is Literal


def type_name(tp: Any) -> str:
    """How a key's type reads in a problem: ``int or null``, ``a list of str``, ``a mapping``."""
    tp, optional = strip_optional(tp)
    if optional:
        return f"{type_name(tp)} or null"
    if typing.get_origin(tp) is list:
        return f"a list of {type_name(typing.get_args(tp)[0])}"
    if typing.get_origin(tp) is dict:
        return "a mapping"
    if typing.get_origin(tp) is Literal:
        return "str"
    return getattr(tp, "__name__", str(tp))


def range_text(info: FieldInfo) -> str:
    """The field's range as text: ``>= 2``, ``> 0``, ``in (0, 1]``; ``""`` when it has none."""
    b = bounds_of(info)
    low = ("[", b["ge"]) if "ge" in b else ("(", b["gt"]) if "gt" in b else None
    high = ("]", b["le"]) if "le" in b else (")", b["lt"]) if "lt" in b else None
    if low and high:
        return f"in {low[0]}{_num(low[1])}, {_num(high[1])}{high[0]}"
    if low:
        return f"{'>=' if low[0] == '[' else '>'} {_num(low[1])}"
    if high:
        return f"{'<=' if high[0] == ']' else '<'} {_num(high[1])}"
    return ""


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def walk(model: Type[BaseModel], prefix: str = "") -> Iterator[Tuple[str, FieldInfo]]:
    """``(dotted key, field)`` for every key under ``model``, sections before their keys; the items of a list of
    sections as ``rewards[].function``."""
    for name, info in model.model_fields.items():
        dotted = prefix + name
        yield dotted, info
        sub = section_of(info.annotation)
        if sub is not None:
            yield from walk(sub, dotted + ("[]." if typing.get_origin(info.annotation) is list else "."))


def field_at(model: Type[BaseModel], dotted: str) -> Optional[FieldInfo]:
    """The field of a dotted key (``rewards[0].weight`` and ``rewards[].weight`` alike), or ``None``."""
    import re

    key = re.sub(r"\[\d*\]", "[]", dotted)
    return next((info for k, info in walk(model) if k == key), None)


def enums(model: Type[BaseModel]) -> Dict[str, tuple]:
    """Dotted key → allowed values, for every key typed ``Literal[...]`` (lists of them excluded)."""
    return {k: typing.get_args(info.annotation) for k, info in walk(model)
            if typing.get_origin(info.annotation) is Literal}


def defaults(model: Type[BaseModel]) -> Dict[str, Any]:
    """Dotted key → default, for every key that is not a section."""
    return {k: info.get_default(call_default_factory=True) for k, info in walk(model)
            if section_of(info.annotation) is None}


__all__ = ["Rule", "allowed_values", "bounds_of", "defaults", "enums", "field_at", "is_text", "range_text",
           "rule_of", "section", "section_of", "setting", "strip_optional", "type_name", "walk"]
