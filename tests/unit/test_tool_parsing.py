"""Tool-call parsing: malformed JSON, several calls, braces and tags in strings; the tool-call validity rewards."""

from __future__ import annotations

import pytest

from grpo_rollout.rollouts.tool_parsing import format_tool_call, parse_tool_calls, stopped_inside_string
from grpo_rollout.rewards.tools import env_reward, tool_call_validity, tool_success


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
