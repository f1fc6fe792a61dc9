"""Turn the function names written in a config into Python callables.

Accepted forms:
- ``pkg.module:func`` (also ``pkg.module:Class.method``),
- ``pkg.module.func``,
- ``path/to/file.py:func`` — a file path, relative to the current directory or, failing that, to the config file's
  folder.

A file is loaded once per resolved path (cached in ``sys.modules`` under :func:`module_name_for`). While it runs, its
folder is first on ``sys.path``, so its top-level ``import helper`` finds ``helper.py`` next to it (the sibling stays
in ``sys.modules`` under that plain name, shared with every file that imports it); afterwards the folder is taken off
``sys.path`` again, so an import *inside a function*, at call time, does not see the file's folder: import siblings at
the top of the file. The current folder is on ``sys.path`` likewise only while a ``pkg.module`` name is imported.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import re
import sys
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from .signatures import USER_MODULE_PREFIX, a_type


class ImportSpecError(ValueError):
    """The dotted path or file path does not lead to a callable; the message says which part failed and why."""


class _ModuleMissing(ImportSpecError):
    """The module itself (not something it imports) does not exist."""


@contextlib.contextmanager
def _on_sys_path(folder: str) -> Iterator[None]:
    """``folder`` first on ``sys.path`` for the duration of the block (unless it already is on it), then taken off
    again: importing a user's file must not leave its folder shadowing modules for the rest of the process."""
    if folder in sys.path:
        yield
        return
    sys.path.insert(0, folder)
    try:
        yield
    finally:
        try:
            sys.path.remove(folder)
        except ValueError:  # the user's code took it off itself
            pass


def module_name_for(path: Path) -> str:
    """The ``sys.modules`` name a user file is cached under: readable (its stem) and unique per resolved path (a
    hash of it), so ``a/x/y/r.py`` and ``b/x/y/r.py`` are two modules."""
    path = path.resolve()
    stem = re.sub(r"\W", "_", path.stem)
    return f"{USER_MODULE_PREFIX}{stem}_{hashlib.sha256(str(path).encode()).hexdigest()[:12]}"


def _load_file(file_part: str, base_dir: Optional[Path]) -> Any:
    candidates = [Path(file_part)]
    if base_dir is not None and not Path(file_part).is_absolute():
        candidates.append(base_dir / file_part)
    for path in candidates:
        if path.is_file():
            path = path.resolve()
            name = module_name_for(path)
            if name in sys.modules:
                return sys.modules[name]
            spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            try:
                with _on_sys_path(str(path.parent)):  # its top-level imports of neighbouring files work
                    spec.loader.exec_module(module)
            except Exception as exc:
                del sys.modules[name]
                raise ImportSpecError(f"running {path} failed: {type(exc).__name__}: {exc}") from exc
            return module
    tried = " or ".join(str(c) for c in candidates)
    raise ImportSpecError(f"file {tried} does not exist")


def _import_module(module_name: str) -> Any:
    try:
        with _on_sys_path(str(Path.cwd())):  # `pkg.module` from the current folder, as `python -m` would find it
            return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise _ModuleMissing(f"no module named `{exc.name}` (is the package installed, or the current directory "
                                  f"the one that holds it?)") from exc
        raise ImportSpecError(f"importing `{module_name}` failed: {exc}") from exc
    except Exception as exc:
        raise ImportSpecError(f"importing `{module_name}` failed: {type(exc).__name__}: {exc}") from exc


def _getattr_path(obj: Any, attr_path: str, where: str) -> Any:
    for part in attr_path.split("."):
        if not hasattr(obj, part):
            names = [n for n in dir(obj) if not n.startswith("_")]
            import difflib

            close = difflib.get_close_matches(part, names, n=1)
            hint = f"; did you mean `{close[0]}`?" if close else ""
            raise ImportSpecError(f"`{where}` has no attribute `{part}`{hint}")
        obj = getattr(obj, part)
    return obj


#: Modules that moved, by their old dotted name: a config naming the old one keeps working (issue 40 moved the
#: ecosystems' adapters out of ``grpo_rollout.rollouts`` into ``grpo_rollout.integrations``).
MOVED_MODULES = {
    "grpo_rollout.rollouts.verifiers": "grpo_rollout.integrations.verifiers.verifiers",
    "grpo_rollout.rollouts.openenv": "grpo_rollout.integrations.openenv.openenv",
    "grpo_rollout.rollouts.environment_factory": "grpo_rollout.integrations.trl.environment_factory",
    "grpo_rollout.rollouts.mcp_tools": "grpo_rollout.integrations.mcp.mcp_tools",
}


def resolve_object(spec: str, base_dir: Optional[Path] = None) -> Any:
    """Import what ``spec`` names (any object). Raises :class:`ImportSpecError` with the reason."""
    spec = spec.strip()
    if not spec:
        raise ImportSpecError("empty name")
    if ":" in spec:
        left, attr = spec.rsplit(":", 1)
        if left.endswith(".py") or "/" in left or "\\" in left:
            module = _load_file(left, base_dir)
        else:
            module = _import_module(MOVED_MODULES.get(left, left))
        return _getattr_path(module, attr, left)
    if spec.endswith(".py"):
        raise ImportSpecError("a file path needs the function name after a colon, e.g. `my_rewards.py:accuracy`")
    if "." not in spec:
        raise ImportSpecError("write `package.module:function` or `package.module.function`")
    # `pkg.mod.Class.method`: walk back until a module imports
    parts = spec.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        module_name = MOVED_MODULES.get(".".join(parts[:cut]), ".".join(parts[:cut]))
        try:
            module = _import_module(module_name)
        except _ModuleMissing:
            if cut == 1:
                raise
            continue
        return _getattr_path(module, ".".join(parts[cut:]), module_name)
    raise ImportSpecError(f"cannot import `{spec}`")  # pragma: no cover - loop always returns or raises


def resolve_callable(spec: str, base_dir: Optional[Path] = None) -> Callable:
    """Like :func:`resolve_object` but also requires the result to be callable."""
    obj = resolve_object(spec, base_dir)
    if not callable(obj):
        raise ImportSpecError(f"`{spec}` is {a_type(obj)}, not a function")
    return obj
