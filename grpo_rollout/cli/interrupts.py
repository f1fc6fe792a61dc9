"""Ctrl-C and SIGTERM in the commands that run user code (``train``, ``eval``, ``validate-config --dry-run``): the first
one ends the command within seconds, whatever thread user code is stuck in.

- :func:`interrupts_raise`: either signal raises ``KeyboardInterrupt`` in the main thread, wherever it waits. Python's
  own SIGINT handler does that too, but ``asyncio.run`` swaps it for one that only cancels its running task, which
  cannot end while a plain function is stuck inside it: the first Ctrl-C seemed to do nothing. ``asyncio.run`` leaves
  a handler of the program's own in place. The command's clean-up then runs as for any interrupt (the finished steps
  saved, the vLLM server stopped).
- :func:`exit_leaving_stuck_threads`: after that clean-up (and after a command's error, e.g. ``EnvTimeout``), a
  thread the interpreter's exit would wait for (one that is not a daemon, or a ``ThreadPoolExecutor`` worker, daemon
  or not: an agent's own pool, ``asyncio.to_thread``, an OpenEnv server's, stuck in user code) would keep the process
  alive, and a second signal would print "Exception ignored in: <module 'threading'>"; the process ends without
  waiting for it, naming the user function each such thread is stuck in.
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
    """After a command that failed or was interrupted has cleaned up: give the threads the interpreter's exit would
    wait for (those that are not daemons, and thread pool workers still running a call:
    :func:`~grpo_rollout.user_code.left_running.exit_blockers`) ``grace_s`` seconds in all; if one still runs, say
    on stderr which user function each is stuck in, flush the output and end the process now with exit status
    ``code`` (``os._exit``: no exit handler waits on it). Otherwise return, for a normal exit."""
    from ..user_code.left_running import describe, exit_blockers

    deadline = time.monotonic() + grace_s
    for thread in exit_blockers():
        thread.join(max(0.0, deadline - time.monotonic()))
    left = exit_blockers()
    if left:
        sys.stdout.flush()
        print("Exiting without waiting for user code still running: " + "; ".join(describe(t) for t in left),
              file=sys.stderr, flush=True)
        os._exit(code)
