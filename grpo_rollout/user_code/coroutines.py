"""Running a coroutine to completion from synchronous code, wherever that code is called from.

The trainer is synchronous, but rollouts, reward functions and tools may be ``async def``; ``asyncio.run`` refuses to
start while an event loop is running in the thread (a Jupyter notebook calling ``train()``), so such a call runs on a
fresh loop in a helper thread instead.

Streaming rollouts run many groups at once on worker threads; an ``async def`` rollout of each then runs on one shared
event loop (:class:`SharedLoop`, chosen with :func:`shared_loop` around the call; ``run_coroutine(coro, shared=True)``),
so its awaits interleave with the other groups' and what it keeps between calls (an async client) stays on one loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import threading
from contextlib import contextmanager
from typing import Any, Awaitable, Dict, Iterator, Optional


class SharedLoop:
    """An event loop running on its own daemon thread until :meth:`close`."""

    def __init__(self, name: str = "grpo-rollout-shared-loop"):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self.thread.start()

    def run(self, coro: Awaitable[Any]) -> Any:
        """Run ``coro`` on the loop, in a copy of the caller's context (its context variables: e.g. the weight
        versions being recorded), and wait for its result in the calling thread (its exception is raised here)."""
        context = contextvars.copy_context()
        done: concurrent.futures.Future = concurrent.futures.Future()

        def start() -> None:
            task = context.run(asyncio.ensure_future, coro, loop=self.loop)  # in a copy of the caller's context
            task.add_done_callback(lambda t: done.cancel() if t.cancelled() else
                                   done.set_exception(t.exception()) if t.exception() is not None else
                                   done.set_result(t.result()))

        self.loop.call_soon_threadsafe(start)
        return done.result()

    def close(self) -> None:
        """Cancel the tasks still running (their callers get ``CancelledError``), stop the loop and close it."""
        async def shutdown() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await asyncio.sleep(0)  # the tasks' done callbacks (which answer the waiting callers) run first
            self.loop.stop()

        if self.loop.is_closed():
            return
        asyncio.run_coroutine_threadsafe(shutdown(), self.loop)
        self.thread.join(timeout=10)
        if not self.thread.is_alive():
            self.loop.close()


_SHARED: contextvars.ContextVar[Optional[SharedLoop]] = contextvars.ContextVar("grpo_rollout_shared_loop",
                                                                               default=None)


@contextmanager
def shared_loop(loop: Optional[SharedLoop]) -> Iterator[None]:
    """Within the block (this thread), ``run_coroutine(coro, shared=True)`` runs ``coro`` on ``loop``."""
    token = _SHARED.set(loop)
    try:
        yield
    finally:
        _SHARED.reset(token)


def run_coroutine(coro: Awaitable[Any], shared: bool = False) -> Any:
    """Run ``coro`` to completion and return its result (or raise its exception), also when the caller is inside a
    running event loop (e.g. a notebook): then it runs on a fresh loop in a helper thread, which the caller waits
    for. With ``shared`` and a :func:`shared_loop` around the call, it runs on that loop instead."""
    loop = _SHARED.get() if shared else None
    if loop is not None:
        return loop.run(coro)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    box: Dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(coro)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = exc

    # a daemon thread: after Ctrl-C the interpreter's exit does not wait for a coroutine still stuck in it
    thread = threading.Thread(target=target, name="grpo-rollout-coroutine", daemon=True)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]
