"""Pydantic's validation errors as the problem table's rows (key, value, problem, fix). A *type* error (an unknown
key, a word for a number, a section that is not a mapping) is reported while loading and the key keeps its default; a
*value* error (outside the range or allowed set, a rule across keys) is reported by
:func:`grpo_rollout.config.ranges.check_values` with the value kept, as every other check is."""

from __future__ import annotations

import typing
from typing import Any, Dict, Optional, Tuple, Type

from pydantic import BaseModel

from .fields import allowed_values, dotted, field_at, range_text, rule_of, section_of, strip_optional, type_name
from .key_suggestions import other_trainers_fix, suggest_key
from .problems import Problem

#: pydantic error types that are about a value, not its type (``rule``/``cross_key``: raised by the schema)
VALUE_ERRORS = {"greater_than", "greater_than_equal", "less_than", "less_than_equal", "literal_error", "rule",
                "cross_key", "finite_number"}

Loc = Tuple[Any, ...]  # a pydantic error's location: ("rewards", 0, "weight")


def error_loc(err: Dict[str, Any]) -> Loc:
    """Where the error is: its ``loc``, plus the key a rule across keys names."""
    loc = tuple(err["loc"])
    return loc + (err["ctx"]["key"],) if err["type"] == "cross_key" else loc


def to_problem(err: Dict[str, Any], model: Type[BaseModel], value: Any,
               written: Optional[Dict[str, str]] = None) -> Problem:
    """One error as a :class:`Problem`. ``value``: the value to show; ``written``: dotted key → the interpolation
    written there (a key it resolved wrongly is reported as a failed interpolation)."""
    loc = error_loc(err)
    key, kind = dotted(loc), err["type"]
    base = loc[:-1] if loc and isinstance(loc[-1], int) else loc  # an item of a list: the list's field
    info = field_at(model, dotted(base)) if base else None
    tp = info.annotation if info is not None else model
    if base != loc and typing.get_origin(strip_optional(tp)[0]) is list:
        tp = typing.get_args(strip_optional(tp)[0])[0]
    for source, expression in (written or {}).items():
        if key == source:
            return Problem(source, expression, f"interpolation failed: it resolved to {value!r}, which could not be "
                           f"converted to {type_name(tp)}", f"point it at a key or variable holding {type_name(tp)}, "
                           "or write the value out")
        if key.startswith((source + ".", source + "[")):  # a section or list: one problem for the whole of it
            inner, src = to_problem(err, model, value), field_at(model, source)
            return Problem(source, expression, f"interpolation failed: what it resolved to is not "
                           f"{type_name(src.annotation if src else model)} ({inner.key}: {inner.message})",
                           "point it at a section of the same kind, or write the keys out")
    if kind == "extra_forbidden" and other_trainers_fix(str(loc[-1])):  # a TRL habit: gradient_accumulation_steps
        return Problem(key, value, "unknown key (another trainer's setting)", other_trainers_fix(str(loc[-1])))
    if kind == "extra_forbidden":
        parent = section_of(field_at(model, dotted(loc[:-1])).annotation) if loc[:-1] else model
        hint = suggest_key(str(loc[-1]), parent, dotted(loc[:-1]) + "." if loc[:-1] else "")
        return Problem(key, value, "unknown key", f"did you mean `{hint}`?" if hint else
                       f"valid keys here: {', '.join(parent.model_fields)}")
    if kind in VALUE_ERRORS:
        return _value_problem(err, key, value, info)
    sub = section_of(tp)
    if sub is not None and kind in ("model_type", "model_attributes_type", "dict_type"):
        keys = ", ".join(list(sub.model_fields)[:3])
        return Problem(key, value, f"expected a mapping of {sub.__name__} keys",
                       f"write `{key}:` followed by indented keys such as {keys}" if loc else
                       f"write the config as a mapping of sections, such as {keys}")
    if sub is not None and kind == "list_type":
        return Problem(key, value, "expected a list", f"write `{key}:` followed by `- function: pkg.module:func` "
                       "entries")
    if value is None and tp is str and info is not None and info.default == "":  # `data.eval=null`
        return Problem(key, value, "expected str, got null", f'for none, leave it empty: `{key}: ""` in YAML, '
                       f"`{key}=` on the command line")
    if value is None and info is not None and rule_of(info).fix:  # `training.max_steps=null`: the key's own advice
        return Problem(key, value, f"expected {type_name(tp)}, got null", rule_of(info).fix)
    if type_name(tp).startswith("a list") and isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return Problem(key, value, f"expected {type_name(tp)}, got {type(value).__name__}",  # `report_to=jsonl`
                       f"write it as a list: `{key}: [{value}]` in YAML, `{key}=[{value}]` on the command line")
    return Problem(key, value, f"expected {type_name(tp)}, got {type(value).__name__}", f"set `{key}` to "
                   f"{type_name(tp)}")


def _value_problem(err: Dict[str, Any], key: str, value: Any, info: Any) -> Problem:
    rule = rule_of(info) if info is not None else None
    if err["type"] == "cross_key":
        return Problem(key, value, err["msg"], err["ctx"]["fix"])
    if err["type"] == "literal_error" and not (rule and rule.problem):
        allowed = ", ".join(str(v) for v in allowed_values(info.annotation))
        return Problem(key, value, f"must be one of {allowed}", f"set `{key}` to one of {allowed}")
    if err["type"] in ("rule", "finite_number"):  # NaN or inf, or a validator's own text
        message = err["msg"] if err["type"] == "rule" else " ".join(["must be a finite number", range_text(info)]).strip()
    else:
        message = rule.problem or f"must be {range_text(info)}" + (" or null" if strip_optional(info.annotation)[1]
                                                                     else "")
    return Problem(key, value, message, rule.fix or f"e.g. {info.default}")
