"""The tool-calling rollout's validate_kwargs: tools that do not load or lack a schema, bad settings, prompts."""

from __future__ import annotations

from grpo_rollout.rollouts.tool_calling import tool_calling_rollout
from tool_calling_helpers import multiply  # noqa: F401 - loaded by path from here (f"{__file__}:multiply")


def test_validate_kwargs_reports_bad_tools():
    problems = tool_calling_rollout.validate_kwargs({"tools": ["no_such_module:f"], "max_turns": 0})
    assert sorted(p[0] for p in problems) == ["rollout.kwargs.max_turns", "rollout.kwargs.tools"]
    assert tool_calling_rollout.validate_kwargs({"tools": [f"{__file__}:multiply"]}) == []
    assert "no tools" in tool_calling_rollout.validate_kwargs({})[0][1]
    good = {"tools": [f"{__file__}:multiply"]}
    for bad, key, message in [({"tool_timeout_s": "fast"}, "tool_timeout_s", "must be a number of seconds > 0"),
                              ({"tool_timeout_s": 0}, "tool_timeout_s", "must be a number of seconds > 0"),
                              ({"max_turn": 3}, "max_turn", "has no setting `max_turn`"),
                              ({"tools": 5}, "tools", "must be a list of tool names"),
                              ({"system_prompt": 3}, "system_prompt", "must be text"),
                              ({"tool_prompt": "xml"}, "tool_prompt", "must be auto, template or system"),
                              ({"tool_prompt": False}, "tool_prompt", "unquoted off/on/yes/no as booleans")]:
        problems = tool_calling_rollout.validate_kwargs({**good, **bad})
        assert [(p[0], message in p[1]) for p in problems] == [(f"rollout.kwargs.{key}", True)], problems
    assert tool_calling_rollout.validate_kwargs({**good, "tool_timeout_s": None, "stop": None, "n": 8}) == []
    [(_, message, fix)] = tool_calling_rollout.validate_kwargs({"tools": [f"{__file__}:undocumented_tool"]})
    assert "JSON schema" in message and "hints/docstring" in fix
    [(key, message, _, severity)] = tool_calling_rollout.validate_kwargs({**good, "system_prompt": "Use tools."})
    assert key == "rollout.kwargs.system_prompt" and "no {tools}" in message and severity == "warning"
    assert tool_calling_rollout.validate_kwargs({**good, "system_prompt": "Tools:\n{tools}"}) == []


def undocumented_tool(a, b):
    return a + b
