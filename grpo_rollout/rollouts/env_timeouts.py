"""The time limit of every user call an episode makes outside the model (``rollout.env_timeout_s``): an environment's
``reset``, ``step`` and ``get_reward`` (the environment rollout, TRL's ``environment_factory``, OpenEnv sessions), a
verifiers environment's own work between two model calls and its rubric. Tools have their own limit
(``rollout.kwargs.tool_timeout_s``): a slow tool is the model's error, answered to it; a stuck environment is not.

A call past its limit raises :class:`EnvTimeout`, naming the class, the method, where it was and the key. It is an
:class:`~.contract.EpisodeFailure`: ``rollout.on_error: retry | drop`` plays the group again or leaves it out, ``stop``
(the default) stops the run. A plain method runs on a daemon thread of its own, abandoned when its time runs out
(:mod:`grpo_rollout.user_code.deadlines`), so neither the error nor Ctrl-C waits for it.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Dict, Optional, Sequence

from ..config.schema import RolloutConfig, default_of
from ..user_code.deadlines import StillRunning, await_within, call_in_daemon_thread
from .contract import EpisodeFailure

#: the config key
ENV_TIMEOUT_KEY = "rollout.env_timeout_s"
#: its default (seconds): what a built-in rollout called without the trainer (a test, a notebook) waits
DEFAULT_ENV_TIMEOUT_S: float = default_of(RolloutConfig, "env_timeout_s")


class EnvTimeout(EpisodeFailure, TimeoutError):
    """A user call of an episode (an environment's ``reset``/``step``/``get_reward``, a verifiers environment or
    rubric) did not return within ``rollout.env_timeout_s`` seconds. ``label``: ``Class.method``; ``timeout_s``."""

    def __init__(self, label: str, timeout_s: float, where: str = ""):
        super().__init__(
            f"{label} did not return within {ENV_TIMEOUT_KEY} = {timeout_s:g} s{where}; it may wait for a lock, a "
            "process or a server that never answers, or loop forever. Fix it, or raise "
            f"{ENV_TIMEOUT_KEY} if it really needs longer (rollout.on_error: retry or drop counts the episode as "
            "failed instead of stopping the run)")
        self.label, self.timeout_s = label, timeout_s


async def bounded_call(label: str, fn: Callable, args: Sequence[Any] = (), kwargs: Optional[Dict[str, Any]] = None,
                       timeout_s: Optional[float] = DEFAULT_ENV_TIMEOUT_S) -> Any:
    """``fn(*args, **kwargs)`` within ``timeout_s`` seconds: awaited when ``async def``, else on a daemon thread.

    Raises:
        EnvTimeout: it did not return in time (``label``, ``Class.method``, names it).
        ExitedInUserCode: a plain ``fn`` raised ``SystemExit`` or another non-``Exception``.
        Exception: what ``fn`` raised.
    """
    try:
        if inspect.iscoroutinefunction(fn):
            return await await_within(fn(*args, **(kwargs or {})), timeout_s)
        return await call_in_daemon_thread(fn, args, kwargs, timeout_s)
    except StillRunning as exc:
        raise EnvTimeout(label, exc.timeout_s, exc.where) from None
