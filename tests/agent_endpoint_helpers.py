"""Agents and a scripted model for the tests of the recording endpoint at its edges (issue 51:
``test_agent_endpoint_edges.py``, ``test_agent_endpoint_security.py``)."""

from __future__ import annotations

import asyncio

AGENTS = '''
import json

import httpx
from openai import BadRequestError, OpenAI

USER = [{"role": "user", "content": "Hi"}]


def _client(base_url, api_key, **kw):
    return OpenAI(base_url=base_url, api_key=api_key, max_retries=kw.pop("max_retries", 2), **kw)


def fill_then_edit(base_url, api_key, model, prompt, route="chat", **row):
    """An answer that uses the budget to its last token, then a request that starts a new sequence (a context edit
    on the chat route, another text on the completions route, another input on the Responses route)."""
    client = _client(base_url, api_key)
    client.chat.completions.create(model=model, messages=USER)
    if route == "chat":
        client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Something else."}])
    elif route == "completions":
        client.completions.create(model=model, prompt="Something else:")
    else:
        client.responses.create(model=model, input="Something else.")
    return "went on"


def fill_then_raise(base_url, api_key, model, prompt, **row):
    """Catches the budget's 400, then fails on its own (a KeyError of its own code)."""
    client = _client(base_url, api_key)
    client.chat.completions.create(model=model, messages=USER)
    try:
        client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Something else."}])
    except BadRequestError:
        return {}["missing"]


def long_second(base_url, api_key, model, prompt, route="chat", words=200, first=True, **row):
    """A short request, then one whose prompt is far longer (a long tool result in a new conversation)."""
    client = _client(base_url, api_key)
    if first:
        client.chat.completions.create(model=model, messages=USER)
    text = "word " * words
    if route == "chat":
        client.chat.completions.create(model=model, messages=[{"role": "system", "content": text}] + USER)
    elif route == "completions":
        client.completions.create(model=model, prompt=text)
    else:
        client.responses.create(model=model, input=text)
    return "went on"


def long_then_short(base_url, api_key, model, prompt, **row):
    """Refused for its length, the agent sends a shorter request: the episode goes on."""
    client = _client(base_url, api_key)
    try:
        client.chat.completions.create(model=model, messages=[{"role": "system", "content": "word " * 200}] + USER)
    except BadRequestError as exc:
        said = str(exc)
    answer = client.chat.completions.create(model=model, messages=USER).choices[0].message.content
    return {"said": said, "answer": answer}


def status_of(base_url, api_key, model, prompt, body, route="chat/completions", **row):
    """A good call, then the body under test: its status and message."""
    http = httpx.Client(headers={"Authorization": f"Bearer {api_key}"}, timeout=60)
    first = http.post(f"{base_url}/chat/completions", json={"model": model, "messages": USER}).json()
    said = http.post(f"{base_url}/{route}", json=dict({"model": model}, **body))
    return {"status": said.status_code, "said": said.json(), "first": first}


def impatient(base_url, api_key, model, prompt, stream=False, **row):
    """A client that gives up on a slow answer (after 1 s) and retries: the answer it never got is not trained."""
    client = _client(base_url, api_key, timeout=1.0, max_retries=4)
    if stream:
        chunks = list(client.chat.completions.create(model=model, messages=USER, stream=True))
        return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    return client.chat.completions.create(model=model, messages=USER).choices[0].message.content


def responses_cut(base_url, api_key, model, prompt, stream=False, **row):
    from openai.types.responses import Response

    client = _client(base_url, api_key)
    if stream:
        events = list(client.responses.create(model=model, input="Hi", max_output_tokens=2, stream=True))
        return {"last": events[-1].type, "status": events[-1].response.status,
                "reason": events[-1].response.incomplete_details.reason}
    answer = client.responses.create(model=model, input="Hi", max_output_tokens=2)
    Response.model_validate(answer.model_dump())
    return {"status": answer.status, "reason": answer.incomplete_details.reason}


def with_tools(base_url, api_key, model, prompt, tools, choice, **row):
    message = _client(base_url, api_key).chat.completions.create(model=model, messages=USER, tools=tools,
                                                                 tool_choice=choice).choices[0]
    return {"calls": [c.model_dump() for c in message.message.tool_calls or []], "text": message.message.content,
            "finish": message.finish_reason}
'''

ADD = {"type": "function", "function": {"name": "add", "description": "Add two integers.", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}


class Script:
    """A scripted model: answers ``answer`` (its tokens, then the end-of-turn token), cut to the request's
    ``max_tokens`` (finish ``length``); log-prob -0.5 per token. ``context``: like a vLLM server, a prompt plus
    ``max_tokens`` longer than this is refused with the server's 400. ``delay_s``: seconds the first request takes."""

    def __init__(self, tokenizer, answer="Hello there", context=None, delay_s=0.0, max_prompt_length=None):
        self.tokenizer, self.eos_ids, self.answer = tokenizer, {tokenizer.eos_token_id}, answer
        self.context, self.delay_s, self.max_prompt_length, self.requests = context, delay_s, max_prompt_length, []

    async def agenerate(self, prompt_ids, n=1, max_tokens=16, **kwargs):
        from grpo_rollout.generation.base import GenerationResult
        from grpo_rollout.generation.vllm_client import ServerError

        self.requests.append({"prompt": len(prompt_ids[0]), "max_tokens": max_tokens})
        if max_tokens < 1:
            raise ValueError(f"max_tokens={max_tokens}")  # what the real clients do
        if self.context and len(prompt_ids[0]) + max_tokens > self.context:
            raise ServerError(f"POST /generate/: HTTP 400: prompts[0] has {len(prompt_ids[0])} tokens and max_tokens "
                              f"is {max_tokens}: together more than max_model_len {self.context}", 400)
        if self.delay_s and len(self.requests) == 1:
            await asyncio.sleep(self.delay_s)
        ids = self.tokenizer.encode(self.answer, add_special_tokens=False) + [self.tokenizer.eos_token_id]
        finish = "length" if len(ids) > max_tokens else "stop"
        ids = ids[:max_tokens]
        return GenerationResult([list(p) for p in prompt_ids], [ids] * n, [[-0.5] * len(ids)] * n, [finish] * n)


def play(tokenizer, tmp_path, function, rows, client=None, **kwargs):
    from grpo_rollout.rollouts.agent import agent_rollout
    from grpo_rollout.rollouts.run_end import end_run

    (tmp_path / "edges.py").write_text(AGENTS)
    client = client or Script(tokenizer)
    settings = {"max_completion_length": 200, **kwargs}
    try:
        return agent_rollout(["Hi"] * len(rows), client=client, tokenizer=tokenizer, n=1,
                             agent=f"edges.py:{function}", base_dir=str(tmp_path), rows=rows, **settings)
    finally:
        end_run()


def answer_tokens(tokenizer, text="Hello there"):
    return len(tokenizer.encode(text, add_special_tokens=False)) + 1
