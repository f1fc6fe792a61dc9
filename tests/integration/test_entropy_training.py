"""Issue 32.1 in training: the entropy is logged every step on both tiny models, the bonus raises it (on the peaked
model, whose entropy is far from its maximum), and it meets LoRA and bfloat16 compute (two ranks against one
process: test_distributed.py)."""

from __future__ import annotations

import math

import pytest

from grpo_rollout.trainer import train
from grpo_rollout.trainer.reporting.progress import RichReporter
from tiny_model import tiny_config

pytestmark = pytest.mark.model


def _train(root, path, dtype="float32", lora_r=0, **sections):
    root.mkdir(parents=True, exist_ok=True)
    cfg = tiny_config(root, path, **sections)
    cfg.model.dtype, cfg.model.lora.r = dtype, lora_r
    return train(cfg, base_dir=root, reporter=RichReporter(quiet=True)).history


@pytest.mark.parametrize("model", ["tiny_model", "tiny_gpt2"])
def test_the_entropy_is_logged_each_step_between_the_sequence_extremes(tmp_path, model, request):
    history = _train(tmp_path, request.getfixturevalue(model), training={"max_steps": 2})
    for m in history:
        assert 0 < m["entropy/seq_min"] <= m["entropy"] <= m["entropy/seq_max"] < math.log(49152)


def _entropy_after(run_dir):
    """The mean entropy (nats) of the trained policy at step 1's trained tokens (its own rollout records)."""
    import json

    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(run_dir / "checkpoint-1")
    total, count = 0.0, 0
    for line in (run_dir / "rollouts" / "step_1.jsonl").read_text().splitlines():
        row = json.loads(line)
        with torch.no_grad():
            logits = model(torch.tensor([row["prompt_ids"] + row["completion_ids"]])).logits[0]
        logps = logits[len(row["prompt_ids"]) - 1:-1].log_softmax(-1)
        entropy = -(logps.exp() * logps).sum(-1)
        trained = torch.tensor([c == "1" for c in row["completion_mask"]])
        total, count = total + entropy[trained].sum().item(), count + int(trained.sum())
    return total / count


def test_the_entropy_bonus_raises_the_entropy(tmp_path, peaked_model):
    """One update with and without the bonus on the same batch (the peaked model's later steps have no reward
    variance: the plain run makes no update there, nor measures an entropy)."""
    settings = {"max_steps": 1, "save_steps": 1, "save_rollouts": "every"}
    plain = _train(tmp_path / "plain", peaked_model, sampling={"top_k": 0}, training=settings)
    bonus = _train(tmp_path / "bonus", peaked_model, sampling={"top_k": 0}, training={**settings, "entropy_coef": 1.0})
    assert bonus[0]["entropy"] == pytest.approx(plain[0]["entropy"], rel=1e-6)  # measured before any update
    assert _entropy_after(tmp_path / "bonus" / "out") > _entropy_after(tmp_path / "plain" / "out") + 0.01


def test_the_bonus_with_lora_and_bfloat16(tmp_path, tiny_model):
    history = _train(tmp_path, tiny_model, dtype="bfloat16", lora_r=4, training={"max_steps": 2, "entropy_coef": 0.01})
    assert all(math.isfinite(m["entropy"]) and m["entropy"] > 0 and math.isfinite(m["loss"]) for m in history)
