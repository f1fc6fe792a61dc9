"""Issue 39.7: when several episodes fail at once (an MCP server that died answers all of them with the same error),
the first error is raised and every other task's outcome is retrieved, also on the MCP servers' own event loop:
asyncio prints no "Task exception was never retrieved" traceback after the run's own error panel."""

from __future__ import annotations

import asyncio
import gc

import pytest

from grpo_rollout.rollouts.episodes import gather_or_cancel


class ServerGone(RuntimeError):
    pass


async def _episode(i: int, fails: bool, steps: int = 3):
    for _ in range(steps):  # every episode reaches its failing call in the same turn of the loop
        await asyncio.sleep(0)
    if fails:
        raise ServerGone(f"episode {i}: the server stopped")
    await asyncio.sleep(30)  # one still generating: cancelled
    return i


@pytest.mark.parametrize("running, cancelled_from_outside", [((), False), ((2,), False), ((2,), True)])
def test_every_failed_episode_is_retrieved_only_the_first_error_is_raised(running, cancelled_from_outside):
    """``running``: the episodes still generating when the others fail (none: every episode's call fails at once,
    as when a server dies under all of them)."""
    reported, raised = [], []

    async def main():
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _, context: reported.append(context.get("message")))
        coros = [_episode(i, fails=i not in running) for i in range(5)]
        try:
            if cancelled_from_outside:  # Ctrl-C while the failures are in: the outer wait is cancelled
                outer = asyncio.ensure_future(gather_or_cancel(coros))
                for _ in range(4):
                    await asyncio.sleep(0)
                outer.cancel()
                await outer
            else:
                await gather_or_cancel(coros)
        except (ServerGone, asyncio.CancelledError) as exc:
            raised.append(type(exc).__name__ + ": " + str(exc))
        gc.collect()  # the tasks are gone: an exception nobody read is reported now
        await asyncio.sleep(0)

    asyncio.run(main())
    gc.collect()
    assert raised == (["CancelledError: "] if cancelled_from_outside else
                      ["ServerGone: episode 0: the server stopped"])
    assert [m for m in reported if m and "never retrieved" in m] == []  # was 1 when all five failed at once


def test_an_mcp_call_abandoned_as_its_server_fails_leaves_no_unread_error_on_the_servers_loop():
    """The call's own task is cancelled (its episode is cancelled because another one failed) while the server's
    answer is already an error: the background loop's task ends with that error, which nobody awaits any more."""
    import threading
    from types import SimpleNamespace

    from grpo_rollout.integrations.mcp.mcp_tools import MCPHost

    reported, started = [], threading.Event()
    host = MCPHost.__new__(MCPHost)  # only its background loop and the call path, no server
    host._loop = asyncio.new_event_loop()
    host._loop.set_exception_handler(lambda _, context: reported.append(context.get("message")))
    thread = threading.Thread(target=host._loop.run_forever, daemon=True)
    thread.start()

    async def failing_call(index, name, arguments):
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:  # the connection closed just as the call was abandoned
            raise ServerGone("connection closed") from None

    host._call = failing_call
    tool = host._tool(0, SimpleNamespace(name="crash", description="", input_schema=None))

    async def main():
        task = asyncio.ensure_future(tool())
        await asyncio.get_running_loop().run_in_executor(None, started.wait, 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    asyncio.run_coroutine_threadsafe(asyncio.sleep(0.05), host._loop).result(5)  # the server's task has ended
    host._loop.call_soon_threadsafe(host._loop.stop)
    thread.join(5)
    gc.collect()
    assert [m for m in reported if m and "never retrieved" in m] == []  # was 1, on the servers' loop
