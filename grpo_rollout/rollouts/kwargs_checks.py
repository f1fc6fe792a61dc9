"""Static checks of ``rollout.kwargs`` for the built-in rollouts' ``validate_kwargs`` hooks (run by validate-config).

Each function returns problems as ``(key, message, fix)`` triples with keys ``rollout.kwargs.<name>`` (a fourth item
``"warning"`` makes it a warning instead of an error); none raises on a value of the wrong type, so one bad setting
never hides the others.
"""

from __future__ import annotations

import difflib
import inspect
import math
import numbers
from typing import Any, Callable, Dict, List, Mapping, Tuple

from ..user_code.signatures import named_params
from .contract import CONTEXT_ARGS, SAMPLING_ALIASES

KwargsProblem = Tuple[str, ...]  # (key, message, fix) or (key, message, fix, "warning")


def _key(name: str) -> str:
    return f"rollout.kwargs.{name}"


def unknown_settings(fn: Callable, kwargs: Mapping[str, Any]) -> List[KwargsProblem]:
    """Keys of ``kwargs`` that ``fn`` has no parameter for (sampling settings and their aliases are always allowed:
    their agreement with ``sampling.*`` is checked elsewhere), each with the nearest known setting."""
    known = [p for p in named_params(fn) if p != "prompts" and p not in CONTEXT_ARGS and p not in SAMPLING_ALIASES]
    problems = []
    for key in kwargs:
        if key in known or key in SAMPLING_ALIASES:
            continue
        close = difflib.get_close_matches(key, known, n=1)
        fix = f"did you mean `{close[0]}`?" if close else f"its settings: {', '.join(known)}"
        if key == "env_timeout_s":  # the trainer passes it from its own key
            fix = "it is rollout.env_timeout_s (a key of rollout, beside kwargs)"
        problems.append((_key(key), f"{fn.__name__} has no setting `{key}`", fix))
    return problems


def check_int(kwargs: Mapping[str, Any], name: str, minimum: int, optional: bool = False) -> List[KwargsProblem]:
    """``kwargs[name]``, when given, is an integer >= ``minimum`` (or null when ``optional``)."""
    if name not in kwargs or (optional and kwargs[name] is None):
        return []
    value = kwargs[name]
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        none = " or null" if optional else ""
        return [(_key(name), f"must be an integer >= {minimum}{none}, got {value!r}", f"e.g. {name}: {max(minimum, 3)}")]
    return []


def check_bool(kwargs: Mapping[str, Any], name: str) -> List[KwargsProblem]:
    """``kwargs[name]``, when given, is true or false."""
    value = kwargs.get(name, False)
    if isinstance(value, bool):
        return []
    return [(_key(name), f"must be true or false, got {value!r}", f"e.g. {name}: true")]


def check_positive_seconds(kwargs: Mapping[str, Any], name: str) -> List[KwargsProblem]:
    """``kwargs[name]``, when given, is a number of seconds > 0, or null (no limit)."""
    value = kwargs.get(name)
    if value is None:
        return []
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or value <= 0:
        return [(_key(name), f"must be a number of seconds > 0 (or null: no limit), got {value!r}",
                 f"e.g. {name}: 10")]
    return []


def check_strings(kwargs: Mapping[str, Any], name: str) -> List[KwargsProblem]:
    """``kwargs[name]``, when given, is a list of strings or null."""
    value = kwargs.get(name)
    if value is None or (isinstance(value, (list, tuple)) and all(isinstance(v, str) and v for v in value)):
        return []
    return [(_key(name), f"must be a list of non-empty strings (or null), got {value!r}",
             f'e.g. {name}: ["</answer>"]')]


def one_of(kwargs: Mapping[str, Any], name: str, allowed: Tuple[str, ...], default: str) -> List[KwargsProblem]:
    """``kwargs[name]``, when given, is one of ``allowed`` (a YAML boolean gets a hint to quote the word)."""
    value = kwargs.get(name, default)
    if value in allowed and isinstance(value, str):
        return []
    hint = " (YAML reads unquoted off/on/yes/no as booleans: quote it)" if isinstance(value, bool) else ""
    return [(_key(name), f"must be {', '.join(allowed[:-1])} or {allowed[-1]}, got {value!r}{hint}",
             f"use {default}")]


def check_optional_text(kwargs: Mapping[str, Any], name: str) -> List[KwargsProblem]:
    """``kwargs[name]``, when given, is a string or null."""
    value = kwargs.get(name)
    if value is None or isinstance(value, str):
        return []
    return [(_key(name), f"must be text (or null), got {value!r}", f'quote it: {name}: "..."')]


def check_constructor_kwargs(cls: Any, kwargs: Mapping[str, Any], name: str) -> List[KwargsProblem]:
    """``kwargs[name]`` (``{}`` when absent) is a mapping that ``cls(**mapping)`` accepts (checked against its
    signature, not called: a required constructor argument missing from it is reported too)."""
    value = kwargs.get(name)
    if value is None:
        value = {}
    if not isinstance(value, Mapping):
        return [(_key(name), f"must be a mapping of constructor arguments, got {value!r}", f"e.g. {name}: {{size: 4}}")]
    try:
        signature = inspect.signature(cls)
    except (TypeError, ValueError):  # no signature to check against: the constructor will tell
        return []
    try:
        signature.bind(**dict(value))
    except TypeError as exc:
        names = [p for p in signature.parameters if p not in ("args", "kwargs")]
        params = ", ".join(names) or "none"
        label = getattr(cls, "__name__", str(cls))
        close = [(k, difflib.get_close_matches(k, names, n=1)) for k in value if k not in signature.parameters]
        hint = "".join(f"did you mean `{m[0]}` (for `{k}`)? " for k, m in close if m)
        return [(_key(name), f"{label}() does not accept these arguments: {exc}", f"{hint}its parameters: {params}")]
    return []


def type_problems(kwargs: Dict[str, Any]) -> List[KwargsProblem]:
    """The checks both multi-turn rollouts share: ``max_turns``, ``max_turn_tokens``, ``stop``."""
    return (check_int(kwargs, "max_turns", 1) + check_int(kwargs, "max_turn_tokens", 1, optional=True)
            + check_strings(kwargs, "stop"))
