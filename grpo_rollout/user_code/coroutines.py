"""Running a coroutine to completion from synchronous code, wherever that code is called from.

The trainer is synchronous, but rollouts, reward functions and tools may be ``async def``; ``asyncio.run`` refuses to
start while an event loop is running in the thread (a Jupyter notebook calling ``train()``), so such a call runs on a
fresh loop in a helper thread instead.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Awaitable, Dict


def run_coroutine(coro: Awaitable[Any]) -> Any:
    """Run ``coro`` to completion and return its result (or raise its exception), also when the caller is inside a
    running event loop (e.g. a notebook): then it runs on a fresh loop in a helper thread, which the caller waits
    for."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    box: Dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(coro)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target, name="grpo-rollout-coroutine")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]
