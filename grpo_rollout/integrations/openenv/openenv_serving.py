"""Serving an OpenEnv app (``rollout.kwargs.server``) from a thread of this process for the OpenEnv rollout
(:mod:`.openenv`), once per process, until :func:`close_openenv_servers`."""

from __future__ import annotations

import asyncio
import inspect
import logging
import socket
import threading
import time
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

from ...user_code.resolve import ImportSpecError, resolve_callable
from ...user_code.signatures import a_type
from ...rollouts.contract import RolloutError
from ...rollouts.run_end import on_run_end

_SERVED: Dict[str, Tuple[str, Any]] = {}
_LOCK = threading.Lock()


def serve_app(spec: str, base_dir: Optional[Path] = None, timeout_s: float = 60.0) -> str:
    """Serve the OpenEnv app ``spec`` (``module:app`` or ``path/file.py:app``) on a free local port from a thread of
    this process, once per process; return its address.

    Raises:
        RolloutError: it does not import or does not start within ``timeout_s``.
    """
    import uvicorn

    with _LOCK:
        if spec in _SERVED:
            return _SERVED[spec][0]
        try:
            app = spec if callable(spec) else resolve_callable(str(spec), base_dir)
        except ImportSpecError as exc:
            raise RolloutError(f"rollout.kwargs.server {spec!r}: {exc}") from exc
        if inspect.isclass(app) or not hasattr(app, "routes"):
            raise RolloutError(f"rollout.kwargs.server {spec} is {a_type(app)}, not an OpenEnv app (name the "
                               "app that create_app(...) returned)")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        # stopping it cancels requests still open after a second: one stuck in the environment's code (on the
        # server's thread pool) never ends, and the run's end (an error, Ctrl-C) would wait for it
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                               timeout_graceful_shutdown=1))
        logging.getLogger("uvicorn.error").addFilter(_no_disconnect_tracebacks)
        thread = threading.Thread(target=server.run, name=f"openenv-{port}", daemon=True)
        thread.start()
        deadline = time.monotonic() + timeout_s
        while not server.started and thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        if not server.started:
            server.should_exit = True
            raise RolloutError(f"the OpenEnv app {spec} did not start within {timeout_s:g} s")
        address = f"http://127.0.0.1:{port}"
        _SERVED[spec] = (address, (server, thread))
        return address


def _no_disconnect_tracebacks(record: logging.LogRecord) -> bool:
    """Drop the traceback openenv-core's server logs when it closes a WebSocket the client already closed (each
    episode's end), and what uvicorn says when the run's end cancels a request stuck in the environment's code (the
    CLI names that code as it exits); every other record passes."""
    exc = record.exc_info[1] if record.exc_info else None
    cancelled = isinstance(exc, asyncio.CancelledError) or "timeout graceful shutdown exceeded" in record.getMessage()
    return type(exc).__name__ != "WebSocketDisconnect" and not cancelled


#: Seconds the run's end waits for a served app's thread.
STOP_WAIT_S = 2.0


@on_run_end
def close_openenv_servers() -> None:
    """Stop the OpenEnv apps this process serves (the next rollout serves them again)."""
    with _LOCK:
        served = list(_SERVED.values())
        _SERVED.clear()
    for _, (server, thread) in served:
        server.should_exit = True
        # uvicorn stops within its graceful-shutdown second; then asyncio's shutdown may wait for an executor thread
        # stuck in the environment's own code (a hung reset): that daemon thread is left (and named at exit)
        thread.join(timeout=STOP_WAIT_S)
