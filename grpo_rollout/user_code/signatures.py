"""Inspect what a user function accepts, so it can be called with exactly the arguments it names."""

from __future__ import annotations

import contextlib
import inspect
import sys
from pathlib import Path
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


#: the ``sys.modules`` names of user files loaded by path start with this (:func:`~.resolve.module_name_for`)
USER_MODULE_PREFIX = "grpo_rollout_user_"


def describe(fn: Callable) -> str:
    """A function's name for messages: ``module.qualname``, or ``path/file.py:qualname`` for a function from a user
    file loaded by its path (whose module name is internal), the path relative to the current folder when under it."""
    module, name = getattr(fn, "__module__", None) or "?", getattr(fn, "__qualname__", repr(fn))
    file = getattr(sys.modules.get(module), "__file__", None) if module.startswith(USER_MODULE_PREFIX) else None
    if file:
        path, cwd = Path(file), Path.cwd()
        if cwd != Path(cwd.anchor):
            with contextlib.suppress(ValueError):
                path = path.relative_to(cwd)
        return f"{path}:{name}"
    return f"{module}.{name}"


def a_type(obj: object) -> str:
    """``obj``'s type name with its article, for messages: ``an int``, ``a str``."""
    name = type(obj).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


_OURS = str(Path(__file__).resolve().parent)


def defined_at(fn: Callable) -> str:
    """`` (defined at FILE:LINE)`` of a function's ``def`` (through decorators and ``functools.partial``); ``""``
    when unknown (a builtin, a C function)."""
    import functools
    import inspect

    while isinstance(fn, functools.partial):
        fn = fn.func
    try:
        target = inspect.unwrap(fn)
        file = inspect.getsourcefile(target) or inspect.getfile(target)
        line = inspect.getsourcelines(target)[1]
    except (TypeError, OSError):
        return ""
    return f" (defined at {file}:{line})"


def raised_at(exc: BaseException) -> str:
    """`` (at FILE:LINE)`` of the user code that raised ``exc``: the innermost traceback frame outside grpo_rollout,
    the standard library and installed packages (a user's own helper modules count), else the innermost frame
    outside grpo_rollout; ``""`` when there is none."""
    import traceback

    found = user_frame(traceback.extract_tb(exc.__traceback__))
    return f" (at {found.filename}:{found.lineno})" if found is not None else ""


def user_frame(frames: Any) -> Any:
    """Of ``frames`` (a ``traceback.StackSummary``, outermost first), the innermost outside grpo_rollout, the
    standard library and installed packages, else the innermost outside grpo_rollout; ``None`` when there is none."""
    import sysconfig

    libraries = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}

    def ours(name: str) -> bool:
        return str(Path(name).resolve()).startswith(_OURS)

    def library(name: str) -> bool:
        path = str(Path(name).resolve())
        return name.startswith("<") or any(path.startswith(str(Path(lib).resolve())) for lib in libraries)

    for pick in (lambda f: not ours(f.filename) and not library(f.filename), lambda f: not ours(f.filename)):
        found = [f for f in frames if pick(f)]
        if found:
            return found[-1]
    return None
