"""Issue 32.3 in training: each completion trains with the advantage its estimator gives (RLOO's leave-one-out, a
user's function), read back from completions.jsonl, on the tiny GPT-2 and the Llama-shaped model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grpo_rollout.trainer import train
from grpo_rollout.trainer.reporting.progress import RichReporter
from tiny_model import tiny_config

pytestmark = pytest.mark.model

ADVANTAGES = '''
def centred_twice(rewards, num_generations):
    """2 × (r - the group's mean): a user's own advantages."""
    groups = rewards.view(-1, num_generations)
    return (2 * (groups - groups.mean(dim=1, keepdim=True))).reshape(-1)
'''


def _groups(out: Path, size: int):
    lines = [json.loads(x) for x in (out / "completions.jsonl").read_text().splitlines()]
    return [lines[i:i + size] for i in range(0, len(lines), size)]


@pytest.mark.parametrize("model", ["tiny_model", "tiny_gpt2"])
def test_rloo_trains_each_completion_with_its_leave_one_out_advantage(tmp_path, model, request):
    cfg = tiny_config(tmp_path, request.getfixturevalue(model), training={"max_steps": 2, "advantage": "rloo"})
    result = train(cfg, base_dir=tmp_path, reporter=RichReporter(quiet=True))
    assert len(result.history) == 2 and all(m["loss"] == m["loss"] for m in result.history)
    groups = _groups(tmp_path / "out", 8)
    assert len(groups) == 2 * 4
    for group in groups:
        rewards = [c["reward"] for c in group]
        for i, c in enumerate(group):
            others = (sum(rewards) - rewards[i]) / 7
            assert c["advantage"] == pytest.approx(rewards[i] - others, abs=1e-5)


def test_a_users_advantage_function_trains(tmp_path, tiny_model):
    (tmp_path / "advantages.py").write_text(ADVANTAGES)
    cfg = tiny_config(tmp_path, tiny_model, training={"max_steps": 2,
                                                     "advantage_function": str(tmp_path / "advantages.py") +
                                                     ":centred_twice"})
    result = train(cfg, base_dir=tmp_path, reporter=RichReporter(quiet=True))
    assert len(result.history) == 2
    for group in _groups(tmp_path / "out", 8):
        mean = sum(c["reward"] for c in group) / 8
        assert [c["advantage"] for c in group] == pytest.approx([2 * (c["reward"] - mean) for c in group], abs=1e-5)
