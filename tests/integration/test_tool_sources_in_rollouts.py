"""The tool loop takes its tools from the registered tool sources, never from an integration it imports: a source
registered by the test is played like TRL's and MCP's are, and a name two sources give is refused naming both."""

from __future__ import annotations

from pathlib import Path

import pytest
from environment_factory_helpers import ENVS, counter_or_notes
from scripted_client import ScriptedClient
from transformers import AutoTokenizer

from grpo_rollout.rollouts import tool_sources
from grpo_rollout.rollouts.contract import RolloutError
from grpo_rollout.rollouts.tool_calling import tool_calling_rollout
from grpo_rollout.rollouts.tool_sources import EpisodeTools, ToolSource


def increment(step: int) -> str:
    """Add to a counter kept by the source.

    Args:
        step: how much to add
    """
    return f"counter={step}"


class Room:
    """The environment a test source hands each episode."""


def test_a_registered_source_gives_each_episode_its_tools_observation_and_environment(monkeypatch, tiny_model):
    started = []

    def start(spec, begin):
        started.append((spec, begin.num_prompts, begin.n, begin.rows))
        return [EpisodeTools({"increment": increment}, "a test source", observation=" Reach 3.", environment=Room())
                for _ in range(begin.num_prompts * begin.n)]

    monkeypatch.setitem(tool_sources._SOURCES, "mcp_servers", ToolSource("mcp_servers", start, lambda *_: []))
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    client = ScriptedClient(tokenizer, counter_or_notes)
    out = tool_calling_rollout([[{"role": "user", "content": "Count."}]], client=client, tokenizer=tokenizer, n=2,
                               rows=[{"prompt": "Count.", "target": 3}], mcp_servers=["spec"],
                               max_completion_length=96, tool_prompt="system")
    assert started == [(["spec"], 1, 2, [{"prompt": "Count.", "target": 3}])]
    assert out["num_tool_calls"] == [1, 1] and out["tool_calls/increment"] == [1, 1]
    assert [r["content"] for r in out["tool_results"][0]] == ["counter=3"]
    assert all(isinstance(e, Room) for e in out["environments"]) and len(set(map(id, out["environments"]))) == 2
    assert out["first_prompt"][0][-1] == {"role": "user", "content": "Count. Reach 3."}


def test_an_environment_method_named_like_an_mcp_tool_is_refused_naming_both(monkeypatch, tmp_path, tiny_model):
    envs = Path(tmp_path) / "envs.py"
    envs.write_text(ENVS)
    served = EpisodeTools({"increment": increment}, "an MCP server")
    mcp = ToolSource("mcp_servers", lambda spec, b: [served] * (b.num_prompts * b.n), lambda *_: [])
    monkeypatch.setitem(tool_sources._SOURCES, "mcp_servers", mcp)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    with pytest.raises(RolloutError, match="CounterEnv has a tool named 'increment', as an MCP server has"):
        tool_calling_rollout(["Count."], client=ScriptedClient(tokenizer, counter_or_notes), tokenizer=tokenizer, n=1,
                             rows=[{"prompt": "Count.", "target": 2}], mcp_servers=["spec"],
                             environment_factory=f"{envs}:CounterEnv")
