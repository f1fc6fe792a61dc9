"""Faults a new user found in the recording endpoint (issue 41), each with its input: malformed requests are answered
400 naming what is wrong (never a 500 with a traceback, never an empty episode trained), a request that fails leaves
the episode as it was (a retried request is not recorded twice), text parts and tool calls without text render, the
``openai`` client's connection errors are failed episodes (``rollout.on_error``), unknown routes say what is served,
and validate-config refuses an agent that cannot be called as one."""

from __future__ import annotations

import pytest

from grpo_rollout import EpisodeFailure

pytestmark = [pytest.mark.model]

PROBE = '''
import json

import httpx
from openai import OpenAI

GOOD = [{"role": "user", "content": "Hi"}]


def probe(base_url, api_key, model, prompt, body, route="chat/completions", **row):
    """A good call, the body under test, then a call that continues the first: what the endpoint said to the body."""
    http = httpx.Client(headers={"Authorization": f"Bearer {api_key}"}, timeout=60)
    first = http.post(f"{base_url}/chat/completions", json={"model": model, "messages": GOOD}).json()
    said = http.post(f"{base_url}/{route}", json=dict({"model": model}, **body))
    messages = GOOD + [first["choices"][0]["message"], {"role": "user", "content": "Again."}]
    http.post(f"{base_url}/chat/completions", json={"model": model, "messages": messages})
    return {"status": said.status_code, "error": said.json().get("error", {}).get("message")}


def edited(base_url, api_key, model, prompt, **row):
    """A context edit whose history holds text parts and a tool call without text; the client retries a 500."""
    client = OpenAI(base_url=base_url, api_key=api_key, max_retries=2)
    client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Hi"}])
    call = {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}}
    history = [{"role": "user", "content": [{"type": "text", "text": "What is 1 + 2?"}]},
               {"role": "assistant", "content": None, "tool_calls": [call]},
               {"role": "tool", "tool_call_id": "c1", "content": "3"}]
    return client.chat.completions.create(model=model, messages=history).choices[0].message.content


def unreachable(base_url, api_key, model, prompt, **row):
    OpenAI(base_url="http://127.0.0.1:9/v1", api_key=api_key, max_retries=0, timeout=5).chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Hi"}])


class NotAFunction:
    pass


def strict(base_url, api_key, model, prompt, **row):
    """Each kind of answer, validated against the openai package's response types (verifiers' interception layer
    validates what it forwards: a chat answer without `created` was a 502 there)."""
    from openai.types import Completion
    from openai.types.chat import ChatCompletion, ChatCompletionChunk

    post = lambda route, body: httpx.post(f"{base_url}/{route}", json=dict({"model": model}, **body), timeout=60,
                                          headers={"Authorization": f"Bearer {api_key}"})
    from openai.types.responses import Response

    ChatCompletion.model_validate(post("chat/completions", {"messages": GOOD}).json())
    Response.model_validate(post("responses", {"input": "Hi", "instructions": "Be brief."}).json())
    Completion.model_validate(post("completions", {"prompt": "Hi"}).json())
    lines = post("chat/completions", {"messages": GOOD, "stream": True}).text.split("\\n\\n")
    chunks = [json.loads(line[6:]) for line in lines if line.startswith("data: {")]
    return [ChatCompletionChunk.model_validate(c).created for c in chunks]


def no_url(question):
    return 0
'''


class FailsOnce:
    """Answers "Hi" (log-prob -0.5 per token), but its 3rd request fails once (the generation server's 500)."""

    max_prompt_length = None

    def __init__(self, tokenizer):
        self.tokenizer, self.eos_ids, self.requests = tokenizer, {tokenizer.eos_token_id}, 0

    async def agenerate(self, prompt_ids, n=1, **kwargs):
        from grpo_rollout.generation.base import GenerationResult

        self.requests += 1
        if self.requests == 3:
            raise RuntimeError("the server went away for a moment")
        ids = self.tokenizer.encode("Hi", add_special_tokens=False) + [self.tokenizer.eos_token_id]
        return GenerationResult([list(p) for p in prompt_ids], [ids] * n, [[-0.5] * len(ids)] * n, ["stop"] * n)


@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model)


def _play(tokenizer, tmp_path, function, rows):
    from grpo_rollout.rollouts.agent import agent_rollout
    from grpo_rollout.rollouts.run_end import end_run

    (tmp_path / "probe.py").write_text(PROBE)
    client = FailsOnce(tokenizer)
    client.requests = -100  # fails never, unless a test says so
    try:
        return agent_rollout([r.get("prompt", "Hi") for r in rows], client=client, tokenizer=tokenizer, n=1,
                             agent=f"probe.py:{function}", base_dir=str(tmp_path), rows=rows,
                             max_completion_length=200), client
    finally:
        end_run()


BODIES = {  # the new user's inputs
    "content is a number": ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content is int"),
    "no role": ({"messages": [{"content": "hi"}]}, "messages[0] has role None"),
    "image part": ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
                   "only text parts are supported"),
    "tools not a list": ({"messages": [{"role": "user", "content": "hi"}], "tools": "nope"}, "`tools` must be a list"),
    "tools of numbers": ({"messages": [{"role": "user", "content": "hi"}], "tools": [1, 2]}, "`tools` must be a list"),
    "negative max_tokens": ({"messages": [{"role": "user", "content": "hi"}], "max_tokens": -3}, "max_tokens=-3"),
    "max_tokens 0": ({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 0}, "max_tokens=0"),
    "max_tokens text": ({"messages": [{"role": "user", "content": "hi"}], "max_tokens": "5"}, "max_tokens='5'"),
    "max_tokens float": ({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2.5}, "max_tokens=2.5"),
    "bad prompt": ({"prompt": 5}, "`prompt` must be one non-empty string or one list of token ids"),
    "stop of numbers": ({"messages": [{"role": "user", "content": "hi"}], "stop": [1]},
                        "stop=[1]: send a string or a list of up to 4 non-empty strings"),
    "five stops": ({"prompt": "hi", "stop": ["a", "b", "c", "d", "e"]}, "a list of up to 4 non-empty strings"),
    # issue 51: a 500 AttributeError before
    "tool_calls not a list": ({"messages": [{"role": "assistant", "content": None, "tool_calls": "oops"},
                                           {"role": "user", "content": "hi"}]}, "messages[0].tool_calls is str"),
    "a tool call without a function": ({"messages": [{"role": "assistant", "tool_calls": [{"id": "c1"}]},
                                                     {"role": "user", "content": "hi"}]},
                                       "messages[0].tool_calls[0] is not a function call"),
    "arguments of a number": ({"messages": [{"role": "assistant", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "add", "arguments": 5}}]},
        {"role": "user", "content": "hi"}]}, "messages[0].tool_calls[0] is not a function call"),
}


def test_malformed_requests_are_400s_that_leave_the_episode_as_it_was(tokenizer, tmp_path):
    rows = [{"body": body, "route": "completions" if "prompt" in body else "chat/completions"}
            for body, _ in BODIES.values()]
    out, _ = _play(tokenizer, tmp_path, "probe", rows)
    for (name, (_, fragment)), result in zip(BODIES.items(), out["agent_result"]):
        assert result["status"] == 400 and fragment in result["error"], (name, result)
    # each episode: the good call and its continuation, one sequence of two turns, nothing of the bad request
    assert out["num_turns"] == [2] * len(BODIES) and out["segments"] == [[]] * len(BODIES)


def test_an_unknown_route_says_what_is_served(tokenizer, tmp_path):
    rows = [{"body": {"input": "hi"}, "route": "embeddings"}]
    out, _ = _play(tokenizer, tmp_path, "probe", rows)
    [result] = out["agent_result"]
    assert result["status"] == 404 and "POST <base_url>/chat/completions" in result["error"]
    assert "POST <base_url>/responses" in result["error"]


RESPONSES_BODIES = {  # Responses API requests the endpoint cannot record
    "a stored conversation": ({"input": "hi", "previous_response_id": "resp_1"}, "send the whole conversation"),
    "a built-in tool": ({"input": "hi", "tools": [{"type": "web_search"}]}, "tools[0] is 'web_search'"),
    "an image": ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
                 "input[0].content[0] is 'input_image'"),
    "an item reference": ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0] is 'item_reference'"),
    # a new user's probes: each was answered 200, or named the chat route's fields
    "structured output": ({"input": "hi", "text": {"format": {"type": "json_schema", "name": "x", "schema": {}}}},
                          "text.format 'json_schema' is not supported"),
    "background": ({"input": "hi", "background": True}, "background is not supported"),
    "no input": ({"instructions": "Be brief."}, "input is missing"),
    "a bad role": ({"input": [{"role": "wizard", "content": "hi"}]}, "input[0] has role 'wizard'"),
}


def test_responses_requests_it_cannot_record_are_400s(tokenizer, tmp_path):
    rows = [{"body": body, "route": "responses"} for body, _ in RESPONSES_BODIES.values()]
    out, _ = _play(tokenizer, tmp_path, "probe", rows)
    for (name, (_, fragment)), result in zip(RESPONSES_BODIES.items(), out["agent_result"]):
        assert result["status"] == 400 and fragment in result["error"], (name, result)
    assert out["num_turns"] == [2] * len(RESPONSES_BODIES)


def test_a_retried_request_is_recorded_once_and_tool_calls_without_text_render(tokenizer, tmp_path):
    from grpo_rollout.rollouts.agent import agent_rollout
    from grpo_rollout.rollouts.run_end import end_run

    (tmp_path / "probe.py").write_text(PROBE)
    client = FailsOnce(tokenizer)  # the context edit's first attempt (request 2 after the first call's) fails
    client.requests = 1
    try:
        out = agent_rollout(["Hi"], client=client, tokenizer=tokenizer, n=1, agent="probe.py:edited",
                            base_dir=str(tmp_path), max_completion_length=200)
    finally:
        end_run()
    assert client.requests == 4 and out["num_turns"] == [2]  # 2 answered calls, 1 failed attempt
    [[first]] = out["segments"]  # the first call's sequence, once: not once per attempt
    assert len(first["completion_ids"]) == len(out["completion_ids"][0])
    prompt = tokenizer.decode(out["prompt_ids"][0])
    assert "What is 1 + 2?" in prompt and '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>' in prompt


def test_every_answer_is_a_valid_openai_response(tokenizer, tmp_path):
    out, _ = _play(tokenizer, tmp_path, "strict", [{"prompt": "Hi"}])
    [created] = out["agent_result"]
    assert len(created) == 2 and all(isinstance(c, int) and c > 1_700_000_000 for c in created)


def test_the_openai_clients_connection_error_is_a_failed_episode(tokenizer, tmp_path):
    with pytest.raises(EpisodeFailure, match=r"the agent unreachable .* raised APIConnectionError: Connection error\."
                                             r" \(raised at .*probe\.py:\d+ in unreachable\)"):
        _play(tokenizer, tmp_path, "unreachable", [{"prompt": "Hi"}])


def test_validate_config_refuses_an_agent_that_cannot_be_called_as_one(tmp_path):
    from grpo_rollout.rollouts.agent.agent_rollout import validate_kwargs

    (tmp_path / "probe.py").write_text(PROBE)
    [(key, message, _)] = validate_kwargs({"agent": "probe.py:NotAFunction"}, base_dir=tmp_path)
    assert key == "rollout.kwargs.agent" and "is a class" in message
    [(key, message, _)] = validate_kwargs({"agent": "probe.py:no_url"}, base_dir=tmp_path)
    assert "takes no parameter base_url, api_key, model (defined at" in message
