"""Scoring that may hang, with a bound: each item runs in a worker process that is killed when it runs longer than
its time limit, so a pathological completion costs at most that long, in any thread, and is counted.

Why a process and not a thread: a verifier stuck in a symbolic computation cannot be interrupted from another
thread, and the usual in-process bound (``signal.alarm``, math-verify's own) works only on the main thread, so a
reward called from a worker thread (``training.async_generation``, ``train()`` inside a notebook's event loop,
``asyncio.to_thread``) either fails or has no bound at all. A killable worker process is what NeMo Gym and
torchtitan do for their verifiers.

Why not ``multiprocessing`` (or a pool built on it, such as pebble's): its ``spawn`` and ``forkserver`` workers
import the parent's main script first, so a user's training script without an ``if __name__ == "__main__":`` guard
started a second training run inside the scoring worker (loading the model again) before failing; and ``fork``
copies a trainer's threads and locks. A worker here is a fresh interpreter running
:mod:`grpo_rollout.rewards.bounded_worker`, which imports only the scoring function's module. It talks over its
stdin/stdout (length-prefixed pickles); each call's time is counted from the moment the request is written, after
the worker's start-up and ``warm_up`` (imports), so a limit of a second is a second of scoring.
"""

from __future__ import annotations

import atexit
import os
import pickle
import select
import struct
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

#: Worker processes per pool unless a reward says otherwise (the rest of the cores generate and train).
DEFAULT_WORKERS = max(1, min(4, (os.cpu_count() or 2) // 2))
#: Seconds a new worker may take to start and run its ``warm_up`` (imports) before it is said to have failed.
START_TIMEOUT_S = 120.0
_HEADER = struct.Struct("<Q")


@dataclass
class BoundedResults:
    """The results of :func:`run_bounded`, in item order.

    Attributes:
        values: each item's result; ``None`` for an item that ran out of time.
        timed_out: indices of the items that ran longer than the limit (their worker was killed).
    """

    values: List[Any]
    timed_out: List[int]


class WorkerError(RuntimeError):
    """A worker process could not start, died, or answered something unreadable."""


Ref = Tuple[str, str, Optional[str]]  # how a worker finds a function: (module, qualified name, the module's file)


def _ref(fn: Optional[Callable]) -> Optional[Ref]:
    """How a worker imports ``fn``: by its module's name, or from the module's file when that name is not importable
    (a reward file named by path, ``path/file.py:function``, is loaded under a name of grpo-rollout's own)."""
    if fn is None:
        return None
    module, name = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    if not module or module == "__main__" or "<" in name:
        raise ValueError(f"{fn!r} cannot be run in a worker process: it must be a module-level function of an "
                         "importable module or file (not the main script, a lambda or a nested function)")
    return module, name, getattr(sys.modules.get(module), "__file__", None)


class _Worker:
    """One worker process: start, call with a deadline, kill."""

    def __init__(self, warm_up: Optional[Ref]):
        # the parent's import path, so that the worker finds what the parent imported (a notebook's added folders)
        path = os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))
        self.proc = subprocess.Popen([sys.executable, "-m", "grpo_rollout.rewards.bounded_worker"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     env={**os.environ, "PYTHONPATH": path})
        self._send(("warm_up", warm_up))
        answer = self._receive(time.monotonic() + START_TIMEOUT_S)
        if answer is None or answer[0] != "ready":
            self.kill()
            raise WorkerError("the scoring worker failed to start: " + (answer[1] if answer else
                              f"not ready within {START_TIMEOUT_S:g} s (bounded.START_TIMEOUT_S)"))

    def _send(self, message: Any) -> None:
        data = pickle.dumps(message)
        try:
            self.proc.stdin.write(_HEADER.pack(len(data)) + data)
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise WorkerError(f"the scoring worker (pid {self.proc.pid}) is gone: {exc}") from exc

    def _read(self, size: int, deadline: float) -> Optional[bytes]:
        """``size`` bytes of the worker's answer, or ``None`` when ``deadline`` passes first."""
        out, fd = b"", self.proc.stdout.fileno()
        while len(out) < size:
            left = None if deadline == float("inf") else deadline - time.monotonic()
            if (left is not None and left <= 0) or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, size - len(out))
            if not chunk:
                raise WorkerError(f"the scoring worker (pid {self.proc.pid}) died (exit code {self.proc.wait()}); "
                                  "the machine may be out of memory")
            out += chunk
        return out

    def _receive(self, deadline: float) -> Optional[Tuple[str, Any]]:
        header = self._read(_HEADER.size, deadline)
        if header is None:
            return None
        body = self._read(_HEADER.unpack(header)[0], float("inf"))  # once it answers, the answer is read whole
        return pickle.loads(body)

    def call(self, fn: Ref, args: Tuple[Any, ...], timeout_s: float) -> Optional[Tuple[str, Any]]:
        """``fn(*args)`` in the worker: ``("ok", value)`` or ``("error", exception)``; ``None`` when it ran longer
        than ``timeout_s`` (the caller then kills the worker)."""
        self._send(("call", (fn, args)))
        return self._receive(time.monotonic() + timeout_s)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            try:
                pipe.close()
            except OSError:
                pass


class _Pool:
    """``size`` workers started on demand, each driven by one thread; a killed worker is replaced by the next item
    that needs it."""

    def __init__(self, size: int, warm_up: Optional[Ref]):
        self.size, self.warm_up = size, warm_up
        self.workers: List[Optional[_Worker]] = [None] * size
        self.lock = threading.Lock()  # one batch at a time

    def run(self, fn: Ref, items: Sequence[Tuple[Any, ...]], timeout_s: float) -> List[Any]:
        results: List[Any] = [None] * len(items)
        queue = iter(range(len(items)))
        queue_lock = threading.Lock()

        def drive(slot: int) -> None:
            while True:
                with queue_lock:
                    i = next(queue, None)
                if i is None:
                    return
                if self.workers[slot] is None:
                    self.workers[slot] = _Worker(self.warm_up)
                try:
                    answer = self.workers[slot].call(fn, tuple(items[i]), timeout_s)
                except WorkerError:  # it died: the next call starts a fresh one
                    self.workers[slot].kill()
                    self.workers[slot] = None
                    raise
                if answer is None:  # over the limit: kill it; the next item starts a fresh one
                    self.workers[slot].kill()
                    self.workers[slot] = None
                results[i] = answer

        with self.lock, ThreadPoolExecutor(self.size, thread_name_prefix="grpo-rollout-bounded") as threads:
            for future in [threads.submit(drive, slot) for slot in range(min(self.size, len(items)))]:
                future.result()
        return results

    def close(self) -> None:
        for i, worker in enumerate(self.workers):
            if worker is not None:
                worker.kill()
                self.workers[i] = None


_pools: Dict[Tuple[int, int, Optional[Ref]], _Pool] = {}  # (pid, size, warm_up): not a parent's pool
_pools_lock = threading.Lock()


def run_bounded(fn: Callable[..., Any], items: Sequence[Tuple[Any, ...]], timeout_s: float,
                workers: int = DEFAULT_WORKERS, warm_up: Optional[Callable[[], None]] = None) -> BoundedResults:
    """``fn(*item)`` for every item, in worker processes, each call given at most ``timeout_s`` seconds.

    At most ``workers`` calls run at once, so a batch takes at most ``ceil(len(items) / workers) × timeout_s``
    seconds more than its calls' own time however many of them hang (plus a new worker's start for each one
    killed). Safe to call from any thread; concurrent calls take turns.

    Args:
        fn: a module-level function of an importable module or of a file (a reward file named by path), with
            picklable arguments and result.
        items: the argument tuples. timeout_s: seconds one call may run (> 0). workers: pool size (>= 1; a pool per
            size, ``warm_up`` and process is kept for reuse). warm_up: a module-level function each new worker
            runs once before its first call, outside any time limit (imports, caches).

    Raises:
        ValueError: ``fn`` or ``warm_up`` is not importable by a worker, or ``timeout_s``/``workers`` out of range.
        WorkerError: a worker could not start or died for another reason than the limit.
        Exception: what ``fn`` raised, as it raised it.
    """
    if not (isinstance(timeout_s, (int, float)) and not isinstance(timeout_s, bool) and timeout_s > 0):
        raise ValueError(f"timeout_s must be a number of seconds > 0, got {timeout_s!r}")
    if not (isinstance(workers, int) and not isinstance(workers, bool) and workers >= 1):
        raise ValueError(f"workers must be a whole number >= 1, got {workers!r}")
    target, warm = _ref(fn), _ref(warm_up)
    key = (os.getpid(), workers, warm)
    with _pools_lock:
        pool = _pools.setdefault(key, _Pool(workers, warm))
    answers = pool.run(target, items, float(timeout_s))
    values: List[Any] = []
    for answer in answers:
        if answer is not None and answer[0] == "error":
            raise answer[1]
        values.append(None if answer is None else answer[1])
    return BoundedResults(values, [i for i, answer in enumerate(answers) if answer is None])


@atexit.register
def _stop_pools() -> None:
    for pool in _pools.values():
        pool.close()
    _pools.clear()
