"""Issue 32.2 in training: CISPO and SAPO train off-policy (two updates per batch, so ratios move off 1) on the
Llama-shaped tiny model, and the documented loss function (examples/custom_loss/loss.py) trains on the tiny GPT-2."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from grpo_rollout.trainer import train
from grpo_rollout.trainer.reporting.progress import RichReporter
from tiny_model import tiny_config

pytestmark = pytest.mark.model

REPO = Path(__file__).resolve().parents[2]


def _train(root, model, **training):
    cfg = tiny_config(root, model, training={"max_steps": 2, "num_iterations": 2, **training})
    return train(cfg, base_dir=root, reporter=RichReporter(quiet=True)).history


@pytest.mark.parametrize("loss_type", ["cispo", "sapo"])
def test_the_2026_losses_train_off_policy(tmp_path, tiny_model, loss_type):
    history = _train(tmp_path, tiny_model, loss_type=loss_type, cispo_epsilon_high=0.01)
    assert len(history) == 2
    for m in history:
        assert math.isfinite(m["loss"]) and m["grad_norm"] > 0
        assert m["ratio/max"] > 1.0  # the second update is off-policy
    if loss_type == "cispo":  # weights over 1.01 were capped (counted), their tokens still trained
        assert max(m["clip_ratio/high"] for m in history) > 0
    else:
        assert all(m["clip_ratio/region"] == 0 for m in history)  # a soft gate clips nothing


def test_the_documented_loss_function_trains(tmp_path, tiny_gpt2):
    history = _train(tmp_path, tiny_gpt2, loss_function=str(REPO / "examples/custom_loss/loss.py") +
                     ":asymmetric_clip")
    assert len(history) == 2 and all(math.isfinite(m["loss"]) and m["grad_norm"] > 0 for m in history)


def test_the_overlong_penalty_is_a_reward_of_its_own(tmp_path, tiny_model):
    """Issue 32.4: completions of up to 8 tokens with a 4-token buffer and penalty 0.5: logged apart, and the step's
    reward is the task's plus half the penalty."""
    cfg = tiny_config(tmp_path, tiny_model, training={"max_steps": 2, "overlong_buffer": 4, "overlong_penalty": 0.5})
    history = train(cfg, base_dir=tmp_path, reporter=RichReporter(quiet=True)).history
    for m in history:
        assert -1.0 <= m["rewards/overlong_penalty/mean"] < 0  # 8-token completions exist: each -1
        assert m["reward"] == pytest.approx(m["rewards/even_ids/mean"] + 0.5 * m["rewards/overlong_penalty/mean"])
