"""The resume hint after an early stop is the whole command, overrides included (issue 19): run literally, it
continues the same run, not another one found in the default output_dir."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from grpo_rollout.trainer.reporting.resume_hint import resume_command

REWARDS = '''
import os

def stops_at_step_two(completions, step, **kwargs):
    if step == 1 and not os.environ.get("NO_STOP"):
        raise KeyboardInterrupt  # what Ctrl-C does mid-step
    return [1.0 if len(c) % 2 else 0.0 for c in completions]
'''


def test_resume_command_quotes_and_keeps_every_override():
    cmd = resume_command(Path("my configs/run.yaml"), ["training.output_dir=outputs/a b", "sampling.seed=3"])
    assert shlex.split(cmd) == ["grpo-rollout", "train", "my configs/run.yaml", "training.output_dir=outputs/a b",
                                "sampling.seed=3", "--resume", "latest"]
    assert resume_command(Path("c.yaml"), [], processes=2).startswith("torchrun --nproc-per-node 2 -m grpo_rollout ")


@pytest.mark.model
def test_ctrl_c_prints_a_command_that_resumes_the_same_run(tmp_path, tiny_model):
    model = tiny_model
    (tmp_path / "rewards.py").write_text(REWARDS)
    (tmp_path / "data.jsonl").write_text("".join(json.dumps({"prompt": f"Say {i}."}) + "\n" for i in range(4)))
    cfg = {"model": {"name_or_path": str(model)}, "data": {"train": "data.jsonl"},
           "rewards": [{"function": "rewards.py:stops_at_step_two"}],
           "sampling": {"num_generations": 2, "max_completion_length": 4},
           "training": {"output_dir": "out/default", "max_steps": 3, "prompts_per_step": 2, "micro_batch_size": 4},
           "vllm": {"mode": "off"}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    (tmp_path / "out" / "default" / "checkpoint-3").mkdir(parents=True)  # another, finished run in the default folder
    run = subprocess.run([sys.executable, "-m", "grpo_rollout", "train", "config.yaml", "training.output_dir=out/mine",
                          "training.max_steps=3"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert run.returncode == 130, run.stdout + run.stderr
    out = " ".join(run.stdout.split())
    expected = "grpo-rollout train config.yaml training.output_dir=out/mine training.max_steps=3 --resume latest"
    assert f"Continue this run with: {expected}" in out, out
    assert (tmp_path / "out" / "mine" / "checkpoint-1").is_dir()
    # run literally, the printed command continues this run from step 1
    args = shlex.split(expected)[1:]
    again = subprocess.run([sys.executable, "-m", "grpo_rollout", *args], cwd=tmp_path, capture_output=True,
                           text=True, timeout=600, env={**os.environ, "NO_STOP": "1"})
    assert again.returncode == 0, again.stdout + again.stderr
    assert "Resuming from out/mine/checkpoint-1" in " ".join(again.stdout.split())
    assert (tmp_path / "out" / "mine" / "checkpoint-3").is_dir()
    # the final panel names the session's first step (the issue-19 new user read "first step" as step 1)
    assert "reward (mean of first step of this session, from step 2)" in again.stdout, again.stdout
