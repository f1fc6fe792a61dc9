"""Calling user code with a time limit, from a coroutine: a plain function on a daemon thread of its own, an
``async def`` one as a task, given at most ``timeout_s`` seconds.

A thread cannot be killed: a plain call that runs past its limit is abandoned, still running, on its daemon thread.
Such a thread is never joined (not at the interpreter's exit either, unlike a ``ThreadPoolExecutor``'s or
``asyncio.to_thread``'s workers, which the exit and ``asyncio.run`` wait for), so a call stuck for good stops neither
the run's error nor Ctrl-C. The error says where the call was when its time ran out (``file:line in function``).
An ``async def`` call that blocks its event loop is caught by the loop's waiter instead (``on_blocked``,
:mod:`.loop_watch`).
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
import traceback
from typing import Any, Awaitable, Callable, Dict, Optional, Sequence

from .loop_watch import loop_deadline, thread_at, where_of

#: what a blocked event loop's waiter raises for a call: ``where`` (`` (at FILE:LINE in FUNCTION)``) → the error
OnBlocked = Optional[Callable[[str], BaseException]]


class StillRunning(TimeoutError):
    """A call did not return within its limit; it was cancelled (``async def``) or left running on its daemon thread.

    Attributes:
        timeout_s: the limit (seconds). where: `` (at FILE:LINE in FUNCTION)`` of the user code it was running when
            its time ran out, ``""`` when unknown.
    """

    def __init__(self, timeout_s: float, where: str = ""):
        super().__init__(f"did not return within {timeout_s:g} s{where}")
        self.timeout_s, self.where = timeout_s, where


class ExitedInUserCode(RuntimeError):
    """User code run on a daemon thread raised ``SystemExit``, ``KeyboardInterrupt`` or another ``BaseException``
    that is not an ``Exception``: handed to the caller as this (its message: ``TYPE: message``; ``__cause__``: the
    original), since inside asyncio such an exception would stop the event loop itself."""

    @classmethod
    def of(cls, exc: BaseException) -> "ExitedInUserCode":
        out = cls(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
        out.__cause__ = exc
        return out


def task_at(task: "asyncio.Task[Any]") -> str:
    """Where a pending task's coroutine waits now (its innermost ``await``, down the chain of coroutines it
    awaits), as :func:`~.loop_watch.where_of` says it."""
    frames, coro = [], task.get_coro()
    while coro is not None and len(frames) < 200:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is None:
            break
        frames.append((frame, frame.f_lineno))
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return where_of(traceback.StackSummary.extract(frames)) if frames else ""


async def call_in_daemon_thread(fn: Callable, args: Sequence[Any] = (), kwargs: Optional[Dict[str, Any]] = None,
                                timeout_s: Optional[float] = None, on_blocked: OnBlocked = None) -> Any:
    """``fn(*args, **kwargs)`` on a fresh daemon thread, in a copy of the caller's context (its context variables, as
    ``asyncio.to_thread`` gives them), awaited for at most ``timeout_s`` seconds (``None``: no limit); cancelling the
    caller (Ctrl-C in ``asyncio.run``) stops the wait at once. ``on_blocked``: the error the loop's waiter raises
    when other code blocks the loop past the limit (:func:`~.loop_watch.loop_deadline`).

    Raises:
        StillRunning: it did not return in time (the thread goes on, abandoned).
        ExitedInUserCode: it raised an exception that is not an ``Exception`` (e.g. ``sys.exit()``).
        Exception: what ``fn`` raised.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future = loop.create_future()
    context = contextvars.copy_context()

    def deliver(value: Any, exc: Optional[BaseException]) -> None:
        if not future.done():
            future.set_exception(exc) if exc is not None else future.set_result(value)

    def target() -> None:
        try:
            value, exc = context.run(fn, *args, **(kwargs or {})), None
        except Exception as e:  # noqa: BLE001 - handed to the awaiting coroutine
            value, exc = None, e
        except BaseException as e:  # noqa: BLE001 - SystemExit, KeyboardInterrupt from the user's own code
            value, exc = None, ExitedInUserCode.of(e)
        try:
            loop.call_soon_threadsafe(deliver, value, exc)
        except RuntimeError:  # the event loop is gone (the call was abandoned long ago): nobody is waiting
            pass

    thread = threading.Thread(target=target, name=f"user-{getattr(fn, '__qualname__', 'call')}", daemon=True)
    thread.start()
    try:
        with loop_deadline(timeout_s, on_blocked, asyncio.current_task()):
            return await asyncio.wait_for(future, timeout_s)
    except asyncio.TimeoutError:
        raise StillRunning(timeout_s or 0.0, thread_at(thread)) from None


async def await_within(awaitable: Awaitable[Any], timeout_s: Optional[float] = None,
                       on_blocked: OnBlocked = None) -> Any:
    """``await awaitable`` for at most ``timeout_s`` seconds (``None``: no limit), as a task that is cancelled when
    the time runs out or the caller is cancelled. ``on_blocked``: the error the loop's waiter raises when the
    awaitable blocks the loop itself past the limit (a blocking call in ``async def`` code: no timer fires then;
    :func:`~.loop_watch.loop_deadline`).

    Raises:
        StillRunning: it did not finish in time (saying where it was waiting).
        ExitedInUserCode: it raised an exception that is not an ``Exception`` (e.g. ``sys.exit()``).
        Exception: what the awaitable raised.
    """
    async def guarded() -> Any:
        try:
            return await awaitable
        except (Exception, asyncio.CancelledError):
            raise
        except BaseException as exc:  # noqa: BLE001 - e.g. sys.exit(): out of a task it would stop the event loop
            raise ExitedInUserCode.of(exc) from exc

    task = asyncio.ensure_future(guarded())
    try:
        with loop_deadline(timeout_s, on_blocked, task):
            done, _ = await asyncio.wait({task}, timeout=timeout_s)
    except asyncio.CancelledError:
        task.cancel()
        raise
    if task in done:
        return task.result()
    where = task_at(task)
    task.cancel()
    raise StillRunning(timeout_s or 0.0, where)
