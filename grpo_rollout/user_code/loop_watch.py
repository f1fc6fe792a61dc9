"""Time limits that hold while user code blocks its event loop.

An ``async def`` user function that makes a blocking call (``time.sleep``, a synchronous ``requests.get``, a lock's
``acquire``) freezes the event loop it runs on: no timer fires there, so ``asyncio.wait_for`` cannot end it, and a
caller waiting for that loop waited for good. So the loops that run user code (:mod:`.coroutines`) each run on a
daemon thread of their own with a :class:`LoopWatch`: a heartbeat the loop ticks every :data:`TICK_S` seconds, and
the deadlines of the user calls running on it (:func:`loop_deadline`, entered by
:func:`~.deadlines.await_within` and :func:`~.deadlines.call_in_daemon_thread`). The thread that waits for the loop's
result (:meth:`LoopWatch.wait`) looks every :data:`POLL_S` seconds: once the loop has not ticked for
:data:`GRACE_S` seconds and a deadline passed more than :data:`GRACE_S` seconds ago, the loop is stuck in user code. The
waiter raises that call's error, naming where the loop's thread is stuck (``file:line in function`` from
``sys._current_frames()``), and the loop is abandoned on its daemon thread (the owner starts a fresh one). A waiter
that is interrupted (Ctrl-C) stops waiting at once, whatever the loop does.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import sys
import threading
import time
import traceback
import weakref
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, Optional, Sequence, Tuple

from .signatures import user_frame

#: seconds between two heartbeats of a watched loop
TICK_S = 0.1
#: seconds a loop may stay unresponsive past a deadline before it counts as stuck (a busy loop catches up sooner)
GRACE_S = 0.5
#: seconds between two looks of a waiting thread
POLL_S = 0.2


def where_of(stack: Sequence[Any]) -> str:
    """`` (at FILE:LINE in FUNCTION)`` of the user code's innermost frame of ``stack`` (``FrameSummary`` list)."""
    found = user_frame(stack)
    return f" (at {found.filename}:{found.lineno} in {found.name})" if found is not None else ""


def thread_at(thread: threading.Thread) -> str:
    """Where ``thread`` runs now, as :func:`where_of` says it (``""`` when it has finished)."""
    frame = sys._current_frames().get(thread.ident) if thread.ident is not None else None
    return where_of(traceback.extract_stack(frame)) if frame is not None else ""


@dataclass
class _Deadline:
    at: float  # time.monotonic() when it passes
    error_of: Callable[[str], BaseException]  # where → the error to raise
    task: Optional["asyncio.Task[Any]"]  # the task that runs the call


class LoopWatch:
    """The heartbeat and the deadlines of one event loop that runs on ``thread``. :meth:`start` from the loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, thread: threading.Thread):
        self.loop, self.thread = loop, thread
        self.beat = time.monotonic()
        self.found: Optional[Tuple[_Deadline, str]] = None  # once the loop is stuck: whose call, and where
        self.escaped: Optional[BaseException] = None  # what ended the loop's thread (a task's KeyboardInterrupt)
        self._deadlines: Dict[object, _Deadline] = {}
        self._lock = threading.Lock()
        _WATCHES[loop] = self

    def start(self) -> None:
        """Tick now and every :data:`TICK_S` seconds (call it on the loop)."""
        self.beat = time.monotonic()
        self.loop.call_later(TICK_S, self.start)

    def add(self, key: object, deadline: _Deadline) -> None:
        with self._lock:
            self._deadlines[key] = deadline

    def remove(self, key: object) -> None:
        with self._lock:
            self._deadlines.pop(key, None)

    def stuck(self, now: Optional[float] = None) -> Optional[BaseException]:
        """The error to raise when the loop is stuck past a deadline (once found, every later call returns one
        too: each waiter on the loop raises it), else ``None``. It is the error of the call the loop is running, when
        that one has a deadline, else of the call whose deadline passed first; either way it says where the loop's
        thread is."""
        now = time.monotonic() if now is None else now
        with self._lock:
            if self.found is None and now - self.beat > GRACE_S:
                late = [d for d in self._deadlines.values() if now > d.at + GRACE_S]
                running = asyncio.current_task(self.loop) if late else None  # the task the loop is stuck in
                chosen = next((d for d in self._deadlines.values() if running is not None and d.task is running),
                              min(late, key=lambda d: d.at) if late else None)
                self.found = (chosen, thread_at(self.thread)) if chosen is not None else None
            found = self.found
        return found[0].error_of(found[1]) if found is not None else None

    def wait(self, future: "concurrent.futures.Future[Any]") -> Any:
        """``future``'s result (a task on this loop), looking every :data:`POLL_S` seconds whether the loop is stuck.

        Raises:
            BaseException: the stuck call's error (:meth:`stuck`); what the task raised (also a
                ``KeyboardInterrupt`` or ``SystemExit`` that ended the loop's thread: :attr:`escaped`);
                ``KeyboardInterrupt`` in the waiting thread.
        """
        while True:
            concurrent.futures.wait([future], timeout=POLL_S)
            if future.done():
                return future.result()
            if not self.thread.is_alive() and self.thread.ident is not None:  # the loop ended under its tasks
                raise self.escaped or RuntimeError(f"the event loop of thread {self.thread.name} stopped before "
                                                   "the call ended")
            error = self.stuck()
            if error is not None:
                raise error


_WATCHES: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopWatch]" = weakref.WeakKeyDictionary()


@contextmanager
def loop_deadline(timeout_s: Optional[float], error_of: Optional[Callable[[str], BaseException]],
                  task: Optional["asyncio.Task[Any]"] = None) -> Iterator[None]:
    """Within the block (in a coroutine), a user call running as ``task`` must end within ``timeout_s`` seconds,
    even if it blocks the loop: past that (and :data:`GRACE_S`), the loop's waiter raises ``error_of(where)``
    (``where``: `` (at FILE:LINE in FUNCTION)`` of the loop's thread). Nothing happens on a loop nobody watches, or
    with no ``timeout_s`` or ``error_of``."""
    watch = _WATCHES.get(asyncio.get_running_loop())
    if watch is None or timeout_s is None or error_of is None:
        yield
        return
    key = object()
    watch.add(key, _Deadline(time.monotonic() + timeout_s, error_of, task))
    try:
        yield
    finally:
        watch.remove(key)
