"""Start a program that exits when its parent does: ``python orphan_guard.py PARENT_PID PROGRAM [ARGS...]``.

Spawn mode runs the vLLM server through this file (by path, so no package import slows it down). It asks Linux to
send the process SIGTERM when the parent dies (``PR_SET_PDEATHSIG``, which survives ``exec``), checks the parent is
still ``PARENT_PID`` (it may have died before the request), pins itself to the cores ``GRPO_ROLLOUT_SERVER_CORES``
names ("0,1": a server given a share of the machine; the program and every process it starts inherit the pinning),
then becomes ``PROGRAM``. Doing this here rather than in a ``preexec_fn`` keeps ``subprocess`` from running Python
code between ``fork`` and ``exec`` while other threads (the console spinner, HTTP pools) hold locks. Elsewhere than
Linux the request is skipped: the trainer's ``atexit`` hook and ``ManagedServer.stop`` remain the way a server is
stopped.
"""

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1
PINNED_CORES_ENV = "GRPO_ROLLOUT_SERVER_CORES"  # set by launch.server_command; not passed on to the program


def core_numbers(cores):
    """The set of core numbers that ``cores`` ("0,1") names."""
    return {int(c) for c in cores.split(",") if c.strip()}


def main(argv):
    """Arrange to receive SIGTERM when the parent dies, pin the cores, then exec ``argv[1:]``; exit 1 when the parent is
    gone."""
    if len(argv) < 2:
        sys.stderr.write("usage: orphan_guard.py PARENT_PID PROGRAM [ARGS...]\n")
        return 2
    parent = int(argv[0])
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:  # the parent died before the request took effect: do not start an orphan
        return 1
    cores = os.environ.pop(PINNED_CORES_ENV, "")
    if cores and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, core_numbers(cores))
    os.execvp(argv[1], argv[1:])
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
