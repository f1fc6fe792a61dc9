"""Scoring that may hang, with a bound: each item runs in a worker process that is killed when it runs longer than
its time limit, so a pathological completion costs at most that long, in any thread, and is counted.

Why a process and not a thread: a verifier stuck in a symbolic computation cannot be interrupted from another
thread, and the usual in-process bound (``signal.alarm``, math-verify's own) works only on the main thread, so a
reward called from a worker thread (``training.async_generation``, ``train()`` inside a notebook's event loop,
``asyncio.to_thread``) either fails or has no bound at all. A killable worker process is what NeMo Gym and
torchtitan do for their verifiers; the pool is pebble's ``ProcessPool``, which kills and replaces a worker whose task
runs past its ``timeout``.

The workers start from a fresh interpreter (``forkserver``), not a fork of the trainer, so they inherit none of its
threads, locks or GPU state. One pool per process (each training rank has its own), started on first use and stopped
at exit.
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import threading
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

#: Worker processes per pool unless a reward says otherwise (the rest of the cores generate and train).
DEFAULT_WORKERS = max(1, min(4, (os.cpu_count() or 2) // 2))


@dataclass
class BoundedResults:
    """The results of :func:`run_bounded`, in item order.

    Attributes:
        values: each item's result; ``None`` for an item that ran out of time.
        timed_out: indices of the items that ran longer than the limit (their worker was killed).
    """

    values: List[Any]
    timed_out: List[int]


_pools: Dict[Tuple[int, int], Any] = {}  # (pid, workers) → pool: a forked child never reuses its parent's pool
_lock = threading.Lock()


def _pool(workers: int, initializer: Optional[Callable[[], None]]) -> Any:
    from pebble import ProcessPool

    key = (os.getpid(), workers)
    with _lock:
        pool = _pools.get(key)
        if pool is None or not pool.active:
            pool = ProcessPool(max_workers=workers, initializer=initializer,
                               context=multiprocessing.get_context("forkserver"))
            _pools[key] = pool
        return pool


def run_bounded(fn: Callable[..., Any], items: Sequence[Tuple[Any, ...]], timeout_s: float,
                workers: int = DEFAULT_WORKERS, initializer: Optional[Callable[[], None]] = None) -> BoundedResults:
    """``fn(*item)`` for every item, in worker processes, each call given at most ``timeout_s`` seconds of run time.

    At most ``workers`` calls run at once, so a batch takes at most ``ceil(len(items) / workers) × timeout_s`` seconds
    more than its calls' own time however many of them hang. Safe to call from any thread.

    Args:
        fn: a module-level function (it is pickled by name), with picklable arguments and result.
        items: the argument tuples. timeout_s: seconds one call may run (> 0). workers: pool size (a pool per size
            and process is kept for reuse). initializer: run once in each new worker (e.g. quiet a library's log).

    Raises:
        RuntimeError: a worker died for another reason than the limit (killed by the OS, a crash), naming the item;
            or the workers could not start (a script without the ``if __name__ == "__main__":`` guard).
        Exception: what ``fn`` raised, as it raised it.
    """
    from concurrent.futures.process import BrokenProcessPool

    from pebble import ProcessExpired

    pool = _pool(workers, initializer)
    futures = [pool.schedule(fn, args=item, timeout=timeout_s) for item in items]
    values: List[Any] = []
    timed_out: List[int] = []
    for i, future in enumerate(futures):
        try:
            values.append(future.result())
        except FutureTimeout:
            values.append(None)
            timed_out.append(i)
        except ProcessExpired as exc:
            raise RuntimeError(f"the worker process scoring item {i} died ({exc}); the machine may be out of "
                               "memory") from exc
        except BrokenProcessPool as exc:
            raise RuntimeError(f"the worker processes that score with a time limit could not start ({exc}). A script "
                               "that starts training must keep its top-level code under `if __name__ == "
                               "\"__main__\":` (Python's rule for worker processes: each one imports the main "
                               "module); the error above, from a worker, says more") from exc
    return BoundedResults(values, timed_out)


@atexit.register
def _stop_pools() -> None:
    for pool in _pools.values():
        pool.stop()
        pool.join(timeout=5)
    _pools.clear()
