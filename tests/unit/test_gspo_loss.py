"""The sequence-level importance ratio (GSPO, Zheng et al. 2025, arXiv:2507.18071) against hand-computed numbers."""

from __future__ import annotations

import math

import pytest
import torch

from grpo_rollout.trainer.update.objective import LOSS_TYPES, aggregate, per_token_loss
from loss_helpers import EPS, EPS_HIGH, _hand_batch, _random_batch, _totals


# --- sequence-level importance ratio (GSPO, Zheng et al. 2025, arXiv:2507.18071) ----------------------------------

def _gspo_batch():
    """Two sequences, C = 3, float64; the third position of each is masked.

    seq 0, A = +2.0, log-ratios [0.1, 0.3 | placeholder]  → s_0 = exp((0.1 + 0.3) / 2) = exp(0.2) = 1.22140
    seq 1, A = +0.5, log-ratios [0.2, 5.0 | -1.0]         → s_1 = exp((0.2 + 5.0) / 2) = exp(2.6) = 13.46374
    """
    old_logps = torch.tensor([[-1.0, -2.0, -0.5],
                              [-0.3, -6.0, -0.2]], dtype=torch.float64)
    log_ratios = torch.tensor([[0.1, 0.3, 7.0],
                               [0.2, 5.0, -1.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 0],
                         [1, 1, 0]])
    advantages = torch.tensor([2.0, 0.5], dtype=torch.float64)
    return old_logps + log_ratios, old_logps, advantages, mask


def _gspo(logps, old_logps, adv, mask, **kw):
    return per_token_loss(logps, old_logps, adv, epsilon=EPS, epsilon_high=EPS_HIGH, importance_level="sequence",
                          mask=mask, **kw)


S0, S1 = math.exp(0.2), math.exp(2.6)  # 1.2214027581601699, 13.463738035001690


def test_sequence_ratio_clipping_and_loss_hand_computed():
    logps, old_logps, adv, mask = _gspo_batch()
    out = _gspo(logps, old_logps, adv, mask)
    # the ratio is s_i on every position of row i: the mean of the trained log-ratios, never the sum (exp(0.4),
    # exp(5.2)) and never with the masked one (seq 1 over 3 positions would be exp(4.2 / 3) = exp(1.4))
    torch.testing.assert_close(out.ratio, torch.tensor([[S0] * 3, [S1] * 3], dtype=torch.float64),
                               rtol=1e-12, atol=0)
    # clip range [0.8, 1.28]: s_0 = 1.221 is inside; s_1 = 13.46 > 1.28 with A > 0 → the high bound is active
    assert out.clipped_high.tolist() == [[False] * 3, [True] * 3]
    assert not out.clipped_low.any()
    # l = -min(s·A, clip(s)·A):  seq 0: -(1.22140 · 2) = -2.44281 ;  seq 1: -min(6.7319, 1.28 · 0.5) = -0.64
    expected = torch.tensor([[-2 * S0] * 3, [-0.64] * 3], dtype=torch.float64)
    torch.testing.assert_close(out.loss, expected, rtol=1e-12, atol=1e-12)
    totals = _totals(mask, max_completion_length=3)
    # grpo: per-sequence means (-2.44281, -0.64), then their mean = -1.54140 (GSPO's eq. 5 objective, negated)
    assert aggregate(out.loss, mask, "grpo", totals).item() == pytest.approx((-2 * S0 - 0.64) / 2, rel=1e-12)
    # dr_grpo: sum over the 4 trained tokens / (2 sequences · 3) = (2 · -2.44281 + 2 · -0.64) / 6 = -1.02760
    assert aggregate(out.loss, mask, "dr_grpo", totals).item() == pytest.approx((-4 * S0 - 1.28) / 6, rel=1e-12)
    # the token level differs on the same batch: seq 0 token 0 has ratio exp(0.1), loss -2 · exp(0.1) = -2.21034
    token = per_token_loss(logps, old_logps, adv, epsilon=EPS, epsilon_high=EPS_HIGH)
    assert token.loss[0, 0].item() == pytest.approx(-2 * math.exp(0.1), rel=1e-12)


def test_sequence_ratio_gradient_hand_computed_and_equal_to_gspo_objective():
    logps, old_logps, adv, mask = _gspo_batch()
    leaf = logps.clone().requires_grad_(True)
    aggregate(_gspo(leaf, old_logps, adv, mask).loss, mask, "grpo", _totals(mask, 3)).backward()
    # unclipped seq 0: d/dlogp_0t of -(1/S)(1/n_0) Σ_t sg[s_0]·exp(logp_0t - sg[logp_0t])·A_0 = -A_0·s_0 / (n_0·S)
    #   = -2 · 1.22140 / (2 · 2) = -0.61070 per trained token; clipped seq 1 and masked positions: 0
    expected = torch.tensor([[-S0 / 2, -S0 / 2, 0.0], [0.0, 0.0, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(leaf.grad, expected, rtol=1e-12, atol=1e-15)
    # GSPO's eq. (5) itself, -(1/S) Σ_i min(s_i·A_i, clip(s_i)·A_i) with s_i differentiated, has the same gradient
    leaf2 = logps.clone().requires_grad_(True)
    m = mask.bool()
    s = torch.exp(torch.where(m, leaf2 - old_logps, torch.zeros_like(leaf2)).sum(1) / m.sum(1))
    objective = torch.min(s * adv, torch.clamp(s, 1 - EPS, 1 + EPS_HIGH) * adv).mean()
    (-objective).backward()
    torch.testing.assert_close(leaf2.grad, expected, rtol=1e-12, atol=1e-15)


def test_sequence_ratio_is_a_mean_not_a_sum():
    # repeating a sequence's tokens doubles the sum of its log-ratios (a sum-based ratio would be squared:
    # exp(0.4) → exp(0.8)) but leaves the mean, hence s = exp(0.2), unchanged
    old = torch.tensor([[-1.0, -2.0, 0.0, 0.0], [-1.0, -2.0, -1.0, -2.0]], dtype=torch.float64)
    log_ratios = torch.tensor([[0.1, 0.3, 0.0, 0.0], [0.1, 0.3, 0.1, 0.3]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]])
    out = _gspo(old + log_ratios, old, torch.tensor([1.0, 1.0], dtype=torch.float64), mask)
    assert out.ratio[0, 0].item() == pytest.approx(math.exp(0.2), rel=1e-12)
    assert out.ratio[1, 0].item() == pytest.approx(math.exp(0.2), rel=1e-12)
    assert out.ratio[1, 0].item() != pytest.approx(math.exp(0.8), rel=1e-3)  # what a sum would give


@pytest.mark.parametrize("placeholder", [math.nan, math.inf, -math.inf])
def test_sequence_ratio_ignores_placeholders_on_masked_positions(placeholder):
    logps, old_logps, adv, mask = _gspo_batch()
    clean = _gspo(logps, old_logps, adv, mask)
    dirty_logps, dirty_old = logps.clone(), old_logps.clone()
    dirty_logps[0, 2] = placeholder
    dirty_old[1, 2] = placeholder
    leaf = dirty_logps.clone().requires_grad_(True)
    dirty = _gspo(leaf, dirty_old, adv, mask)
    for key in ("loss", "ratio", "clipped_low", "clipped_high"):
        torch.testing.assert_close(getattr(dirty, key), getattr(clean, key), rtol=0, atol=0)
    aggregate(dirty.loss, mask, "grpo", _totals(mask, 3)).backward()
    assert torch.isfinite(leaf.grad).all()
    assert leaf.grad[0, 2].item() == 0.0 and leaf.grad[1, 2].item() == 0.0


def test_sequence_ratio_keeps_token_weights_and_kl_per_token():
    logps, old_logps, adv, mask = _gspo_batch()
    weights = torch.tensor([[0.5, 2.0, 1.0], [1.0, 1.0, 1.0]], dtype=torch.float64)
    delta = torch.tensor([[math.log(2.0)] * 3, [0.0] * 3], dtype=torch.float64)  # ref - logp
    leaf = logps.clone().requires_grad_(True)
    out = _gspo(leaf, old_logps, adv, mask, token_weights=weights, beta=0.1, ref_logps=logps + delta)
    k = 1.0 - math.log(2.0)  # k3 at d = ln 2
    # seq 0: -(2 · s_0) · w + 0.1 · k3 = -2.44281 · 0.5 + 0.030685 ; -2.44281 · 2 + 0.030685
    assert out.loss[0, :2].tolist() == pytest.approx([-2 * S0 * 0.5 + 0.1 * k, -2 * S0 * 2.0 + 0.1 * k], rel=1e-12)
    # the sampler weight scales each token's own gradient: grpo, d/dlogp_0t of the surrogate = -A·s_0·w_t / (n·S)
    # (the ref log-probs are fixed here, the k3 term adds beta·(1 - exp(ref - logp)) / (n·S) = 0.1·(1 - 2) / 4)
    aggregate(out.loss, mask, "grpo", _totals(mask, 3)).backward()
    kl_grad = 0.1 * (1 - 2.0) / 4
    assert leaf.grad[0, :2].tolist() == pytest.approx([-2 * S0 * 0.5 / 4 + kl_grad, -2 * S0 * 2.0 / 4 + kl_grad],
                                                      rel=1e-12)


def test_sequence_level_on_policy_equals_token_level():
    # first iteration (old = logps): every s_i is 1, and loss and gradient are the token level's exactly
    logps, _, _, adv, mask = _random_batch(seed=5)
    grads = {}
    for level in ("token", "sequence"):
        leaf = logps.clone().requires_grad_(True)
        out = per_token_loss(leaf, leaf.detach(), adv, epsilon=EPS, epsilon_high=EPS_HIGH, importance_level=level,
                             mask=mask)
        assert torch.equal(out.ratio, torch.ones_like(logps))
        aggregate(out.loss, mask, "dapo", _totals(mask, 6)).backward()
        grads[level] = leaf.grad
    torch.testing.assert_close(grads["sequence"], grads["token"], rtol=0, atol=0)


def test_token_level_ignores_mask():
    logps, old_logps, adv, mask = _hand_batch()
    plain = per_token_loss(logps, old_logps, adv, epsilon=EPS, epsilon_high=EPS_HIGH)
    named = per_token_loss(logps, old_logps, adv, epsilon=EPS, epsilon_high=EPS_HIGH, importance_level="token",
                           mask=mask)
    for key in plain._fields:
        assert torch.equal(getattr(plain, key), getattr(named, key)), key


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_sequence_level_micro_batches_accumulate_to_full_batch_gradient(loss_type):
    logps, old_logps, _, adv, mask = _random_batch(seed=6)
    leaf = logps.clone().requires_grad_(True)
    aggregate(_gspo(leaf, old_logps, adv, mask).loss, mask, loss_type, _totals(mask, 6)).backward()
    full = leaf.grad.clone()
    micro = 2 if loss_type != "bnpo" else 8  # bnpo equals the full batch only as one micro-batch
    totals = _totals(mask, 6, num_micro_batches=8 // micro)
    leaf = logps.clone().requires_grad_(True)
    for i in range(0, 8, micro):
        sl = slice(i, i + micro)
        aggregate(_gspo(leaf[sl], old_logps[sl], adv[sl], mask[sl]).loss, mask[sl], loss_type, totals).backward()
    torch.testing.assert_close(leaf.grad, full, rtol=1e-12, atol=1e-15)
    assert (full[mask == 1] != 0).any()


def test_sequence_level_errors():
    logps, old_logps, adv, mask = _gspo_batch()
    with pytest.raises(ValueError, match="mask"):
        per_token_loss(logps, old_logps, adv, epsilon=EPS, importance_level="sequence")
    with pytest.raises(ValueError, match="token, sequence"):
        per_token_loss(logps, old_logps, adv, epsilon=EPS, importance_level="geometric", mask=mask)


# --- GSPO with a token-summed loss (issue 18, item 7) ---------------------------------------------------------------

def test_gspo_with_a_token_summed_loss_weights_sequences_by_length():
    """The numbers validate-config's warning on `importance_level: sequence` + `loss_type: dapo` quotes: completions
    of 2 and 20 tokens, ratio 1, advantages ±0.707. GSPO's objective (per-sequence mean, then the group's) is 0;
    dapo's token sum gives the long completion ten times the short one's weight."""
    lengths, adv = [2, 20], torch.tensor([0.707, -0.707], dtype=torch.float64)
    mask = torch.tensor([[1.0] * n + [0.0] * (20 - n) for n in lengths], dtype=torch.float64)
    logps = torch.full((2, 20), -1.3, dtype=torch.float64, requires_grad=True)
    token = per_token_loss(logps, logps.detach().clone(), adv, epsilon=3e-4, epsilon_high=4e-4,
                           importance_level="sequence", mask=mask)
    assert torch.allclose(token.ratio, torch.ones(2, 20, dtype=torch.float64))
    totals = _totals(mask, max_completion_length=20)
    losses = {lt: aggregate(token.loss, mask, lt, totals).item() for lt in LOSS_TYPES}
    assert losses["grpo"] == pytest.approx(0.0, abs=1e-12)
    assert losses["dapo"] == pytest.approx(0.707 * 18 / 22) and round(losses["dapo"], 3) == 0.578
    assert losses["bnpo"] == pytest.approx(losses["dapo"])  # one micro-batch
    assert losses["dr_grpo"] == pytest.approx(0.707 * 18 / 40)
