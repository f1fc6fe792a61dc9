"""Loading a verifiers environment for :mod:`.verifiers`: the package, the function that builds the environment (an
installed id's ``load_environment`` or ``module:function``), its ``env_args``, one built environment per process."""

from __future__ import annotations

import difflib
import inspect
import json
import signal
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from ...user_code.signatures import a_type, describe, raised_at
from ...rollouts.contract import RolloutError

INSTALL_FIX = ("pip install 'grpo-rollout[environments]' (its dependencies), then pip install --no-deps "
               "'verifiers==0.2.0' (make install does both)")

_ENVS: Dict[Tuple[str, str, str], Any] = {}
_LOCK = threading.Lock()


def _import_verifiers() -> Any:
    try:
        import verifiers
    except ImportError as exc:
        raise RolloutError(f"the package verifiers is not installed ({exc}); {INSTALL_FIX}") from exc
    return verifiers


def load_function(env: str, base_dir: Optional[Path] = None) -> Callable:
    """The function that builds the environment ``env`` names: ``module:function`` / ``path/file.py:function``, or an
    installed environment id's ``load_environment``.

    Raises:
        RolloutError: verifiers is not installed, or ``env`` does not import (the message says which and the fix).
    """
    from ...user_code.resolve import ImportSpecError, resolve_callable

    _import_verifiers()
    if ":" not in env and (env.endswith(".py") or "/" in env):
        raise RolloutError(f"rollout.kwargs.env {env!r} is a file: name the function that builds the environment "
                           f"after a colon, e.g. env: {env}:load_environment")
    if ":" in env:
        try:
            return resolve_callable(env, base_dir)
        except ImportSpecError as exc:
            raise RolloutError(f"rollout.kwargs.env {env!r}: {exc}") from exc
    from verifiers.utils.env_utils import import_env_module

    try:
        module = import_env_module(env)
    except Exception as exc:  # noqa: BLE001 - verifiers raises ValueError/ImportError for an unknown id
        raise RolloutError(f"rollout.kwargs.env {env!r}: no installed verifiers environment has this id ({exc}); "
                           f"install it (vf-install {env}, or pip install the package that provides it), or name "
                           "the function that builds it: env: path/file.py:load_environment") from exc
    fn = getattr(module, "load_environment", None)
    if not callable(fn):
        raise RolloutError(f"rollout.kwargs.env {env!r}: its module {module.__name__} has no load_environment "
                           "function; name the function that builds the environment: env: module:function")
    return fn


def env_args_problems(fn: Callable, env_args: Dict[str, Any]) -> List[str]:
    """``env_args`` keys that ``fn`` takes no parameter for, each with the nearest name it has (empty: all fit)."""
    params = inspect.signature(fn).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return []
    known = [name for name, p in params.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    out = []
    for key in env_args:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f"did you mean `{close[0]}`?" if close else f"it takes: {', '.join(known) or 'none'}"
            out.append(f"{describe(fn)} has no parameter `{key}`; {hint}")
    return out


@contextmanager
def _signal_handlers_kept() -> Iterator[None]:
    """While an environment is built: verifiers' ``Environment`` installs SIGINT/SIGTERM handlers of its own (tear
    down, then exit), which would replace the trainer's and, off the main thread (streaming workers, a notebook's
    helper thread), raise ``ValueError``. ``signal.signal`` keeps the current handler meanwhile."""
    original = signal.signal
    signal.signal = lambda signum, handler: signal.getsignal(signum)
    try:
        yield
    finally:
        signal.signal = original


def load_env(env: str, env_args: Optional[Dict[str, Any]] = None, base_dir: Optional[Path] = None) -> Any:
    """The ``vf.Environment`` that ``env`` and ``env_args`` name, built once per process.

    Raises:
        RolloutError: it does not import, ``env_args`` do not fit its parameters (nearest name given), building it
            raised (with the user code's file:line), or it built something that is not a ``vf.Environment``.
    """
    env_args = dict(env_args or {})
    key = (str(env), json.dumps(env_args, sort_keys=True, default=str), str(base_dir))
    with _LOCK:
        if key in _ENVS:
            return _ENVS[key]
    if not isinstance(env, str) or not env:
        raise RolloutError("verifiers_rollout needs rollout.kwargs.env: an installed environment id or "
                           "path/file.py:load_environment")
    fn = load_function(env, base_dir)
    problems = env_args_problems(fn, env_args)
    if problems:
        raise RolloutError("rollout.kwargs.env_args: " + "; ".join(problems))
    try:
        with _LOCK, _signal_handlers_kept():
            built = fn(**env_args)
    except Exception as exc:
        raise RolloutError(f"building the verifiers environment {describe(fn)}(**env_args) raised "
                           f"{type(exc).__name__}: {exc}{raised_at(exc)}") from exc
    import verifiers as vf

    if not isinstance(built, vf.Environment):
        raise RolloutError(f"{describe(fn)} returned {a_type(built)}; it must return a vf.Environment "
                           "(vf.SingleTurnEnv, vf.MultiTurnEnv, vf.ToolEnv, ...)")
    with _LOCK:
        return _ENVS.setdefault(key, built)


def env_problems(kwargs: Dict[str, Any], base_dir: Optional[Path] = None) -> List[Tuple[str, ...]]:
    """validate-config's checks of the verifiers rollout's ``env`` and ``env_args``: verifiers is installed, ``env``
    imports, ``env_args`` fit its parameters (nearest name for a typo), and the environment builds; as
    ``(key, message, fix)`` triples."""
    problems: List[Tuple[str, ...]] = []
    env, env_args = kwargs.get("env"), kwargs.get("env_args") or {}
    if not isinstance(env_args, dict):
        return problems + [("rollout.kwargs.env_args", f"must be a mapping of load_environment's arguments, got "
                            f"{type(env_args).__name__}", "env_args: {num_examples: 100}")]
    if not env or not isinstance(env, str):
        return problems + [("rollout.kwargs.env", "no environment named",
                            "env: path/file.py:load_environment (or an installed environment's id)")]
    try:
        fn = load_function(env, base_dir)
    except RolloutError as exc:
        key = "rollout.function" if "not installed" in str(exc) else "rollout.kwargs.env"
        return problems + [(key, str(exc), INSTALL_FIX if key == "rollout.function" else
                            "env: path/file.py:load_environment, or vf-install the environment")]
    for message in env_args_problems(fn, env_args):
        problems.append(("rollout.kwargs.env_args", message, "use the function's parameter names"))
    if not problems:
        try:
            load_env(env, env_args, base_dir)
        except RolloutError as exc:
            problems.append(("rollout.kwargs.env", str(exc), "fix the environment, or its env_args"))
    return problems
