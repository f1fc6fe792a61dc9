"""The threads user code left running that would keep the process from exiting, and what each is stuck in.

The interpreter's exit waits for every thread that is not a daemon, and, before that, joins every worker of every
``concurrent.futures.ThreadPoolExecutor`` (daemon or not: an exit hook of the module, ``threading._register_atexit``),
including ``asyncio.to_thread``'s and an OpenEnv server's. A worker waiting for work ends at once then; one still
running a call stuck in user code (an agent's own pool, a hung environment behind a served app, a tool) never does,
and the process stayed alive after its error or Ctrl-C until it was killed.
"""

from __future__ import annotations

import sys
import threading
import traceback
from pathlib import Path
from typing import List, Optional

from .signatures import user_frame

_POOL = str(Path("concurrent", "futures", "thread.py"))


def _stack(thread: threading.Thread) -> Optional[traceback.StackSummary]:
    frame = sys._current_frames().get(thread.ident) if thread.ident is not None else None
    return traceback.extract_stack(frame) if frame is not None else None


def _pool_state(stack: traceback.StackSummary) -> Optional[str]:
    """``"busy"`` or ``"idle"`` for a thread pool's worker (running a call, or waiting for one), else ``None``."""
    in_pool = [f.name for f in stack if f.filename.endswith(_POOL)]
    if "_worker" not in in_pool:
        return None
    return "busy" if "run" in in_pool else "idle"


def exit_blockers() -> List[threading.Thread]:
    """The live threads, other than the calling one, that the interpreter's exit would wait for: those that are not
    daemons (an idle pool worker aside: the exit tells it to end), and the pool workers running a call."""
    me, out = threading.current_thread(), []
    for thread in threading.enumerate():
        if thread is me or thread is threading.main_thread() or not thread.is_alive():
            continue
        stack = _stack(thread)
        state = _pool_state(stack) if stack is not None else None
        if state == "busy" or (not thread.daemon and state != "idle"):
            out.append(thread)
    return out


def describe(thread: threading.Thread) -> str:
    """What ``thread`` is stuck in: ``FUNCTION at FILE:LINE`` of its innermost user frame (else its innermost frame),
    then ``(thread NAME[, a thread pool's worker])``."""
    stack = _stack(thread)
    kind = ", a thread pool's worker" if stack is not None and _pool_state(stack) else ""
    found = user_frame(stack) if stack else None
    at = f"{found.name} at {found.filename}:{found.lineno} " if found is not None else ""
    return f"{at}(thread {thread.name}{kind})"
