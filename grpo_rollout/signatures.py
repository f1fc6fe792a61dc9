"""Inspect what a user function accepts, so it can be called with exactly the arguments it names."""

from __future__ import annotations

import inspect
from typing import Any, Callable, Dict, List, Mapping


def _params(fn: Callable) -> List[inspect.Parameter]:
    try:
        return list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # builtins without a signature: assume it takes anything
        return [inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD)]


def accepts_var_kwargs(fn: Callable) -> bool:
    """True when ``fn`` has a ``**kwargs`` parameter."""
    return any(p.kind is p.VAR_KEYWORD for p in _params(fn))


def named_params(fn: Callable) -> List[str]:
    """Names ``fn`` accepts as keywords (positional-or-keyword and keyword-only), in order."""
    return [p.name for p in _params(fn) if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


def required_params(fn: Callable) -> List[str]:
    """Names ``fn`` needs (no default), excluding ``*args``/``**kwargs``."""
    return [p.name for p in _params(fn)
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.default is p.empty]


def positional_only_required(fn: Callable) -> List[str]:
    """Required positional-only parameters (they cannot be passed by keyword)."""
    return [p.name for p in _params(fn) if p.kind is p.POSITIONAL_ONLY and p.default is p.empty]


def select_kwargs(fn: Callable, available: Mapping[str, Any]) -> Dict[str, Any]:
    """The subset of ``available`` that ``fn`` can receive: everything when it takes ``**kwargs``, else only the names
    it declares."""
    if accepts_var_kwargs(fn):
        return dict(available)
    names = set(named_params(fn))
    return {k: v for k, v in available.items() if k in names}


def describe(fn: Callable) -> str:
    """``module.qualname`` of a function, for messages."""
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"
