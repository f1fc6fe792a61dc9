"""The time limit of every user call an episode makes outside the model (``rollout.env_timeout_s``): an environment's
``reset``, ``step`` and ``get_reward`` (the environment rollout, TRL's ``environment_factory``, OpenEnv sessions), a
verifiers environment's own work between two model calls and its rubric. Tools have their own limit
(``rollout.kwargs.tool_timeout_s``): a slow tool is the model's error, answered to it; a stuck environment is not.

A call past its limit raises :class:`EnvTimeout`, naming the class, the method, where it was and the key. It is an
:class:`~.contract.EpisodeFailure`: ``rollout.on_error: retry | drop`` plays the group again or leaves it out, ``stop``
(the default) stops the run. A plain method runs on a daemon thread of its own, abandoned when its time runs out
(:mod:`grpo_rollout.user_code.deadlines`), so neither the error nor Ctrl-C waits for it. An ``async def`` one that
blocks its event loop (``time.sleep``, a synchronous ``requests.get``) raises :class:`LoopBlocked` in the thread that
waits for the loop, which is abandoned (:mod:`grpo_rollout.user_code.loop_watch`).
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

    def __init__(self, label: str, timeout_s: float, where: str = "", key: str = ENV_TIMEOUT_KEY):
        super().__init__(self._says(label, timeout_s, where, key))
        self.label, self.timeout_s, self.where, self.key = label, timeout_s, where, key

    @staticmethod
    def _says(label: str, timeout_s: float, where: str, key: str) -> str:
        return (f"{label} did not return within {key} = {timeout_s:g} s{where}; it may wait for a lock, a process "
                f"or a server that never answers, or loop forever. Fix it, or raise {key} if it really needs "
                "longer (rollout.on_error: retry or drop counts the episode as failed instead of stopping the run)")


class LoopBlocked(EnvTimeout):
    """An ``async def`` user call blocked its event loop (a blocking call: ``time.sleep``, a synchronous
    ``requests.get``, a lock) past its time limit, so no timer could end it; ``where`` says where the loop's thread
    was stuck. The episodes on that loop were abandoned (the loop is replaced for the next step)."""

    @staticmethod
    def _says(label: str, timeout_s: float, where: str, key: str) -> str:
        return (f"{label} did not return within {key} = {timeout_s:g} s: its event loop was blocked{where}, "
                "so nothing on it could run. `async def` code must not make blocking calls (time.sleep, "
                "requests.get, a lock's acquire, a long computation): await an async one (asyncio.sleep, "
                "httpx.AsyncClient), wrap it in `await asyncio.to_thread(...)`, or make the function a plain `def` "
                "(it then runs on a thread of its own). The episodes on that loop were abandoned "
                "(rollout.on_error: retry or drop counts them as failed instead of stopping the run)")


def blocked_loop_error(label: str, timeout_s: Optional[float],
                       key: str = ENV_TIMEOUT_KEY) -> Callable[[str], LoopBlocked]:
    """What a watched loop's waiter raises when ``label``'s call blocks it past ``timeout_s`` (``where`` → error)."""
    return lambda where: LoopBlocked(label, timeout_s or 0.0, where, key)


async def bounded_call(label: str, fn: Callable, args: Sequence[Any] = (), kwargs: Optional[Dict[str, Any]] = None,
                       timeout_s: Optional[float] = DEFAULT_ENV_TIMEOUT_S) -> Any:
    """``fn(*args, **kwargs)`` within ``timeout_s`` seconds: awaited when ``async def``, else on a daemon thread.

    Raises:
        EnvTimeout: it did not return in time (``label``, ``Class.method``, names it). Raised in the thread that
            waits for the event loop instead (as :class:`LoopBlocked`) when the call blocks the loop itself.
        ExitedInUserCode: a plain ``fn`` raised ``SystemExit`` or another non-``Exception``.
        Exception: what ``fn`` raised.
    """
    on_blocked = blocked_loop_error(label, timeout_s)
    try:
        if inspect.iscoroutinefunction(fn):
            return await await_within(fn(*args, **(kwargs or {})), timeout_s, on_blocked)
        return await call_in_daemon_thread(fn, args, kwargs, timeout_s, on_blocked)
    except StillRunning as exc:
        raise EnvTimeout(label, exc.timeout_s, exc.where) from None
