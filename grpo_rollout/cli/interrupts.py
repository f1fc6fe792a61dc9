"""Ctrl-C and SIGTERM in the commands that run user code (``train``, ``eval``, ``validate-config --dry-run``): the first
one ends the command within seconds, whatever thread user code is stuck in.

- :func:`interrupts_raise`: either signal raises ``KeyboardInterrupt`` in the main thread, wherever it waits. Python's
  own SIGINT handler does that too, but ``asyncio.run`` swaps it for one that only cancels its running task, which
  cannot end while a plain function is stuck inside it: the first Ctrl-C seemed to do nothing. ``asyncio.run`` leaves
  a handler of the program's own in place. The command's clean-up then runs as for any interrupt (the finished steps
  saved, the vLLM server stopped).
- :func:`exit_leaving_stuck_threads`: after that clean-up, a thread the interpreter's exit would wait for (not a
  daemon: a ``ThreadPoolExecutor`` worker of the user's own, stuck in their code) would keep the process alive, and a
  second signal would print "Exception ignored in: <module 'threading'>"; the process ends without waiting for it.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from contextlib import contextmanager
from typing import Any, Iterator


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


@contextmanager
def interrupts_raise() -> Iterator[None]:
    """Within the block, SIGINT (Ctrl-C) and SIGTERM (``kill``, a job scheduler) raise ``KeyboardInterrupt`` in the
    main thread, also while ``asyncio.run`` runs there; the previous handlers come back after it. Off the main
    thread (where handlers cannot be set) it changes nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, _interrupt) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def exit_leaving_stuck_threads(code: int, grace_s: float = 2.0) -> None:
    """After an interrupted command has cleaned up: give the threads the interpreter's exit would wait for (those
    that are not daemons) ``grace_s`` seconds in all; if one still runs, flush the output and end the process now with
    exit status ``code`` (``os._exit``: no exit handler waits on it). Otherwise return, for a normal exit."""
    deadline = time.monotonic() + grace_s
    me = threading.current_thread()
    for thread in threading.enumerate():
        if thread is not me and not thread.daemon:
            thread.join(max(0.0, deadline - time.monotonic()))
    if any(t is not me and not t.daemon and t.is_alive() for t in threading.enumerate()):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
