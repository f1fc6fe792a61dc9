"""`grpo-rollout train` as a user runs it: user mistakes end in a message naming the function, never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml


pytestmark = pytest.mark.model

REWARDS = '''
def ok(completions, **kwargs):
    return [1.0 if len(c) % 2 else 0.0 for c in completions]

def breaks_at_step_two(completions, step, **kwargs):
    if step == 1:
        raise KeyError("answer")
    return [0.5] * len(completions)

def wrong_length(completions, **kwargs):
    return [1.0]

def needs_extra(completions, tool_calls, **kwargs):
    return [0.0] * len(completions)
'''


def _run(tmp_path: Path, model: Path, reward: str, *extra: str):
    (tmp_path / "rewards.py").write_text(REWARDS)
    (tmp_path / "data.jsonl").write_text("".join(json.dumps({"prompt": f"Say {i}."}) + "\n" for i in range(4)))
    cfg = {"model": {"name_or_path": str(model)}, "data": {"train": "data.jsonl"},
           "rollout": {"function": "my_rollout.py:rollout"} if "rollout" in extra else {},
           "rewards": [{"function": f"rewards.py:{reward}"}],
           "sampling": {"num_generations": 2, "max_completion_length": 4},
           "training": {"output_dir": "out", "max_steps": 3, "prompts_per_step": 2, "micro_batch_size": 4},
           "vllm": {"mode": "off"}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    return subprocess.run([sys.executable, "-m", "grpo_rollout.cli.main", "train", "config.yaml"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)


def test_reward_raising_mid_run_keeps_finished_steps(tmp_path, tiny_model):
    proc = _run(tmp_path, tiny_model, "breaks_at_step_two")
    assert proc.returncode == 1
    assert "Traceback" not in proc.stdout + proc.stderr
    assert "breaks_at_step_two" in proc.stdout and "KeyError" in proc.stdout
    assert (tmp_path / "out" / "checkpoint-1" / "trainer_state.pt").is_file()
    assert "--resume latest" in proc.stdout


def test_reward_returning_wrong_count_names_the_function(tmp_path, tiny_model):
    proc = _run(tmp_path, tiny_model, "wrong_length")
    assert proc.returncode == 1 and "Traceback" not in proc.stdout + proc.stderr
    flat = " ".join(proc.stdout.replace("│", " ").split())  # the message is in a panel: undo its wrapping
    assert "wrong_length" in flat and "1 scores for 4 completions" in flat
    line = REWARDS.splitlines().index("def wrong_length(completions, **kwargs):") + 1
    assert f"rewards.py:{line})returned" in flat.replace(" ", "")  # where the function is (issue 19)
    assert "one score (a float, or None for no opinion) per completion" in flat


def test_rollout_missing_an_extra_a_reward_needs(tmp_path, tiny_model):
    (tmp_path / "my_rollout.py").write_text(
        "from grpo_rollout.rollouts.single_turn import single_turn\n"
        "def rollout(prompts, client, **kw):\n    return single_turn(prompts, client=client, **kw)\n")
    proc = _run(tmp_path, tiny_model, "needs_extra", "rollout")
    # validate-config could only warn (a user rollout's extras are known at run time); the first step fails clearly
    assert "warning" in proc.stdout and proc.returncode == 1
    assert "requires `tool_calls`" in proc.stdout and "Traceback" not in proc.stdout + proc.stderr


def test_successful_run_prints_summary(tmp_path, tiny_model):
    proc = _run(tmp_path, tiny_model, "ok")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Training finished" in proc.stdout and "checkpoint-3" in proc.stdout
    assert len((tmp_path / "out" / "metrics.jsonl").read_text().splitlines()) == 3
    # stdout is a pipe: plain lines, the clock on each step's row, the samples of each step, no live bar
    out = proc.stdout
    assert "Training steps 1-3" in out and "━" not in out
    assert "[epoch 1.50/1.50 · 3/3 " in out  # 4 rows, 2 prompts per step: 3 steps are 1.5 epochs
    assert "reward (mean of first step): 0.500" in out  # 3 steps: the first and the last one compared
    assert out.count("sample: reward=") == 3 * 4  # training.log_completions (default 4) per logged step
    assert "s/step (generation" in out and "plot " in out
