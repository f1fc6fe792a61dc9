"""Running a coroutine to completion from synchronous code, wherever that code is called from.

The trainer is synchronous, but rollouts, reward functions and tools may be ``async def``. Every coroutine runs on an
event loop of a daemon thread of its own, never the caller's: a fresh one per call (:func:`run_coroutine`), which
also works inside a running loop (a Jupyter notebook calling ``train()``), or a :class:`SharedLoop`. The caller waits
for the result with the loop watched (:mod:`.loop_watch`): user code that blocks the loop (a blocking call in
``async def`` code) past its time limit raises the call's error in the caller instead of hanging it, the loop is
abandoned, and Ctrl-C ends the wait at once whatever the loop does.

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
from typing import Any, Awaitable, Iterator, Optional

from .loop_watch import LoopWatch

#: seconds an interrupted wait gives its task to finish being cancelled (its in-flight requests closed)
CANCEL_GRACE_S = 2.0


class SharedLoop:
    """An event loop running on its own daemon thread until :meth:`close`. When user code blocks it past a time
    limit (:mod:`.loop_watch`), it is abandoned on its thread and the next :meth:`run` starts a fresh one."""

    def __init__(self, name: str = "grpo-rollout-shared-loop"):
        self.name = name
        self._lock = threading.Lock()
        self._start()

    def _start(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._serve, name=self.name, daemon=True)
        self.watch = LoopWatch(self.loop, self.thread)
        self.given_up = False  # an interrupted wait's task did not end: the loop is stuck in code without a limit
        self.thread.start()
        self.loop.call_soon_threadsafe(self.watch.start)

    def _serve(self) -> None:
        """The loop's thread. A ``KeyboardInterrupt`` or ``SystemExit`` raised in a task (a reward function's, say)
        leaves ``run_forever`` (asyncio re-raises them) before the task's waiters are told: it is kept for the
        waiter (:meth:`LoopWatch.wait`), which raises it in the caller, as the caller's own code would have."""
        loop, watch = self.loop, self.watch
        try:
            loop.run_forever()
        except BaseException as exc:  # noqa: BLE001 - handed to the waiter
            watch.escaped = exc

    def run(self, coro: Awaitable[Any]) -> Any:
        """Run ``coro`` on the loop, in a copy of the caller's context (its context variables: e.g. the weight
        versions being recorded), and wait for its result in the calling thread (its exception is raised here).

        Raises:
            BaseException: what ``coro`` raised; the error of a user call that blocked the loop past its time limit
                (e.g. ``EnvTimeout``; the loop is then abandoned); ``KeyboardInterrupt`` in the caller (the task is
                cancelled, given :data:`CANCEL_GRACE_S` seconds).
        """
        with self._lock:
            if self._stuck() or self.loop.is_closed():
                self._start()  # the last one was stuck in user code: left on its daemon thread
            loop, watch = self.loop, self.watch
        context = contextvars.copy_context()
        done: concurrent.futures.Future = concurrent.futures.Future()
        started: list = []

        def start() -> None:
            task = context.run(asyncio.ensure_future, coro, loop=loop)  # in a copy of the caller's context
            started.append(task)
            # a cancelled task is an exception here: Future.cancel() would not wake concurrent.futures.wait()
            task.add_done_callback(lambda t: done.set_exception(concurrent.futures.CancelledError()) if t.cancelled()
                                   else done.set_exception(t.exception()) if t.exception() is not None else
                                   done.set_result(t.result()))

        loop.call_soon_threadsafe(start)
        try:
            return watch.wait(done)
        except BaseException:
            if watch.found is None and watch.escaped is None and not done.done():  # interrupted: cancel the task
                loop.call_soon_threadsafe(lambda: [t.cancel() for t in started])
                concurrent.futures.wait([done], timeout=CANCEL_GRACE_S)
                self.given_up = self.given_up or (loop is self.loop and not done.done())
            if watch.found is not None:
                self._abandon(loop)
            raise

    def _stuck(self) -> bool:
        return self.watch.found is not None or self.given_up or not self.thread.is_alive()

    @staticmethod
    def _abandon(loop: asyncio.AbstractEventLoop) -> None:
        """Leave ``loop`` on its thread; should it ever get free, its tasks are cancelled (their ``finally`` blocks
        run) and it stops."""
        try:
            asyncio.run_coroutine_threadsafe(_shutdown(loop), loop)
        except RuntimeError:  # closed already
            pass

    def close(self, timeout_s: float = 10.0) -> None:
        """Cancel the tasks still running (their callers get ``CancelledError``), stop the loop and close it; waits
        ``timeout_s`` seconds at most (a loop stuck in user code is left on its daemon thread)."""
        loop, thread = self.loop, self.thread
        if loop.is_closed():
            return
        if self._stuck():
            self._abandon(loop)
            return
        asyncio.run_coroutine_threadsafe(_shutdown(loop), loop)
        thread.join(timeout=timeout_s)
        if not thread.is_alive():
            loop.close()


async def _shutdown(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel every other task of the loop, wait for them, close its async generators, let go of its default
    executor's threads without waiting for them (one stuck in user code would hold the caller, as ``asyncio.run``'s
    shutdown does), and stop the loop."""
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await asyncio.sleep(0)  # the tasks' done callbacks (which answer the waiting callers) run first
    await loop.shutdown_asyncgens()
    executor = getattr(loop, "_default_executor", None)
    if executor is not None:
        executor.shutdown(wait=False)
    loop.stop()


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
    """Run ``coro`` to completion and return its result (or raise its exception), on a fresh event loop of a daemon
    thread (also when the caller is inside a running event loop, e.g. a notebook), watched as
    :meth:`SharedLoop.run` says. With ``shared`` and a :func:`shared_loop` around the call, it runs on that loop."""
    loop = _SHARED.get() if shared else None
    if loop is not None:
        return loop.run(coro)
    fresh = SharedLoop("grpo-rollout-coroutine")
    try:
        return fresh.run(coro)
    finally:
        fresh.close(timeout_s=CANCEL_GRACE_S)
