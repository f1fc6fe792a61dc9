"""Running parsed tool calls: unknown, raising, exiting and hanging tools, argument types, schemas, loading by name."""

from __future__ import annotations

import asyncio
import time
from typing import List

import pytest
from helpers import run_tool_calls_sync

from grpo_rollout.rollouts.tool_parsing import format_tool_call, parse_tool_calls
from grpo_rollout.rollouts.tool_running import ToolError, example_call, load_tools, result_text, tool_schema


def multiply(a: int, b: int) -> int:
    """Multiply two integers.

    Args:
        a: first factor
        b: second factor
    """
    return a * b


def explode(reason: str = "kaboom") -> str:
    """Always raises.

    Args:
        reason: the error message
    """
    raise RuntimeError(reason)


#: ``("starts" | "ends", seconds)`` for every call of ``sleepy``, in the order they happened (from its threads)
SLEEPY_EVENTS: List[tuple] = []


def sleepy(seconds: float) -> str:
    """Sleeps (a tool that hangs).

    Args:
        seconds: how long
    """
    SLEEPY_EVENTS.append(("starts", seconds))
    time.sleep(seconds)
    SLEEPY_EVENTS.append(("ends", seconds))
    return "awake"


async def async_add(a: int, b: int) -> int:
    """Adds, asynchronously.

    Args:
        a: first
        b: second
    """
    await asyncio.sleep(0)
    return a + b


def undocumented(a, b):
    return a


TOOLS = load_tools([multiply, explode, sleepy, async_add])


def test_running_calls_never_raises():
    calls = parse_tool_calls(
        format_tool_call("multiply", {"a": 6, "b": 7}) + format_tool_call("explode", {})
        + format_tool_call("ghost", {"x": 1}) + format_tool_call("multiply", {"a": 1})
        + "<tool_call>{bad json</tool_call>" + format_tool_call("async_add", {"a": 2, "b": 3})
        + format_tool_call("sleepy", {"seconds": 30}))
    results = run_tool_calls_sync(calls, TOOLS, timeout_s=0.5)
    hung_tool_finished = ("ends", 30) in SLEEPY_EVENTS
    assert [r.error for r in results] == [None, "exception", "unknown_tool", "bad_arguments", "malformed", None,
                                         "timeout"]
    assert results[0].content == "42" and results[5].content == "5"
    assert "RuntimeError: kaboom" in results[1].content and "ghost" in results[2].content
    assert "timed out after 0.5 s" in results[6].content
    assert ("starts", 30) in SLEEPY_EVENTS and not hung_tool_finished  # the hanging tool was abandoned, not awaited


def quitter(code: int) -> str:
    """A tool that ends the process.

    Args:
        code: exit status
    """
    import sys

    sys.exit(code)


async def async_quitter(code: int) -> str:
    """An async tool that ends the process.

    Args:
        code: exit status
    """
    import sys

    sys.exit(code)


def test_tool_calling_sys_exit_is_an_error_not_the_end_of_the_run():
    tools = load_tools([quitter, async_quitter, multiply])
    calls = parse_tool_calls(format_tool_call("quitter", {"code": 3}) + format_tool_call("async_quitter", {"code": 4})
                             + format_tool_call("multiply", {"a": 2, "b": 3}))
    results = run_tool_calls_sync(calls, tools, timeout_s=5)
    assert [r.error for r in results] == ["exception", "exception", None]
    assert results[0].content == "Error: quitter raised ToolExited: called sys.exit(3)"
    assert results[1].content == "Error: async_quitter raised ToolExited: called sys.exit(4)"
    assert results[2].content == "6"


class Unprintable(Exception):
    def __str__(self):
        raise ValueError("no message")


def unprintable() -> str:
    """Raises an exception whose message cannot be read."""
    raise Unprintable()


def interrupts() -> str:
    """Raises KeyboardInterrupt from its own code."""
    raise KeyboardInterrupt


def repeat(text: str, times: int) -> str:
    """Repeats text.

    Args:
        text: what to repeat
        times: how often
    """
    return text * times


def test_odd_failures_are_answers_and_argument_types_are_checked():
    tools = load_tools([unprintable, interrupts, repeat])
    calls = parse_tool_calls(format_tool_call("unprintable", {}) + format_tool_call("interrupts", {})
                             + format_tool_call("repeat", {"text": "ab", "times": 2})
                             + format_tool_call("repeat", {"text": "xxxxx", "times": "100000000"})
                             + format_tool_call("repeat", {"text": "ab", "times": 2.0})
                             + format_tool_call("repeat", {"text": 5, "times": True}))
    results = run_tool_calls_sync(calls, tools, timeout_s=5)
    assert [r.error for r in results] == ["exception", "exception", None, "bad_arguments", None, "bad_arguments"]
    assert results[0].content == "Error: unprintable raised Unprintable: (its message could not be read)"
    assert results[1].content == "Error: interrupts raised ToolExited: raised KeyboardInterrupt"
    assert results[2].content == "abab" and results[4].content == "abab"
    assert results[3].content == "Error: bad arguments for repeat: argument 'times' must be integer, got \"100000000\""
    assert "argument 'text' must be string, got 5" in results[5].content


def test_tools_the_model_cannot_call_properly_are_rejected():
    def spread(*numbers: int) -> int:
        """Sums numbers.

        Args:
            numbers: the numbers
        """
        return sum(numbers)

    def counter(n: int):
        """Counts.

        Args:
            n: up to
        """
        yield from range(n)

    with pytest.raises(ToolError, match=r"takes \*numbers: the model can only pass named arguments"):
        tool_schema(spread)
    with pytest.raises(ToolError, match="is a generator"):
        tool_schema(counter)


def test_hanging_tools_run_concurrently():
    calls = parse_tool_calls(format_tool_call("sleepy", {"seconds": 0.6}) * 4)
    results = run_tool_calls_sync(calls, TOOLS, timeout_s=5)
    assert [r.content for r in results] == ["awake"] * 4
    # 4 × 0.6 s in parallel, not in sequence: all four started before the first ended
    assert [what for what, s in SLEEPY_EVENTS if s == 0.6] == ["starts"] * 4 + ["ends"] * 4


def test_schema_from_hints_and_docstring():
    schema = tool_schema(multiply)
    params = schema["function"]["parameters"]
    assert schema["function"]["name"] == "multiply" and params["required"] == ["a", "b"]
    assert params["properties"]["a"] == {"type": "integer", "description": "first factor"}
    assert example_call(schema) == '<tool_call>{"name": "multiply", "arguments": {"a": 3, "b": 4}}</tool_call>'
    with pytest.raises(ToolError, match="undocumented"):
        tool_schema(undocumented)


def test_load_tools_by_name_and_errors(tmp_path, monkeypatch):
    (tmp_path / "my_tools.py").write_text('def shout(text: str) -> str:\n    """Upper-case.\n\n    Args:\n'
                                          '        text: the text\n    """\n    return text.upper()\n')
    monkeypatch.chdir(tmp_path)
    tools = load_tools(["my_tools.py:shout", "grpo_rollout.rewards.library:last_number"])
    assert list(tools) == ["shout", "last_number"]
    with pytest.raises(ToolError, match="nope"):
        load_tools(["my_tools.py:nope"])
    with pytest.raises(ToolError, match="unique"):
        load_tools([multiply, multiply])


def test_result_text():
    assert result_text("x") == "x" and result_text(12) == "12" and result_text({"a": [1]}) == '{"a": [1]}'
    assert result_text(object()).startswith("<object")
