"""Tools for the tool-calling rollout: loading them by name, their JSON schemas, and running calls safely.

A tool is a plain Python function with type hints and a Google-style docstring (``Args:`` describing every
parameter); its full JSON schema is built from them (:mod:`.tool_schemas`), and a call's arguments are validated
against it before the tool runs. Running a call never raises: an unknown tool, bad arguments, an exception inside the
tool or a timeout become a :class:`ToolResult` whose ``content`` is an error message the model gets to read as the
tool's answer.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Union

from ..user_code.deadlines import ExitedInUserCode, StillRunning, call_in_daemon_thread
from ..user_code.loop_watch import loop_deadline
from ..user_code.signatures import defined_at
from .tool_examples import example_arguments, example_call  # noqa: F401 - re-exported: the tool API
from .contract import RolloutError
from .env_timeouts import blocked_loop_error
from .tool_parsing import ToolCall
from .tool_schemas import ToolError, arguments_problem, converted, tool_schema  # noqa: F401 - re-exported

ToolSpec = Union[str, Callable]
#: the key of a tool call's time limit, named when an ``async def`` tool blocks its event loop past it
TOOL_TIMEOUT_KEY = "rollout.kwargs.tool_timeout_s"


class ToolExited(RuntimeError):
    """A tool called ``sys.exit()``: reported to the model like any exception instead of ending the training run."""


#: the ``error`` of a call that a token limit cut off before its ``</tool_call>``
CUT = "truncated"


def cut_result(call: ToolCall) -> ToolResult:
    """The record of ``call``, cut off by a token limit before its ``</tool_call>``: it is not run."""
    return ToolResult(call.name, call.arguments, "Error: this tool call was cut off by the token limit before "
                      "</tool_call>, so it was not run", CUT)


@dataclass
class ToolResult:
    """The outcome of one call.

    Attributes:
        name: the tool name the model wrote (``None`` for a block that could not be read).
        arguments: the arguments the model wrote.
        content: what the model is shown: the tool's return value as text, or an error message.
        error: ``None`` on success, else a short kind: ``"malformed"``, ``"unknown_tool"``, ``"bad_arguments"``,
            ``"exception"`` or ``"timeout"``; or ``"truncated"``: a token limit cut the call off before its
            ``</tool_call>`` (not run, and neither a call nor an error of the model's in the counts and rewards).
        seconds: wall time of the call (0 when the tool was not run).
    """

    name: Optional[str]
    arguments: Dict[str, Any]
    content: str
    error: Optional[str] = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """True when the call ran and returned (``error`` is ``None``)."""
        return self.error is None

    @property
    def cut(self) -> bool:
        """True for a call a token limit cut off (``error == "truncated"``)."""
        return self.error == CUT

    def as_dict(self) -> Dict[str, Any]:
        """A JSON-friendly record (what the rollout returns in its ``tool_results`` extra)."""
        return {"name": self.name, "arguments": self.arguments, "content": self.content, "error": self.error}


def load_tools(specs: Sequence[ToolSpec], base_dir: Optional[Path] = None) -> Dict[str, Callable]:
    """Resolve tools given as callables or names (``pkg.module:func`` or ``path/file.py:func``) to ``name → function``.

    Raises:
        ToolError: a name does not import, is not callable, or two tools share a name.
    """
    from ..user_code.resolve import ImportSpecError, resolve_callable

    if isinstance(specs, (str, bytes)) or callable(specs):
        specs = [specs]
    tools: Dict[str, Callable] = {}
    for spec in specs:
        if callable(spec):
            fn = spec
        else:
            try:
                fn = resolve_callable(str(spec), base_dir)
            except ImportSpecError as exc:
                raise ToolError(f"tool {spec!r}: {exc}") from exc
        name = getattr(fn, "__name__", None)
        if not name:
            raise ToolError(f"tool {spec!r} has no __name__; tools must be named functions")
        if name in tools:
            raise ToolError(f"two tools are named {name!r}; tool names must be unique")
        tools[name] = fn
    return tools


def result_text(value: Any) -> str:
    """How a tool's return value is shown to the model: strings as they are, else JSON (``str()`` as a fallback)."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        pass
    try:
        return str(value)
    except Exception:  # a value whose __str__ fails
        return f"<{type(value).__name__} object>"


async def _in_daemon_thread(fn: Callable, kwargs: Dict[str, Any], timeout_s: Optional[float]) -> Any:
    """Run ``fn(**kwargs)`` on a fresh daemon thread (:func:`~grpo_rollout.user_code.deadlines.call_in_daemon_thread`:
    a tool that never returns cannot exhaust a shared executor or keep the process alive; past the timeout it is
    abandoned).

    Raises:
        asyncio.TimeoutError: it did not return within ``timeout_s`` seconds.
        ToolExited: it called ``sys.exit()`` or raised another non-``Exception`` (only this tool's failure, not the
            user's Ctrl-C).
        Exception: what the tool raised.
    """
    try:
        return await call_in_daemon_thread(fn, (), kwargs, timeout_s)
    except StillRunning:
        raise asyncio.TimeoutError from None
    except ExitedInUserCode as exited:
        cause = exited.__cause__
        raise ToolExited(f"called sys.exit({cause.code!r})" if isinstance(cause, SystemExit)
                         else f"raised {type(cause).__name__}") from None


async def _no_exit(coro: Any) -> Any:
    """Await an ``async def`` tool, turning its ``SystemExit`` into :class:`ToolExited` (inside an asyncio task a
    ``SystemExit`` would stop the whole event loop)."""
    try:
        return await coro
    except SystemExit as exc:
        raise ToolExited(f"called sys.exit({exc.code!r})") from None


def _schema_or_none(fn: Callable) -> Optional[Dict[str, Any]]:
    try:
        return tool_schema(fn)
    except ToolError:
        return None


def _arguments_problem(fn: Callable, arguments: Dict[str, Any]) -> Optional[str]:
    try:
        inspect.signature(fn).bind(**arguments)
    except TypeError as exc:
        return str(exc)
    except ValueError:  # no signature available: let the call decide
        return None
    schema = _schema_of(fn)
    return arguments_problem(schema, arguments) if schema else None


#: tool schemas, by function (an environment's methods: by the class's function, not each instance's bound method)
_SCHEMAS: Dict[Callable, Optional[Dict[str, Any]]] = {}


def _schema_of(fn: Callable) -> Optional[Dict[str, Any]]:
    key = getattr(fn, "__func__", fn)
    if key not in _SCHEMAS:
        _SCHEMAS[key] = _schema_or_none(fn)
    return _SCHEMAS[key]


def _safe_str(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # an exception whose __str__ itself fails
        return "(its message could not be read)"


async def run_tool_call(call: ToolCall, tools: Mapping[str, Callable], timeout_s: Optional[float] = 10.0) -> ToolResult:
    """Run one parsed call. Never raises, except ``asyncio.CancelledError`` and a
    :class:`~.contract.RolloutError` a tool raises to stop the run (an MCP server that stopped).

    Args:
        call: from :func:`~grpo_rollout.rollouts.tool_parsing.parse_tool_calls`.
        tools: ``name → function``. Sync functions run in their own thread; ``async def`` tools are awaited.
        timeout_s: seconds before the call is abandoned (``None``: wait forever).

    Returns:
        a :class:`ToolResult`; on failure its ``content`` is ``"Error: ..."`` saying what went wrong. An ``async def``
        tool that blocks the event loop past ``timeout_s`` cannot be answered: the loop's waiter raises
        :class:`~.env_timeouts.LoopBlocked` naming it (:mod:`grpo_rollout.user_code.loop_watch`).
    """
    if not call.well_formed:
        return ToolResult(call.name, call.arguments, f"Error: malformed tool call ({call.error}). Write "
                          f'<tool_call>{{"name": ..., "arguments": {{...}}}}</tool_call>', "malformed")
    fn = tools.get(call.name)
    if fn is None:
        return ToolResult(call.name, call.arguments, f"Error: unknown tool {call.name!r}; available: "
                          f"{', '.join(sorted(tools)) or 'none'}", "unknown_tool")
    problem = _arguments_problem(fn, call.arguments)
    if problem:
        return ToolResult(call.name, call.arguments, f"Error: bad arguments for {call.name}: {problem}",
                          "bad_arguments")
    try:
        arguments = converted(fn, call.arguments)
    except ValueError as exc:
        return ToolResult(call.name, call.arguments, f"Error: bad arguments for {call.name}: {exc}", "bad_arguments")
    loop = asyncio.get_running_loop()
    start = loop.time()
    try:
        if inspect.iscoroutinefunction(fn):
            with loop_deadline(timeout_s, blocked_loop_error(f"the tool {call.name}{defined_at(fn)}", timeout_s,
                                                             TOOL_TIMEOUT_KEY)):
                value = await asyncio.wait_for(_no_exit(fn(**arguments)), timeout_s)
        else:
            value = await _in_daemon_thread(fn, arguments, timeout_s)
    except asyncio.TimeoutError:
        return ToolResult(call.name, call.arguments, f"Error: {call.name} timed out after {timeout_s:g} s",
                          "timeout", loop.time() - start)
    except RolloutError:  # not the tool's answer: the run cannot go on (an MCP server that stopped)
        raise
    except Exception as exc:  # the tool's own failure is an answer for the model, not a crash of the run
        return ToolResult(call.name, call.arguments, f"Error: {call.name} raised {type(exc).__name__}: "
                          f"{_safe_str(exc)}", "exception", loop.time() - start)
    return ToolResult(call.name, call.arguments, result_text(value), None, loop.time() - start)
