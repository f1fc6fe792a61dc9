"""Who may import whom: import-linter's contracts in pyproject.toml (each layer imports only those below it; config/
imports nothing else of grpo-rollout) hold, and an upward import breaks them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def lint_imports(package_root: Path) -> subprocess.CompletedProcess:
    """``lint-imports`` on the ``grpo_rollout`` found in ``package_root``, with the repository's contracts."""
    env = {**os.environ, "PYTHONPATH": str(package_root)}
    return subprocess.run([str(Path(sys.executable).with_name("lint-imports")), "--config",
                           str(REPO / "pyproject.toml"), "--no-cache"], cwd=package_root, env=env,
                          capture_output=True, text=True, timeout=300)


def test_the_import_contracts_hold():
    result = lint_imports(REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: 2 kept, 0 broken." in result.stdout


def test_an_upward_import_from_config_breaks_them(tmp_path):
    shutil.copytree(REPO / "grpo_rollout", tmp_path / "grpo_rollout", ignore=shutil.ignore_patterns("__pycache__"))
    problems = tmp_path / "grpo_rollout" / "config" / "problems.py"
    problems.write_text(problems.read_text() + "\nfrom ..trainer import checkpoint  # noqa: E402,F401\n")
    result = lint_imports(tmp_path)
    assert result.returncode == 1, result.stdout
    assert "Contracts: 0 kept, 2 broken." in result.stdout
    assert "grpo_rollout.config.problems -> grpo_rollout.trainer.checkpoint" in result.stdout
