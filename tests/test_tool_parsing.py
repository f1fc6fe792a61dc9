"""Tool-call parsing and running tools: malformed JSON, several calls, braces in strings, unknown tools, raising and
hanging tools, schemas."""

from __future__ import annotations

import asyncio
import time
from typing import List

import pytest
from helpers import run_tool_calls_sync

from grpo_rollout.rollouts.tool_parsing import format_tool_call, parse_tool_calls, stopped_inside_string
from grpo_rollout.rollouts.tools import ToolError, example_call, load_tools, result_text, tool_schema
from grpo_rollout.rewards.tools import env_reward, tool_call_validity, tool_success


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


def test_single_call():
    [call] = parse_tool_calls('Let me compute. <tool_call>{"name": "multiply", "arguments": {"a": 3, "b": 4}}'
                              '</tool_call> done')
    assert call.well_formed and call.name == "multiply" and call.arguments == {"a": 3, "b": 4}


def test_several_calls_in_one_turn_keep_their_order():
    text = (format_tool_call("multiply", {"a": 1, "b": 2}) + "\nand\n"
            + '<tool_call>\n{"name": "async_add", "arguments": {"a": 5, "b": 6}}\n</tool_call>')
    calls = parse_tool_calls(text)
    assert [(c.name, c.arguments) for c in calls] == [("multiply", {"a": 1, "b": 2}), ("async_add", {"a": 5, "b": 6})]


def test_braces_and_tags_inside_string_arguments():
    text = '<tool_call>{"name": "echo", "arguments": {"text": "a {curly} } brace \\" and ]"}}</tool_call>'
    [call] = parse_tool_calls(text)
    assert call.well_formed and call.arguments == {"text": 'a {curly} } brace " and ]'}


@pytest.mark.parametrize("body, fragment", [
    ('{"name": "multiply", "arguments": {"a": 3, "b": }}', "invalid JSON"),
    ('{"name": "multiply", "arguments": {"a": 3}', "invalid JSON"),  # unbalanced
    ('["multiply", 3, 4]', "JSON object"),
    ('{"arguments": {"a": 1}}', "name"),
    ('{"name": "multiply", "arguments": [3, 4]}', "must be an object"),
    ('{"name": "multiply", "arguments": {}} trailing', "unexpected text"),
    ('', "invalid JSON"),
])
def test_malformed_blocks_are_reported_not_raised(body, fragment):
    [call] = parse_tool_calls(f"<tool_call>{body}</tool_call>")
    assert not call.well_formed and fragment in call.error


# Issue 9.4: the closing tag inside a JSON string argument was taken as the end of the call.
def test_closing_tag_inside_a_json_string_is_text():
    text = ('<tool_call>{"name": "write_file", "arguments": {"path": "a.md", "text": "close with </tool_call> here"}}'
            '</tool_call>')
    [call] = parse_tool_calls(text)
    assert call.well_formed and call.arguments == {"path": "a.md", "text": "close with </tool_call> here"}
    # escaped quotes do not end the string
    [call] = parse_tool_calls('<tool_call>{"name": "w", "arguments": {"t": "say \\"</tool_call>\\" ok"}}</tool_call>')
    assert call.arguments == {"t": 'say "</tool_call>" ok'}
    # the stop string fell inside the string: generation must go on; once the call closes, it is over
    assert stopped_inside_string(text[: text.index("</tool_call>") + len("</tool_call>")])
    assert not stopped_inside_string(text)
    assert not stopped_inside_string('<tool_call>{"name": "m", "arguments": {}}</tool_call>')
    assert not stopped_inside_string("no call here </tool_call>")
    assert not stopped_inside_string('<tool_call>{"name": "m", "arguments": {"a": 1}')  # no stop string at the end


def test_unbalanced_quote_does_not_swallow_the_next_call():
    calls = parse_tool_calls('<tool_call>{"name": "a", "arguments": {"x": "1}}</tool_call>\n'
                             '<tool_call>{"name": "b", "arguments": {}}</tool_call>')
    assert [c.well_formed for c in calls] == [False, True] and calls[1].name == "b"
    # the message reads "... starting at character 33", not "at at character"
    assert calls[0].error == "invalid JSON: Unterminated string starting at character 33"


def test_malformed_call_does_not_hide_the_next_one():
    calls = parse_tool_calls('<tool_call>{oops</tool_call><tool_call>{"name": "multiply", "arguments": '
                             '{"a": 2, "b": 2}}</tool_call>')
    assert [c.well_formed for c in calls] == [False, True]


def test_unterminated_and_nested_open_tags():
    calls = parse_tool_calls('<tool_call>{"name": "a", "arguments": {}}<tool_call>{"name": "b", "arguments": {}}')
    assert [c.name for c in calls] == ["a", "b"]
    assert calls[0].well_formed and "unterminated" in calls[1].error


def test_arguments_as_json_string_and_fenced_block():
    [c1] = parse_tool_calls('<tool_call>{"name": "m", "arguments": "{\\"a\\": 1}"}</tool_call>')
    [c2] = parse_tool_calls('<tool_call>```json\n{"name": "m", "arguments": {"a": 2}}\n```</tool_call>')
    assert c1.arguments == {"a": 1} and c2.arguments == {"a": 2}


def test_no_calls():
    assert parse_tool_calls("The answer is 12. </tool_call>") == []


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


def test_validity_rewards_from_records_and_from_text():
    records = [[{"name": "multiply", "error": None}, {"name": "ghost", "error": "unknown_tool"}],
               [{"name": "explode", "error": "exception"}], []]
    assert tool_call_validity([""] * 3, records) == [0.5, 1.0, 0.0]
    assert tool_call_validity([""] * 3, records, mode="indicator", no_call_score=None) == [0.0, 1.0, None]
    texts = [format_tool_call("multiply", {"a": 1}) + "<tool_call>{x</tool_call>",
             format_tool_call("ghost", {}), "no call"]
    assert tool_call_validity(texts, tool_names=["multiply"]) == [0.5, 0.0, 0.0]
    assert tool_call_validity(texts) == [0.5, 1.0, 0.0]  # without names, any name counts as known
    assert tool_success(records) == [1.0, 0.0, 0.0] and tool_success(records, name="explode") == [0.0, 0.0, 0.0]
    assert env_reward([1, None, 0.5]) == [1.0, None, 0.5]
