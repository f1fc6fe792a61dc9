"""The tool-calling rollout's tool sources (rollouts/tool_sources.py): merging an episode's tools, the observation
appended to the prompt, the registry the integrations fill when ``grpo_rollout`` is imported."""

from __future__ import annotations

import subprocess
import sys

import pytest

from grpo_rollout.rollouts.contract import RolloutError
from grpo_rollout.rollouts.tool_sources import EpisodeTools, merged_tools, tool_source, with_observation


def double(x: int) -> int:
    return 2 * x


def test_an_episodes_tools_are_every_sources_in_order():
    merged = merged_tools([EpisodeTools({"double": double}, "rollout.kwargs.tools"),
                           EpisodeTools({"triple": abs}, "an MCP server"), EpisodeTools({}, "CounterEnv")])
    assert list(merged) == ["double", "triple"] and merged["double"] is double


def test_two_sources_with_one_tool_name_are_both_named():
    with pytest.raises(RolloutError, match="CounterEnv has a tool named 'double', as an MCP server has; rename one"):
        merged_tools([EpisodeTools({"double": double}, "an MCP server"), EpisodeTools({"double": abs}, "CounterEnv")])
    with pytest.raises(RolloutError, match="no tools: list them in rollout.kwargs.tools"):
        merged_tools([EpisodeTools({}, "rollout.kwargs.tools")])


def test_an_observation_is_appended_to_the_last_user_message():
    chat = [{"role": "system", "content": "S"}, {"role": "user", "content": "Count."},
            {"role": "assistant", "content": "ok"}]
    assert with_observation(chat, None) is chat
    assert with_observation(chat, " To 3.")[1] == {"role": "user", "content": "Count. To 3."}
    assert with_observation(chat, " To 3.")[2] == chat[2] and chat[1]["content"] == "Count."
    assert with_observation([{"role": "system", "content": "S"}], "Go.")[-1] == {"role": "user", "content": "Go."}


def test_the_integrations_register_their_sources_and_an_unknown_key_is_named():
    assert tool_source("environment_factory").key == "environment_factory"
    assert tool_source("mcp_servers").key == "mcp_servers"
    with pytest.raises(RolloutError, match="rollout.kwargs.web_tools: no tool source is registered"):
        tool_source("web_tools")


def test_importing_only_the_tool_calling_rollout_registers_the_sources():
    code = ("from grpo_rollout.rollouts.tool_calling import tool_calling_rollout as t\n"
            "print(t.validate_kwargs({'environment_factory': 5}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "rollout.kwargs.environment_factory" in out.stdout and "must be a class name" in out.stdout
