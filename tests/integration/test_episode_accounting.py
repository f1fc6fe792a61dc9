"""Issue 41.3: one misbehaving model through every integration that plays tools from this process. The model calls
``add`` on every turn and never answers; the built-in tool-calling rollout (a Python tool), TRL's
``environment_factory`` (the same tool as an environment method), an MCP server's tool, an agent that owns its loop
(the recording endpoint, the same tool in its request) and the same loop as a verifiers 0.4 harness (its calls through
verifiers' interception layer to the endpoint) must play it token for token alike: the same sampled and
inserted tokens and masks, the same ``max_tokens`` asked of the model on each call, the episode ended by the same
token budget for the same reason, the weight versions recorded, the episode's and each call's (issue 51.18), and the
same prompt, but for MCP's own wording of the tool's description."""

from __future__ import annotations

import sys

import pytest

from grpo_rollout.generation.base import GenerationResult

pytestmark = [pytest.mark.model]

CALL = '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>'
TOOL = '''
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first
        b: the second
    """
    return a + b


class AddEnv:
    def reset(self, **row):
        return None

    def add(self, a: int, b: int) -> int:
        """Add two integers.

        Args:
            a: the first
            b: the second
        """
        return a + b
'''
MCP_SERVER = '''
from mcp.server.mcpserver import MCPServer

server = MCPServer("add")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


if __name__ == "__main__":
    server.run("stdio")
'''
AGENT = '''
import json
from openai import OpenAI
from grpo_rollout.rollouts.tool_running import tool_schema
from tools import add


def endless(base_url, api_key, model, prompt, **row):
    """Runs every call the model makes and never stops on its own."""
    client = OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    messages = [{"role": "user", "content": prompt}]
    while True:
        message = client.chat.completions.create(model=model, messages=messages, tools=[tool_schema(add)]).choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls or []:
            result = add(**json.loads(call.function.arguments))
            messages.append({"role": "tool", "tool_call_id": call.id, "content": str(result)})
'''

TASKSET = '''
import json
import verifiers.v1 as vf
from openai import AsyncOpenAI
from grpo_rollout.rollouts.tool_running import tool_schema
from tools import add


class Endless(vf.Taskset):
    def load(self):
        yield vf.Task(vf.TaskData(prompt="What is 1 + 2?"), self.config.task)


class EndlessHarnessConfig(vf.HarnessConfig):
    pass


class EndlessHarness(vf.Harness[EndlessHarnessConfig]):
    """The agent's loop above, as a verifiers harness (its calls pass verifiers' interception layer)."""
    EXECUTES_CODE = NEEDS_CONTAINER = False

    async def launch(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data, **kw):
        client = AsyncOpenAI(base_url=endpoint, api_key=secret, max_retries=0)
        messages = [{"role": "user", "content": data.prompt}]
        while True:
            answer = await client.chat.completions.create(model=ctx.model, messages=messages, tools=[tool_schema(add)])
            message = answer.choices[0].message
            messages.append(message.model_dump(exclude_none=True))
            for call in message.tool_calls or []:
                result = add(**json.loads(call.function.arguments))
                messages.append({"role": "tool", "tool_call_id": call.id, "content": str(result)})


__all__ = ["Endless", "EndlessHarness"]
'''


class CallingClient:
    """Answers every request with the same tool call, cut at the request's ``max_tokens``; log-prob -0.5 per token,
    stamped with weight version 3 + the calls the prompt already holds (the first call 3, the second 4, ...: each
    call's own version, whatever order the episodes' calls arrive in)."""

    max_prompt_length = None

    def __init__(self, tokenizer):
        self.eos_ids, self.tokens, self.asked = {tokenizer.eos_token_id}, tokenizer.encode(CALL, add_special_tokens=False), []
        self.tokenizer = tokenizer

    async def agenerate(self, prompt_ids, n=1, max_tokens=None, **kwargs):
        self.asked.append(max_tokens)
        cut = self.tokens[:max_tokens]
        finish = "length" if len(cut) < len(self.tokens) else "stop"
        version = 3 + self.tokenizer.decode(prompt_ids[0]).rsplit("What is 1 + 2?", 1)[-1].count('"name": "add"')
        return GenerationResult([list(p) for p in prompt_ids], [cut] * n, [[-0.5] * len(cut)] * n, [finish] * n,
                                weight_version=version, weight_version_end=version)


@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model)


def _play(how, tokenizer, folder, budget):
    from grpo_rollout.rollouts.agent import agent_rollout
    from grpo_rollout.rollouts.run_end import end_run
    from grpo_rollout.rollouts.tool_calling import tool_calling_rollout

    (folder / "tools.py").write_text(TOOL)
    (folder / "agent.py").write_text(AGENT)
    client = CallingClient(tokenizer)
    common = dict(client=client, tokenizer=tokenizer, n=2, max_completion_length=budget, tool_prompt="system", seed=1,
                  base_dir=str(folder), rows=[{"prompt": "What is 1 + 2?"}])
    try:
        if how == "agent":
            out = agent_rollout(["What is 1 + 2?"], agent="agent.py:endless", **common)
        elif how == "verifiers":
            from grpo_rollout.data.verifiers_tasks import task_rows
            from grpo_rollout.integrations.verifiers.verifiers import verifiers_rollout

            (folder / "endless_taskset.py").write_text(TASKSET)
            sys.path.insert(0, str(folder))  # the harness imports tools.py, as the agent does
            out = verifiers_rollout(["What is 1 + 2?"], **dict(common, rows=task_rows(str(folder / "endless_taskset.py"),
                                                                                   {})))
        else:
            (folder / "mcp_server.py").write_text(MCP_SERVER)
            source = {"tools": {"tools": [f"{folder / 'tools.py'}:add"]},
                      "environment_factory": {"environment_factory": f"{folder / 'tools.py'}:AddEnv"},
                      "mcp": {"mcp_servers": [{"command": sys.executable, "args": [str(folder / "mcp_server.py")]}]}}[how]
            out = tool_calling_rollout(["What is 1 + 2?"], max_turns=100, **source, **common)
    finally:
        end_run()
    return out, client.asked


@pytest.mark.parametrize("budget, reason", [(120, "budget_reply"), (97, "budget_turn")])
def test_a_model_that_never_stops_calling_is_played_alike_everywhere(tokenizer, tmp_path, budget, reason):
    played = {how: _play(how, tokenizer, tmp_path, budget)
              for how in ("tools", "environment_factory", "mcp", "agent", "verifiers")}
    keys = ("prompt_ids", "completion_ids", "completion_mask", "logprobs", "truncated", "end_reason", "num_turns",
            "weight_versions", "call_weight_versions")
    reference, asked = played["tools"]
    assert reference["end_reason"] == [reason] * 2 and reference["truncated"] == [True] * 2
    assert all(len(ids) <= budget for ids in reference["completion_ids"]) and reference["num_turns"] == [3] * 2
    assert list(map(tuple, reference["weight_versions"])) == [(3, 5)] * 2  # the episode's oldest and newest
    # issue 51.18: each call's version, on every path, in the same shape (the built-in paths kept only the span)
    assert reference["call_weight_versions"] == [[[3, 3], [4, 4], [5, 5]]] * 2
    for how, (out, their_asked) in played.items():
        same = [k for k in keys if how != "mcp" or k != "prompt_ids"]
        assert {k: out[k] for k in same} == {k: reference[k] for k in same}, how
        assert sorted(their_asked) == sorted(asked), how  # the same max_tokens asked: what is left of the budget
