"""The token-level GRPO loss and its four aggregations (trainer/update/objective.py) against hand-computed numbers."""

from __future__ import annotations

import math

import pytest
import torch

from grpo_rollout.trainer.update.objective import aggregate, per_token_loss
from loss_helpers import EPS, EPS_HIGH, _hand_batch, _totals


# Token losses l = -min(r·A, clip(r, 0.8, 1.28)·A) of _hand_batch, trained tokens only:
#   seq 0 (A=+1):  r=1.0 → -1.0 ; r=1.5 → -min(1.5, 1.28) = -1.28 (clipped high) ; r=0.5 → -min(0.5, 0.8) = -0.5
#   seq 1 (A=-2):  r=0.5 → -min(-1.0, -1.6) = 1.6 (clipped low) ; r=1.5 → -min(-3.0, -2.56) = 3.0
#   seq 2 (A=.5):  r in range → -0.5, -0.6, -0.45, -0.55
SEQ_SUMS = (-1.0 - 1.28 - 0.5, 1.6 + 3.0, -0.5 - 0.6 - 0.45 - 0.55)  # (-2.78, 4.6, -2.1)
SEQ_LENS = (3, 2, 4)
TOTAL = sum(SEQ_SUMS)  # -0.28
NUM_TOKENS = sum(SEQ_LENS)  # 9
MAX_LEN = 5


def test_per_token_loss_hand_computed_with_clipping():
    logps, old_logps, adv, mask = _hand_batch()
    out = per_token_loss(logps, old_logps, adv, epsilon=EPS, epsilon_high=EPS_HIGH)
    expected = torch.tensor([[-1.0, -1.28, -0.5, -1.28],   # masked r=9 → -min(9, 1.28)
                             [1.6, 3.0, 2.0, 2.0],          # masked r=1 → -(1·-2)
                             [-0.5, -0.6, -0.45, -0.55]], dtype=torch.float64)
    torch.testing.assert_close(out.loss, expected, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(out.ratio, torch.exp(logps - old_logps))
    assert torch.equal(out.kl, torch.zeros_like(logps))
    # clip flags: high bound active for A > 0 and r > 1.28, low bound for A < 0 and r < 0.8 (mask not applied)
    assert out.clipped_high.tolist() == [[False, True, False, True], [False] * 4, [False] * 4]
    assert out.clipped_low.tolist() == [[False] * 4, [True, False, False, False], [False] * 4]


def test_epsilon_high_defaults_to_epsilon():
    logps, old_logps, adv, _ = _hand_batch()
    out = per_token_loss(logps, old_logps, adv, epsilon=EPS)
    # seq 0 token 1: r = 1.5, A = +1, symmetric clip → -min(1.5, 1.2) = -1.2
    assert out.loss[0, 1].item() == pytest.approx(-1.2)
    # seq 2 token 1: r = 1.2 is exactly on the bound: -(1.2 · 0.5) = -0.6 either way
    assert out.loss[2, 1].item() == pytest.approx(-0.6)


@pytest.mark.parametrize("loss_type, expected", [
    # mean over each sequence's tokens, then over sequences: (-2.78/3 + 4.6/2 + -2.1/4) / 3 = 0.28277...
    ("grpo", (SEQ_SUMS[0] / 3 + SEQ_SUMS[1] / 2 + SEQ_SUMS[2] / 4) / 3),
    # sum / (S · max_completion_length) = -0.28 / (3 · 5) = -0.018666...
    ("dr_grpo", (-2.78 + 4.6 - 2.1) / (3 * 5)),
    # sum / tokens in batch = -0.28 / 9 = -0.031111...
    ("dapo", (-2.78 + 4.6 - 2.1) / 9),
    # one micro-batch: sum / tokens in it / 1 = -0.28 / 9
    ("bnpo", (-2.78 + 4.6 - 2.1) / 9 / 1),
])
def test_aggregate_hand_computed(loss_type, expected):
    logps, old_logps, adv, mask = _hand_batch()
    token_loss = per_token_loss(logps, old_logps, adv, epsilon=EPS, epsilon_high=EPS_HIGH).loss
    got = aggregate(token_loss, mask, loss_type, _totals(mask, MAX_LEN))
    assert got.ndim == 0
    assert got.item() == pytest.approx(expected, rel=1e-9)


def test_loss_types_give_different_losses_on_the_hand_batch():
    # guards the parametrised test above: on this batch the aggregations really differ (if two coincided, a bug
    # that computes one loss type with another's formula would pass it)
    logps, old_logps, adv, mask = _hand_batch()
    token_loss = per_token_loss(logps, old_logps, adv, epsilon=EPS, epsilon_high=EPS_HIGH).loss
    got = {t: aggregate(token_loss, mask, t, _totals(mask, MAX_LEN)).item() for t in ("grpo", "dr_grpo", "dapo")}
    assert len({round(v, 9) for v in got.values()}) == 3, got
    # bnpo equals dapo only because the batch is one micro-batch: with two it must differ
    halves = _totals(mask, MAX_LEN, num_micro_batches=2)
    split = aggregate(token_loss[:1], mask[:1], "bnpo", halves) + aggregate(token_loss[1:], mask[1:], "bnpo", halves)
    assert split.item() != pytest.approx(got["dapo"], rel=1e-6)


def test_kl_k3_hand_computed():
    # one sequence, on-policy (ratio 1), advantage 0 → the policy term is 0 and the loss is beta · k3
    logps = torch.tensor([[-1.0, -2.0, -0.5]], dtype=torch.float64)
    delta = torch.tensor([[math.log(2.0), 0.0, -1.0]], dtype=torch.float64)  # ref - logp
    ref_logps = logps + delta
    beta = 0.1
    out = per_token_loss(logps, logps.detach(), torch.zeros(1, dtype=torch.float64), epsilon=EPS, beta=beta,
                         ref_logps=ref_logps)
    # k3 = exp(d) - d - 1:  d = ln 2 → 2 - ln 2 - 1 = 0.30685 ;  d = 0 → 0 ;  d = -1 → e^-1 + 1 - 1 = 0.36788
    k3 = [2.0 - math.log(2.0) - 1.0, 0.0, math.exp(-1.0)]
    assert out.kl[0].tolist() == pytest.approx(k3, rel=1e-12)
    assert out.loss[0].tolist() == pytest.approx([beta * k for k in k3], rel=1e-12)


def test_kl_added_to_clipped_surrogate_and_aggregated():
    logps, old_logps, adv, mask = _hand_batch()
    beta = 0.05
    # ref - logp = ln 2 on every token of seq 0, -1 on seq 1, 0 on seq 2
    delta = torch.tensor([[math.log(2.0)] * 4, [-1.0] * 4, [0.0] * 4], dtype=torch.float64)
    out = per_token_loss(logps, old_logps, adv, epsilon=EPS, epsilon_high=EPS_HIGH, beta=beta,
                         ref_logps=logps + delta)
    k_a, k_b = 1.0 - math.log(2.0), math.exp(-1.0)  # k3 at d = ln 2 and d = -1
    # token losses gain beta · k3: seq 0 (3 trained tokens) beta·k_a each, seq 1 (2 tokens) beta·k_b, seq 2 nothing
    assert out.loss[0, 1].item() == pytest.approx(-1.28 + beta * k_a)
    assert out.loss[1, 0].item() == pytest.approx(1.6 + beta * k_b)
    assert out.loss[2, 3].item() == pytest.approx(-0.55)
    dapo = aggregate(out.loss, mask, "dapo", _totals(mask, MAX_LEN))
    # (-0.28 + 0.05 · (3·(1 - ln 2) + 2·e^-1)) / 9
    assert dapo.item() == pytest.approx((TOTAL + beta * (3 * k_a + 2 * k_b)) / 9, rel=1e-9)
    grpo = aggregate(out.loss, mask, "grpo", _totals(mask, MAX_LEN))
    # per-sequence means shift by beta·k_a, beta·k_b and 0
    expected = ((SEQ_SUMS[0] / 3 + beta * k_a) + (SEQ_SUMS[1] / 2 + beta * k_b) + SEQ_SUMS[2] / 4) / 3
    assert grpo.item() == pytest.approx(expected, rel=1e-9)


def test_token_weights_scale_the_surrogate_not_the_kl():
    logps = torch.tensor([[-1.0, -1.0]], dtype=torch.float64)
    delta = torch.tensor([[math.log(2.0), math.log(2.0)]], dtype=torch.float64)
    out = per_token_loss(logps, logps, torch.tensor([1.0], dtype=torch.float64), epsilon=EPS, beta=0.5,
                         ref_logps=logps + delta, token_weights=torch.tensor([[0.5, 2.0]], dtype=torch.float64))
    k = 1.0 - math.log(2.0)
    # -(1 · 1) · w + 0.5 · k3
    assert out.loss[0].tolist() == pytest.approx([-0.5 + 0.5 * k, -2.0 + 0.5 * k])


def test_beta_without_ref_logps_raises():
    logps, old_logps, adv, _ = _hand_batch()
    with pytest.raises(ValueError, match="ref_logps"):
        per_token_loss(logps, old_logps, adv, epsilon=EPS, beta=0.1)


def test_unknown_loss_type_raises():
    logps, old_logps, adv, mask = _hand_batch()
    with pytest.raises(ValueError, match="loss_type"):
        aggregate(logps, mask, "ppo", _totals(mask, MAX_LEN))
