"""The recording endpoint at its edges (issue 51): the exact end of the budget on every kind of request, prompts longer
than allowed (the run's ``max_prompt_length``, the server's context) on the chat, completions and Responses routes,
``tool_choice`` and ``response_format``, an answer whose client left, a Responses answer cut short, an agent's own
exception after a refusal, and the model's tool calls checked against the request's tools. Played against scripted
models, each with the input a bug report came with."""

from __future__ import annotations

import json

import pytest

from grpo_rollout import EpisodeFailure
from grpo_rollout.rollouts.contract import RolloutError

from agent_endpoint_helpers import ADD, Script, answer_tokens, play

pytestmark = [pytest.mark.model]

@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model)


@pytest.mark.parametrize("route", ["chat", "completions", "responses"])
def test_a_request_after_the_budget_is_used_to_its_last_token_ends_the_episode(tokenizer, tmp_path, route):
    """The first answer ends with its end-of-turn token exactly on the budget's last token, then the agent starts a
    new sequence: that request reached the client with max_tokens=0 (a 500, the run stopped). Now: the documented
    400, the episode ends on its budget, the run goes on."""
    budget = answer_tokens(tokenizer)
    client = Script(tokenizer)
    out = play(tokenizer, tmp_path, "fill_then_edit", [{"route": route}], client=client,
               max_completion_length=budget)
    assert [r["max_tokens"] for r in client.requests] == [budget]  # the second request never reached the model
    assert out["agent_result"] == [None] and out["truncated"] == [True] and out["end_reason"] == ["budget_reply"]
    assert "used the last of max_completion_length=" in out["end_detail"][0]
    assert out["num_turns"] == [1] and len(out["completion_ids"][0]) == budget and out["segments"] == [[]]


def test_one_token_left_is_still_a_turn(tokenizer, tmp_path):
    """The edge below: one token of budget left, the new sequence gets its one-token answer (finish length)."""
    budget = answer_tokens(tokenizer) + 1
    out = play(tokenizer, tmp_path, "fill_then_edit", [{"route": "chat"}], max_completion_length=budget)
    assert out["num_turns"] == [2] and [len(s["completion_ids"]) for [s] in out["segments"]] == [budget - 1]
    assert len(out["completion_ids"][0]) == 1 and out["end_reason"] == ["budget_turn"]


def test_the_agents_own_exception_after_a_refusal_is_the_runs_error(tokenizer, tmp_path):
    """A KeyError raised after the agent caught the budget's 400 vanished; it is the agent's bug, named with its
    line."""
    with pytest.raises(RolloutError, match=r"raised KeyError: 'missing' \(raised at .*edges\.py:\d+ in fill_then_raise\)"):
        play(tokenizer, tmp_path, "fill_then_raise", [{}], max_completion_length=answer_tokens(tokenizer))


@pytest.mark.parametrize("route", ["chat", "completions", "responses"])
def test_a_prompt_longer_than_the_servers_context_is_a_400_and_ends_the_episode(tokenizer, tmp_path, route):
    """An 817-token prompt against max_model_len 96: the server's 400 became a 500, retried 3 times, and the run
    stopped although on_error was drop. Now the 400 passes through naming the length (the client does not retry
    it), and the episode ends truncated where it was."""
    client = Script(tokenizer, context=96)
    out = play(tokenizer, tmp_path, "long_second", [{"route": route}], client=client, max_completion_length=40)
    assert len(client.requests) == 2  # the long one once: a 400 is not retried
    assert out["agent_result"] == [None] and out["truncated"] == [True] and out["end_reason"] == ["prompt_too_long"]
    assert "more than max_model_len 96" in out["end_detail"][0] and out["num_turns"] == [1]


def test_a_first_request_too_long_fails_the_episode(tokenizer, tmp_path):
    client = Script(tokenizer, context=96)
    with pytest.raises(EpisodeFailure, match="stopped after its first request was refused: .*max_model_len 96"):
        play(tokenizer, tmp_path, "long_second", [{"first": False}], client=client, max_completion_length=40)


@pytest.mark.parametrize("route", ["chat", "completions", "responses"])
def test_a_prompt_over_max_prompt_length_is_refused_not_cut(tokenizer, tmp_path, route):
    """A 435-token prompt was cut to max_prompt_length=128 from the left, its system prompt lost, and answered. Now
    it is refused (400 naming both lengths), never sent to the model, and the episode ends on it."""
    client = Script(tokenizer, max_prompt_length=64)
    out = play(tokenizer, tmp_path, "long_second", [{"route": route}], client=client)
    assert len(client.requests) == 1 and all(r["prompt"] <= 64 for r in client.requests)
    assert out["end_reason"] == ["prompt_too_long"] and out["truncated"] == [True]
    assert "more than sampling.max_prompt_length=64" in out["end_detail"][0]


def test_an_agent_that_shortens_a_refused_prompt_goes_on(tokenizer, tmp_path):
    client = Script(tokenizer, max_prompt_length=64)
    out = play(tokenizer, tmp_path, "long_then_short", [{}], client=client)
    [result] = out["agent_result"]
    assert "more than sampling.max_prompt_length=64" in result["said"] and result["answer"] == "Hello there"
    assert out["end_reason"] == ["done"] and out["truncated"] == [False] and out["num_turns"] == [1]


FORCING = {  # request fields that would force the answer: each a 400 naming it, on both routes
    "a forced function": ({"messages": [{"role": "user", "content": "hi"}], "tools": [ADD],
                           "tool_choice": {"type": "function", "function": {"name": "add"}}},
                          "chat/completions", "tool_choice naming the function 'add' is not supported"),
    "required": ({"messages": [{"role": "user", "content": "hi"}], "tools": [ADD], "tool_choice": "required"},
                 "chat/completions", "tool_choice 'required' is not supported"),
    "an unknown choice": ({"messages": [{"role": "user", "content": "hi"}], "tool_choice": "sometimes"},
                          "chat/completions", "tool_choice 'sometimes': send \"auto\" or \"none\""),
    "a json schema": ({"messages": [{"role": "user", "content": "hi"}],
                       "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}}},
                      "chat/completions", "response_format 'json_schema' is not supported"),
    "json mode": ({"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_object"}},
                  "chat/completions", "response_format 'json_object' is not supported"),
    "responses: required": ({"input": "hi", "tool_choice": "required"}, "responses",
                            "tool_choice 'required' is not supported"),
    "responses: a forced function": ({"input": "hi", "tools": [dict(ADD["function"], type="function")],
                                      "tool_choice": {"type": "function", "name": "add"}}, "responses",
                                     "tool_choice naming the function 'add' is not supported"),
}


def test_forcing_the_answer_is_refused_naming_the_field(tokenizer, tmp_path):
    """tool_choice and response_format were ignored (a forced add got multiply, a JSON schema prose)."""
    rows = [{"body": body, "route": route} for body, route, _ in FORCING.values()]
    out = play(tokenizer, tmp_path, "status_of", rows)
    for (name, (_, _, fragment)), result in zip(FORCING.items(), out["agent_result"]):
        assert result["status"] == 400 and fragment in result["said"]["error"]["message"], (name, result)
        assert "constrained decoding" in result["said"]["error"]["message"] or name == "an unknown choice"
    assert out["num_turns"] == [1] * len(FORCING)  # none of them was sampled


CALL = '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>'


@pytest.mark.parametrize("choice, answer, calls", [
    ("auto", CALL, [("add", {"a": 2, "b": 3})]),
    ("none", CALL, []),  # "none": no call is parsed, the text comes back as it is
    ("auto", '<tool_call>{"name": "multiply", "arguments": {"a": 2, "b": 3}}</tool_call>', []),  # not offered
    ("auto", '<tool_call>{"name": "add", "arguments": {"a": "two", "b": 3}}</tool_call>', []),  # a bad type
    ("auto", '<tool_call>{"name": "add", "arguments": {"a": 2}}</tool_call>', []),  # a missing argument
])
def test_tool_calls_are_handed_over_only_when_the_request_allows_them(tokenizer, tmp_path, choice, answer, calls):
    """The endpoint handed the agent every call the model wrote, whatever the request's tools and tool_choice said
    (all five bad calls ran); the built-in tool loop never runs such a call, and neither does an agent now."""
    out = play(tokenizer, tmp_path, "with_tools", [{"tools": [ADD], "choice": choice}],
               client=Script(tokenizer, answer=answer))
    [result] = out["agent_result"]
    got = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in result["calls"]]
    assert got == calls and result["finish"] == ("tool_calls" if calls else "stop")
    assert calls or result["text"] == answer  # the text as sampled
    refused = 0 if calls or choice == "none" else 1
    assert out["refused_tool_calls"] == [refused]


@pytest.mark.parametrize("stream", [False, True])
def test_an_answer_the_client_never_got_is_not_trained(tokenizer, tmp_path, stream):
    """A client that timed out (or a streaming client that disconnected) before the answer was ready: that answer was
    still trained. Now it is undone, counted in retried_calls, and the retry's answer is the one call recorded."""
    client = Script(tokenizer, delay_s=3.0)
    out = play(tokenizer, tmp_path, "impatient", [{"stream": stream}], client=client)
    # sampled twice: the first answer, lost, and the retry's (a retry that left while the first held the session
    # was not sampled at all)
    assert len(client.requests) == 2 and out["retried_calls"] == [1] and out["num_turns"] == [1]
    assert out["agent_result"] == ["Hello there"] and out["segments"] == [[]]
    assert len(out["completion_ids"][0]) == answer_tokens(tokenizer)


@pytest.mark.parametrize("stream", [False, True])
def test_a_responses_answer_cut_by_max_output_tokens_is_incomplete(tokenizer, tmp_path, stream):
    out = play(tokenizer, tmp_path, "responses_cut", [{"stream": stream}])
    [result] = out["agent_result"]
    assert result["status"] == "incomplete" and result["reason"] == "max_output_tokens"
    if stream:
        assert result["last"] == "response.incomplete"
