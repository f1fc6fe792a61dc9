"""Config fuzzing (issue 9): random mutations of every config in configs/ never give a traceback — from loading, from
every check, from `grpo-rollout validate-config`, or from `grpo-rollout train` refusing the config."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from typer.testing import CliRunner

from fuzz_strategies import mutated
from grpo_rollout.cli.main import app
from grpo_rollout.preflight import check_config

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))
RUNNER = CliRunner()
pytestmark = pytest.mark.slow  # ~1 min: 120 configs through every check and the CLI


@pytest.mark.parametrize("source", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_mutated_configs_never_give_a_traceback(source, tmp_path_factory, monkeypatch):
    monkeypatch.chdir(ROOT)  # the configs name example files relative to the repository root
    # a mutated data.train reads like a hub dataset name: answer "not found" at once instead of retrying the network
    import datasets
    import huggingface_hub

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    # MCP servers are not started here (~1 s each, three checks per example; a mutated command may wait until its
    # startup timeout): their entries are still checked; starting them is tests/integration/test_mcp_tools.py's job
    from grpo_rollout.integrations.mcp import mcp_source, mcp_tools

    class NotStarted(mcp_tools.MCPHost):
        def __init__(self, specs):
            self.specs = specs

        def start(self):
            return self

        def close(self):
            pass

    monkeypatch.setattr(mcp_source, "MCPHost", NotStarted)
    original = yaml.safe_load(source.read_text())
    folder = tmp_path_factory.mktemp("fuzz")

    @settings(max_examples=40, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
    @given(config=mutated(original))
    def check(config):
        path = folder / "config.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        loaded, problems = check_config(path)  # must not raise
        assert all(p.message for p in problems)
        result = RUNNER.invoke(app, ["validate-config", str(path), "--quiet"])
        assert result.exit_code in (0, 1) and not _crashed(result), result.output[-2000:]
        assert (result.exit_code == 1) == any(p.is_error for p in problems)
        if result.exit_code == 1:  # train refuses the same config with the same table, before loading anything
            result = RUNNER.invoke(app, ["train", str(path)])
            assert result.exit_code == 1 and not _crashed(result) and "Not starting" in result.output

    check()


def _crashed(result) -> bool:
    return result.exception is not None and not isinstance(result.exception, SystemExit)
