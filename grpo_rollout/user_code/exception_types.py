"""Exception types named in a config (``rollout.failure_errors``): a builtin's bare name (``ConnectionError``) or a
dotted path (``httpx.ConnectError``, ``pkg.module:MyError``, ``path/to/file.py:MyError``), imported when asked for."""

from __future__ import annotations

import builtins
from pathlib import Path
from typing import List, Optional, Sequence, Tuple, Type

from .resolve import ImportSpecError, resolve_object
from .signatures import a_type


def resolve_exception_type(spec: str, base_dir: Optional[Path] = None) -> Type[Exception]:
    """The exception class ``spec`` names (a bare name is a builtin's, e.g. ``TimeoutError``).

    Raises:
        ImportSpecError: it does not import, or names something other than a subclass of ``Exception`` (the message
            says which).
    """
    spec = str(spec).strip()
    if spec and "." not in spec and ":" not in spec:
        if not hasattr(builtins, spec):
            raise ImportSpecError(f"`{spec}` is not a builtin name; write its module too, e.g. `httpx.ConnectError`")
        obj = getattr(builtins, spec)
    else:
        obj = resolve_object(spec, base_dir)
    if not (isinstance(obj, type) and issubclass(obj, Exception)):
        raise ImportSpecError(f"`{spec}` is {a_type(obj)}, not an exception class (a subclass of Exception)")
    return obj


def resolve_exception_types(specs: Sequence[str], base_dir: Optional[Path] = None
                            ) -> Tuple[Tuple[Type[Exception], ...], List[Tuple[int, str, str]]]:
    """Every class of ``specs`` that resolves, and ``(index, spec, reason)`` for each one that does not."""
    found, failed = [], []
    for i, spec in enumerate(specs):
        try:
            found.append(resolve_exception_type(spec, base_dir))
        except ImportSpecError as exc:
            failed.append((i, spec, str(exc)))
    return tuple(found), failed
