"""How a config key is declared (:func:`setting`: one pydantic field with its type, default, range, one-line
description and :class:`Rule`) and read back by the range checks, the JSON Schema, docs/config.md's config reference and
the nearest-key suggestions: its section, allowed values, range, type name."""

from __future__ import annotations

import re
import typing
from dataclasses import dataclass
from typing import Any, Dict, Iterator, Literal, Optional, Tuple, Type

import annotated_types as at
from pydantic import BaseModel, ConfigDict, Field
from pydantic.fields import FieldInfo


@dataclass(frozen=True)
class Rule:
    """What ``validate-config`` says about a value outside the key's range or allowed set: ``fix`` (default
    ``e.g. <default>``) and ``problem`` (default generated from the range: ``must be >= 1``); ``aliases``: other
    names of the key in rollout and reward kwargs (``n``, ``max_tokens``)."""

    fix: str = ""
    problem: str = ""
    aliases: Tuple[str, ...] = ()


def setting(default: Any, doc: str, *, fix: str = "", problem: str = "", aliases: Tuple[str, ...] = (),
            **bounds: Any) -> Any:
    """A config key: ``default`` (a list or mapping is copied per config), ``doc`` (one line: what it does, its unit),
    ``bounds`` (pydantic's ``ge``/``gt``/``le``/``lt``), and the :class:`Rule` (``fix``, ``problem``) for a value
    outside them."""
    info = Field(default, description=doc, **bounds)
    if fix or problem or aliases:
        info.metadata.append(Rule(fix, problem, aliases))
    return info


def section(model: Type[BaseModel], doc: str) -> Any:
    """A nested section: a fresh ``model()`` per config."""
    return Field(default_factory=model, description=doc)


def rule_of(info: FieldInfo) -> Rule:
    """The field's :class:`Rule` (an empty one when it has none)."""
    return next((m for m in info.metadata if isinstance(m, Rule)), Rule())


def bounds_of(info: FieldInfo) -> Dict[str, float]:
    """The field's numeric bounds as ``{"ge": 0, "lt": 1}`` (empty when it has none)."""
    return {name: getattr(m, name) for m in info.metadata if isinstance(m, at.BaseMetadata)
            for name in ("ge", "gt", "le", "lt") if getattr(m, name, None) is not None}


def strip_optional(tp: Any) -> Tuple[Any, bool]:
    """``(X, True)`` for ``Optional[X]``, else ``(tp, False)``."""
    if typing.get_origin(tp) is typing.Union:
        rest = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(rest) == 1:
            return rest[0], True
    return tp, False


def section_of(tp: Any) -> Optional[Type[BaseModel]]:
    """The model of a section (``LoraConfig``) or of a list of sections (``List[RewardConfig]``), else ``None``."""
    tp = typing.get_args(tp)[0] if typing.get_origin(tp) is list else tp
    return tp if isinstance(tp, type) and issubclass(tp, BaseModel) else None


def item_type(tp: Any) -> Any:
    """``X`` for ``X``, ``Optional[X]``, ``List[X]`` and ``Optional[List[X]]``."""
    tp = strip_optional(tp)[0]
    return typing.get_args(tp)[0] if typing.get_origin(tp) is list else tp


def allowed_values(tp: Any) -> Optional[tuple]:
    """The values of a ``Literal[...]`` type (or of a list of one), else ``None``."""
    return typing.get_args(item_type(tp)) if typing.get_origin(item_type(tp)) is Literal else None


def is_text(tp: Any) -> bool:
    """``str``, a ``Literal`` of strings, or an optional or list of those: keys whose value is text."""
    return item_type(tp) is str or allowed_values(tp) is not None


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
    return "any value" if tp is Any else getattr(tp, "__name__", str(tp))


def range_text(info: FieldInfo) -> str:
    """The field's range as text: ``>= 2``, ``> 0``, ``in (0, 1]``; ``""`` when it has none."""
    b = {k: str(int(v)) if float(v).is_integer() else str(v) for k, v in bounds_of(info).items()}
    low = ("[", b["ge"]) if "ge" in b else ("(", b["gt"]) if "gt" in b else None
    high = ("]", b["le"]) if "le" in b else (")", b["lt"]) if "lt" in b else None
    if low and high:
        return f"in {low[0]}{low[1]}, {high[1]}{high[0]}"
    if low or high:
        return {"[": ">=", "(": ">", "]": "<=", ")": "<"}[(low or high)[0]] + " " + (low or high)[1]
    return ""


def dotted(loc: Tuple[Any, ...]) -> str:
    """``("rewards", 0, "weight")`` → ``rewards[0].weight``; ``()`` → ``<config>``."""
    text = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")
    return text or "<config>"


def value_at(obj: Any, loc: Tuple[Any, ...], default: Any = None) -> Any:
    """What ``loc`` (``("rewards", 0, "weight")``) points at in a config or section, the very object; ``default``
    when there is nothing there."""
    try:
        for part in loc:
            obj = obj[part] if isinstance(part, int) else getattr(obj, part)
        return obj
    except (AttributeError, IndexError, KeyError, TypeError):
        return default


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
    key = re.sub(r"\[\d*\]", "[]", dotted).removesuffix("[]")  # a list item: the list's field
    return next((info for k, info in walk(model) if k == key), None)


def aliases(model: Type[BaseModel]) -> Dict[str, str]:
    """Every name a key of section ``model`` goes by (its own, and its :class:`Rule`'s aliases) → the key."""
    return {name: key for key, info in model.model_fields.items() for name in (key, *rule_of(info).aliases)}


def enums(model: Type[BaseModel]) -> Dict[str, tuple]:
    """Dotted key → allowed values, for every key typed ``Literal[...]`` (lists of them excluded)."""
    return {k: typing.get_args(info.annotation) for k, info in walk(model)
            if typing.get_origin(info.annotation) is Literal}


class Section(BaseModel):
    """A section: unknown keys are errors, a number for a text key is taken as its text, NaN and inf are refused."""

    model_config = ConfigDict(extra="forbid", coerce_numbers_to_str=True, allow_inf_nan=False)
