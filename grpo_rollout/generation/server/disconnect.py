"""Stop work for a client that has gone: a route's generation is cancelled when its HTTP client disconnects.

Without this, a trainer whose rollout failed (or was interrupted) while requests were in flight leaves the server
generating for nobody, and a server asked to stop then waits for those requests until it is killed (leaving vLLM's
shared-memory segments behind in ``/dev/shm``). Cancelling the coroutine that iterates ``engine.generate`` makes
vLLM abort the request.
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Optional

from fastapi import HTTPException
from starlette.requests import Request


async def _until_disconnect(request: Request) -> None:
    """Return once the client's ``http.disconnect`` message arrives (the body has already been read by FastAPI)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def unless_disconnected(request: Request, work: Awaitable[Any]) -> Optional[Any]:
    """``await work``, cancelling it when the client disconnects first.

    Returns:
        ``work``'s result.

    Raises:
        HTTPException: 499 when the client went away (nobody reads the answer; the status is for the access log).
        Whatever ``work`` raises.
    """
    async def run() -> Any:
        return await work

    task = asyncio.create_task(run())  # a real Task: cancelling it leaves it cancelled (a gather would not)
    watcher = asyncio.create_task(_until_disconnect(request))
    try:
        await asyncio.wait([task, watcher], return_when=asyncio.FIRST_COMPLETED)
    finally:
        for pending in (task, watcher):
            if not pending.done():
                pending.cancel()
        await asyncio.gather(task, watcher, return_exceptions=True)
    if task.cancelled() or (watcher.done() and not watcher.cancelled()
                            and isinstance(task.exception(), asyncio.CancelledError)):
        raise HTTPException(499, "the client disconnected; its generation was aborted")
    return task.result()
