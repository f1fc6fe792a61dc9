"""MCP servers' tools on the built-in tool-calling rollout (``rollout.kwargs.mcp_servers``), through the ``mcp``
package's client.

Config::

    rollout:
      function: grpo_rollout.rollouts.tool_calling:tool_calling_rollout
      kwargs:
        mcp_servers:
          - {command: python, args: [tools/server.py]}     # stdio: started by the run, stopped when it ends
                                                           # (`python`: the interpreter running the training)
          - {url: http://127.0.0.1:8931/mcp}               # streamable HTTP: a server that is already running

The servers are started (or connected to) the first time a rollout needs them, their tools are listed once and shown
to the model with the servers' own JSON schemas, beside any ``tools`` and environment methods; a call goes to the
server with the model's arguments. A tool error, a call over ``tool_timeout_s`` or arguments the schema rejects answer
the model as for any tool. The connections stay open for the run (one per server and process) and are closed when
the run ends (:func:`close_mcp_servers`; at the latest when the process exits).

Why a thread of their own: an MCP session belongs to the event loop that opened it, and rollouts run on many loops
(a fresh one per call, the streaming stage's shared one, a notebook's). So the sessions live on one background loop
and each call is handed to it.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ...rollouts.contract import EpisodeFailure, RolloutError
from ...rollouts.run_end import on_run_end
from .mcp_checks import label, located, server_problem, startup_timeout

#: commands that start the interpreter running the training (so a Python server sees the same packages, also when
#: the virtual environment is not activated)
PYTHON_COMMANDS = ("python", "python3")


class MCPToolError(RuntimeError):
    """An MCP server answered a call with an error (the model reads its text as the tool's answer)."""


class MCPServerGone(EpisodeFailure):
    """An MCP server's connection closed during the run: its tools would answer only errors, so the episode failed
    (``rollout.on_error`` says whether the run stops, plays the group again or leaves it out)."""


def _first_leaf(exc: BaseException) -> BaseException:
    """The first exception inside (nested) exception groups: what actually went wrong."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _call_text(result: Any) -> str:
    """A tool result's content as text: its text parts joined, other parts by their type."""
    parts = [getattr(c, "text", None) or f"[{getattr(c, 'type', type(c).__name__)}]" for c in result.content]
    return "\n".join(parts)


class MCPHost:
    """The connected servers of one ``mcp_servers`` list, on a background thread's event loop.

    Attributes:
        tools: name → an ``async def`` tool function calling the server that has it (its ``__tool_schema__`` is the
            server's schema).
        logs: the file each stdio server's stderr goes to.
    """

    def __init__(self, specs: Sequence[Mapping[str, Any]]):
        self.specs = [dict(s) for s in specs]
        self.tools: Dict[str, Callable] = {}
        self.logs: List[Optional[Path]] = []
        self.gone = False  # a server stopped during the run (_call): mcp_tools starts them again
        self._clients: List[Any] = []
        self._owner: Dict[str, int] = {}  # tool name → its server's index
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._closing: Optional[asyncio.Event] = None
        self._task: Optional[asyncio.Task] = None
        self._finished = threading.Event()  # the connections are closed (or never opened)
        self._error: Optional[BaseException] = None
        self._thread = threading.Thread(target=self._loop.run_forever, name="mcp-servers", daemon=True)
        self._thread.start()
        self._done = asyncio.run_coroutine_threadsafe(self._serve(), self._loop)

    def start(self) -> "MCPHost":
        """Wait until every server is connected and its tools are listed (each within its ``startup_timeout_s``).

        Raises:
            RolloutError: a server did not start or answer in time (its address or command named, and what it wrote;
                it is stopped), or two tools share a name.
        """
        timeout_s = sum(startup_timeout(s) for s in self.specs)
        if not self._ready.wait(timeout_s):
            spec = self.specs[min(len(self._clients), len(self.specs) - 1)]
            where = self._where()
            self.close()
            raise RolloutError(f"the MCP server `{label(spec)}` did not start or list its tools within "
                               f"{startup_timeout(spec):g} s (its startup_timeout_s)"
                               f"{where}")
        if self._error is not None:
            self.close()
            raise RolloutError(f"{self._error}{self._where()}") from self._error
        return self

    def _where(self) -> str:
        """The last lines the stdio servers wrote to stderr, and where the rest is."""
        logs = [p for p in self.logs if p is not None and p.exists() and p.stat().st_size]
        if not logs:
            return ""
        tail = " | ".join(logs[-1].read_text(errors="replace").strip().splitlines()[-3:])
        return f"; it wrote: {tail[-300:]} (all its output: {', '.join(map(str, logs))})"

    async def _serve(self) -> None:
        """Open every connection, list the tools, then hold the connections until :meth:`close` (one task, as the
        ``mcp`` client's context managers must be entered and left in the same task)."""
        from contextlib import AsyncExitStack

        self._closing, self._task = asyncio.Event(), asyncio.current_task()
        try:
            async with AsyncExitStack() as stack:
                try:
                    for i, spec in enumerate(self.specs):
                        client = await stack.enter_async_context(self._client(spec, stack))
                        listed = (await client.list_tools()).tools
                        self._clients.append(client)
                        for tool in listed:
                            if tool.name in self.tools:
                                first = self.specs[self._owner[tool.name]]
                                raise RolloutError(f"two MCP servers have a tool named {tool.name!r}: "
                                                   f"`{label(first)}` and `{label(spec)}`")
                            self._owner[tool.name] = i
                            self.tools[tool.name] = self._tool(i, tool)
                except Exception as exc:  # noqa: BLE001 - handed to start(), which names the server
                    name = label(self.specs[len(self._clients)]) if len(self._clients) < len(self.specs) else ""
                    leaf = _first_leaf(exc)
                    self._error = exc if isinstance(exc, RolloutError) else RolloutError(
                        f"the MCP server `{name}` failed to start or list its tools: {type(leaf).__name__}: {leaf}")
                    return
                finally:
                    self._ready.set()
                await self._closing.wait()
        except BaseException:  # noqa: BLE001 - a server that fails while closing, or a cancelled start
            pass
        finally:
            self._finished.set()

    def _client(self, spec: Mapping[str, Any], stack: Any) -> Any:
        from mcp import Client, StdioServerParameters
        from mcp.client.stdio import stdio_client

        if spec.get("url"):
            self.logs.append(None)
            return Client(spec["url"])
        log = Path(tempfile.mkstemp(prefix="grpo-rollout-mcp-", suffix=".log")[1])
        self.logs.append(log)
        errlog = stack.enter_context(open(log, "w"))
        command = sys.executable if spec["command"] in PYTHON_COMMANDS else spec["command"]
        params = StdioServerParameters(command=command, args=list(spec.get("args", [])),
                                       env=spec.get("env"), cwd=spec.get("cwd"))
        return Client(stdio_client(params, errlog=errlog))

    def _tool(self, index: int, tool: Any) -> Callable:
        """An ``async def`` function calling ``tool`` on server ``index`` from any event loop."""
        host, name = self, tool.name

        async def call(**arguments: Any) -> str:
            future = asyncio.run_coroutine_threadsafe(host._outcome(index, name, arguments), host._loop)
            text, error = await asyncio.wrap_future(future)
            if error is not None:
                raise error
            return text

        call.__name__ = call.__qualname__ = name
        call.__doc__ = tool.description or ""
        call.__tool_schema__ = {"type": "function", "function": {
            "name": name, "description": tool.description or "",
            "parameters": tool.input_schema or {"type": "object", "properties": {}}}}
        return call

    async def _outcome(self, index: int, name: str, arguments: Dict[str, Any]) -> Tuple[Any, Optional[Exception]]:
        """``(text, None)`` or ``(None, the error)``: the background task never ends with an exception, which asyncio
        would print as "never retrieved" when the call was abandoned (cancelled) just as the server failed."""
        try:
            return await self._call(index, name, arguments), None
        except Exception as exc:  # noqa: BLE001 - raised again by the caller, on its own loop
            return None, exc

    async def _call(self, index: int, name: str, arguments: Dict[str, Any]) -> str:
        try:
            result = await self._clients[index].call_tool(name, arguments)
        except Exception as exc:
            if "connection closed" not in str(exc).lower():
                raise  # the model reads it as the tool's error
            self._error = exc  # keep its stderr file
            self.gone = True  # the next rollout starts the servers again (mcp_tools)
            log = self.logs[index]
            raise MCPServerGone(f"the MCP server `{label(self.specs[index])}` stopped during the run (calling "
                                f"{name}): {type(exc).__name__}: {exc}"
                                + (f"; its output: {log}" if log is not None else "")) from exc
        text = _call_text(result)
        if result.is_error:
            raise MCPToolError(text)
        return text

    def close(self) -> None:
        """Close the connections (stdio servers stop) and the background loop."""
        if self._closing is not None and self._ready.is_set():
            self._loop.call_soon_threadsafe(self._closing.set)
        elif self._task is not None:  # still starting (a server that hangs): cancelling the task unwinds the
            self._loop.call_soon_threadsafe(self._task.cancel)  # connections, which stops the processes
        self._finished.wait(15)
        for log in self.logs:  # the stderr files of servers that ran without trouble
            if log is not None and self._error is None:
                log.unlink(missing_ok=True)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)


_HOSTS: Dict[str, MCPHost] = {}
_LOCK = threading.Lock()


def mcp_tools(specs: Sequence[Mapping[str, Any]], base_dir: Optional[Path] = None) -> Dict[str, Callable]:
    """The tools of the servers ``specs`` (an ``mcp_servers`` list): name → ``async def`` function with the server's
    schema. The servers are started once per process and list of specs, and reused (started again after one of
    them stopped during the run: a group played again gets working servers). ``base_dir``: the config's
    folder, where relative ``args`` and ``cwd`` are also looked up.

    Raises:
        RolloutError: an entry is malformed, a server does not start or answer, or two tools share a name.
    """
    for i, spec in enumerate(specs):
        problem = server_problem(spec)
        if problem:
            raise RolloutError(f"mcp_servers[{i}] {problem}")
    specs = [located(s, base_dir) for s in specs]
    key = json.dumps(list(specs), sort_keys=True, default=str)
    with _LOCK:
        if key in _HOSTS and getattr(_HOSTS[key], "gone", False):  # a server died: start them again (on_error)
            _HOSTS.pop(key).close()
        if key not in _HOSTS:
            _HOSTS[key] = MCPHost(specs).start()
        return dict(_HOSTS[key].tools)


@on_run_end
def close_mcp_servers() -> None:
    """Close every MCP connection this process opened (stdio servers stop); the next rollout opens them again."""
    with _LOCK:
        hosts = list(_HOSTS.values())
        _HOSTS.clear()
    for host in hosts:
        host.close()


atexit.register(close_mcp_servers)
