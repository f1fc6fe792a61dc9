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


def test_the_entropy_bonus_raises_the_entropy(tmp_path, peaked_model):
    plain = _train(tmp_path / "plain", peaked_model, sampling={"top_k": 0}, training={"max_steps": 3})
    bonus = _train(tmp_path / "bonus", peaked_model, sampling={"top_k": 0}, training={"max_steps": 3,
                                                                                    "entropy_coef": 1.0})
    assert bonus[0]["entropy"] == pytest.approx(plain[0]["entropy"], rel=1e-6)  # measured before any update
    assert bonus[2]["entropy"] > plain[2]["entropy"] + 0.01


def test_the_bonus_with_lora_and_bfloat16(tmp_path, tiny_model):
    history = _train(tmp_path, tiny_model, dtype="bfloat16", lora_r=4, training={"max_steps": 2, "entropy_coef": 0.01})
    assert all(math.isfinite(m["entropy"]) and m["entropy"] > 0 and math.isfinite(m["loss"]) for m in history)
