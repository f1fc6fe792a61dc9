"""What the rollouts' integrations leave running until a run ends (an MCP server's connection, an OpenEnv app the
run serves): each registers its own clean-up here when it is imported (:func:`on_run_end`), and whoever ends the run
calls :func:`end_run` once, so nothing above the rollouts needs to know which integrations a run used."""

from __future__ import annotations

import threading
from typing import Callable, List

_CLEANUPS: List[Callable[[], None]] = []
_LOCK = threading.Lock()


def on_run_end(cleanup: Callable[[], None]) -> Callable[[], None]:
    """Register ``cleanup`` (no arguments; it must be safe to call again, and when nothing is open) for
    :func:`end_run`; returns it, so it can decorate the function."""
    with _LOCK:
        if cleanup not in _CLEANUPS:
            _CLEANUPS.append(cleanup)
    return cleanup


def end_run() -> None:
    """Run every registered clean-up, in the order they were registered."""
    with _LOCK:
        cleanups = list(_CLEANUPS)
    for cleanup in cleanups:
        cleanup()
