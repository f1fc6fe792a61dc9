"""Processes an agent left running: an agent runs in the training process, so a program it started (a shell tool, a
sandbox, a browser) and did not wait for is a child of the trainer and outlives its episode, step after step.

While at least one ``agent_rollout`` call is playing, the process's descendants that exist when the first call
starts are known; when the last call ends, every descendant that appeared since and is still running is what the
agents left: it is terminated (killed after :data:`GRACE_S`), and the run is told what it was. With streaming
rollouts, calls overlap; the check runs whenever none is playing, and at the run's end.
"""

from __future__ import annotations

import threading
import warnings
from typing import List, Set

#: Seconds a left-running process has between SIGTERM and SIGKILL.
GRACE_S = 3.0


def _descendants() -> list:
    import psutil

    try:
        return psutil.Process().children(recursive=True)
    except psutil.Error:
        return []


def _said(process: object) -> str:
    try:
        command = " ".join(process.cmdline()) or process.name()  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - it ended meanwhile, or is not ours to read
        command = "?"
    return f"pid {process.pid} (`{command[:120]}`)"  # type: ignore[attr-defined]


class LeftoverWatch:
    """Counts the ``agent_rollout`` calls playing; :meth:`leave` ends the processes the last one left behind."""

    def __init__(self) -> None:
        self._lock, self._playing, self._known = threading.Lock(), 0, set()  # type: Set[int]

    def enter(self) -> None:
        """A call starts playing (the first one notes the processes that already run)."""
        with self._lock:
            if self._playing == 0:
                self._known = {p.pid for p in _descendants()}
            self._playing += 1

    def leave(self, agent: str) -> List[str]:
        """A call ended; when none is playing any more, end what the agents started and left running.

        Returns:
            what was ended (``pid N (`command`)``), also said as a warning naming ``agent``.
        """
        import psutil

        with self._lock:
            self._playing -= 1
            if self._playing > 0:
                return []
            left = [p for p in _descendants() if p.pid not in self._known]
        if not left:
            return []
        said = [_said(p) for p in left]
        for process in left:
            try:
                process.terminate()
            except psutil.Error:
                pass
        _, alive = psutil.wait_procs(left, timeout=GRACE_S)
        for process in alive:
            try:
                process.kill()
            except psutil.Error:
                pass
        warnings.warn(f"the agent {agent} left {len(said)} process(es) running after its episodes, now ended: "
                      f"{', '.join(said)}; wait for the programs an episode starts (or end them) before it returns",
                      stacklevel=2)
        return said


#: The process's one watch (the endpoint is one per process too).
WATCH = LeftoverWatch()
