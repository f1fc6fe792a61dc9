"""Where the integrations meet the rest: the clean-ups they register for the end of a run (rollouts/run_end.py), and
the old config paths of the adapters that moved to grpo_rollout/integrations/."""

from __future__ import annotations

import ast
import inspect

from grpo_rollout.orchestrator import stage
from grpo_rollout.rollouts import run_end
from grpo_rollout.integrations.mcp.mcp_tools import close_mcp_servers
from grpo_rollout.integrations.openenv.openenv_serving import close_openenv_servers


def test_each_clean_up_runs_once_per_run_end_in_the_order_registered(monkeypatch):
    monkeypatch.setattr(run_end, "_CLEANUPS", [])
    calls = []
    first = run_end.on_run_end(lambda: calls.append("first"))
    run_end.on_run_end(lambda: calls.append("second"))
    assert run_end.on_run_end(first) is first  # registered again: still once
    run_end.end_run()
    run_end.end_run()
    assert calls == ["first", "second", "first", "second"]


def test_the_mcp_and_openenv_integrations_register_theirs_and_the_stage_ends_them(monkeypatch):
    """Issue 40.2: the orchestrator imported both adapters to close their servers; now it knows neither."""
    assert {close_mcp_servers, close_openenv_servers} <= set(run_end._CLEANUPS)
    tree = ast.parse(inspect.getsource(stage))
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert [m for m in imported if m and ("mcp" in m or "openenv" in m)] == []
    ended = []
    monkeypatch.setattr(stage, "end_run", lambda: ended.append(True))
    rollout_stage = object.__new__(stage.RolloutStage)
    rollout_stage.source, rollout_stage.client = stage.SyncSource(rollout_stage), None
    rollout_stage.close()
    assert ended == [True]


def test_a_config_naming_a_moved_integration_by_its_old_path_still_resolves():
    """Issue 40.2 moved the verifiers and OpenEnv adapters to grpo_rollout/integrations/; configs written before name
    them under grpo_rollout.rollouts (both forms of a dotted name)."""
    from grpo_rollout.integrations.openenv.openenv import openenv_rollout
    from grpo_rollout.integrations.verifiers.verifiers import verifiers_rollout
    from grpo_rollout.user_code.resolve import resolve_callable

    assert resolve_callable("grpo_rollout.rollouts.verifiers:verifiers_rollout") is verifiers_rollout
    assert resolve_callable("grpo_rollout.rollouts.openenv.openenv_rollout") is openenv_rollout
    assert resolve_callable("grpo_rollout.integrations.verifiers.verifiers:verifiers_rollout") is verifiers_rollout


def test_the_trl_and_mcp_modules_resolve_by_their_old_paths_too():
    """The TRL environment_factory and MCP modules moved from grpo_rollout/rollouts/ to grpo_rollout/integrations/."""
    from grpo_rollout.integrations.mcp.mcp_tools import mcp_tools
    from grpo_rollout.integrations.trl.environment_factory import load_factories
    from grpo_rollout.user_code.resolve import resolve_callable

    assert resolve_callable("grpo_rollout.rollouts.environment_factory:load_factories") is load_factories
    assert resolve_callable("grpo_rollout.rollouts.mcp_tools.mcp_tools") is mcp_tools
