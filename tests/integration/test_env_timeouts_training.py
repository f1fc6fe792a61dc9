"""Issue 39.8 in a run: a TRL environment whose ``reset`` hangs stopped ``train`` and ``--dry-run`` without a word
(minutes), and Ctrl-C did not end the process. Now the reset fails the episode after ``rollout.env_timeout_s``
(stopping the run, or played again with ``rollout.on_error: retry``), and one SIGINT ends the CLI within seconds with
the finished steps saved and no "Exception ignored" at exit."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from grpo_rollout.cli.main import app
from grpo_rollout.config import to_yaml
from grpo_rollout.rollouts.env_timeouts import EnvTimeout
from grpo_rollout.trainer import train
from grpo_rollout.trainer.reporting.progress import RichReporter
from tiny_model import tiny_config

pytestmark = pytest.mark.model

ENV = '''
import time

HANG = HANG_AT  # the reset calls (1-based, counted in this process) that never return
CALLS = []


class HangingEnv:
    def reset(self, **row):
        CALLS.append(row["prompt"])
        if len(CALLS) in HANG:
            time.sleep(10 ** 6)
        return " Go."

    def increment(self, step: int) -> str:
        """Add to the counter.

        Args:
            step: how much to add
        """
        return "ok"


def zero(completions, **kwargs):
    return [0.0] * len(completions)
'''


def _config(root: Path, model: Path, hang_at: str, **rollout):
    (root / "hanging_env.py").write_text(ENV.replace("HANG_AT", hang_at))
    cfg = tiny_config(root, model, rewards_source=ENV.replace("HANG_AT", "()"), reward="zero",
                      rollout={"function": "grpo_rollout.rollouts.tool_calling:tool_calling_rollout",
                               "kwargs": {"environment_factory": f"{root / 'hanging_env.py'}:HangingEnv",
                                          "max_turns": 1}, **rollout},
                      sampling={"num_generations": 2, "max_completion_length": 4},
                      training={"max_steps": 3, "prompts_per_step": 2, "micro_batch_size": 4})
    (root / "config.yaml").write_text(to_yaml(cfg))
    return cfg


def test_a_reset_that_hangs_stops_the_run_naming_the_class_the_method_and_the_key(tmp_path, tiny_model):
    cfg = _config(tmp_path, tiny_model, "range(1, 100)", env_timeout_s=1)
    start = time.monotonic()
    with pytest.raises(EnvTimeout, match=r"HangingEnv\.reset did not return within rollout\.env_timeout_s = 1 s "
                                         r"\(at .*hanging_env\.py:\d+ in reset\)"):
        train(cfg, base_dir=tmp_path, reporter=RichReporter(quiet=True))
    assert time.monotonic() - start < 120


def test_with_on_error_retry_a_hung_reset_is_a_failed_episode_played_again(tmp_path, tiny_model):
    cfg = _config(tmp_path, tiny_model, "(2,)", env_timeout_s=1, on_error="retry")
    result = train(cfg, base_dir=tmp_path, reporter=RichReporter(quiet=True))
    assert result.steps == 3
    # step 1's call failed (counted as one group: which one is not known) and both its groups were played again
    assert [(m["episodes/failed"], m["episodes/retried"]) for m in result.history] == [(2, 4), (0, 0), (0, 0)]


def test_the_dry_run_says_which_reset_hangs(tmp_path, tiny_model):
    _config(tmp_path, tiny_model, "range(1, 100)")
    result = CliRunner().invoke(app, ["validate-config", str(tmp_path / "config.yaml"), "--dry-run",
                                      "rollout.env_timeout_s=1"], terminal_width=200)
    flat = " ".join(result.output.replace("│", " ").split())
    assert result.exit_code == 1, result.output
    assert "Dry run failed: EnvTimeout" in flat and "Traceback" not in flat
    assert "HangingEnv.reset did not return within rollout.env_timeout_s = 1 s" in flat


def test_one_ctrl_c_ends_train_within_seconds_with_the_finished_step_saved(tmp_path, tiny_model):
    """Step 1's 4 resets return, step 2's first hangs (the default limit, 300 s, is far off): one SIGINT."""
    _config(tmp_path, tiny_model, "range(5, 100)")
    proc = subprocess.Popen([sys.executable, "-m", "grpo_rollout", "train", "config.yaml"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    metrics = tmp_path / "out" / "metrics.jsonl"
    deadline = time.monotonic() + 300
    while not (metrics.exists() and metrics.read_text().strip()) and time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read()
        time.sleep(0.2)
    time.sleep(2)  # into step 2's reset
    proc.send_signal(signal.SIGINT)
    sent = time.monotonic()
    try:
        out, _ = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert time.monotonic() - sent < 10, out
    assert proc.returncode == 130, out
    assert "Interrupted." in out and "Exception ignored" not in out and "Traceback" not in out
    assert [json.loads(x)["step"] for x in metrics.read_text().splitlines()] == [1]
    assert (tmp_path / "out" / "checkpoint-1" / "trainer_state.pt").is_file() and "--resume latest" in out
    assert yaml.safe_load((tmp_path / "config.yaml").read_text())["rollout"]["env_timeout_s"] == 300
