"""The GRPO objective (grpo_rollout.trainer.update.objective) against hand-computed numbers."""

from __future__ import annotations

import math

import pytest
import torch

from grpo_rollout.trainer.update.objective import group_advantages
from grpo_rollout.trainer.update.objective import LOSS_TYPES, BatchTotals, aggregate, per_token_loss

EPS, EPS_HIGH = 0.2, 0.28  # clip range [0.8, 1.28]


def _totals(mask: torch.Tensor, max_completion_length: int, num_micro_batches: int = 1) -> BatchTotals:
    return BatchTotals(num_sequences=mask.shape[0], num_tokens=int(mask.sum()), num_micro_batches=num_micro_batches,
                       max_completion_length=max_completion_length)


def _hand_batch():
    """Three sequences of 3, 2 and 4 trained tokens (C = 4), ratios chosen per token, float64.

    seq 0, A = +1.0, ratios [1.0, 1.5, 0.5, 9.0 (masked)]
    seq 1, A = -2.0, ratios [0.5, 1.5, 1.0 (masked), 1.0 (masked)]
    seq 2, A = +0.5, ratios [1.0, 1.2, 0.9, 1.1]
    """
    ratios = torch.tensor([[1.0, 1.5, 0.5, 9.0],
                           [0.5, 1.5, 1.0, 1.0],
                           [1.0, 1.2, 0.9, 1.1]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 0],
                         [1, 1, 0, 0],
                         [1, 1, 1, 1]])
    old_logps = torch.tensor([[-1.0, -2.0, -0.5, -3.0],
                              [-0.7, -1.2, -2.5, -0.1],
                              [-0.3, -0.9, -1.4, -2.0]], dtype=torch.float64)
    logps = old_logps + ratios.log()
    advantages = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    return logps, old_logps, advantages, mask


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


# --- micro-batching -------------------------------------------------------------------------------------------------

def _random_batch(seed: int = 0, s: int = 8, c: int = 6):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([1, 6, 3, 2, 5, 4, 6, 2])[:s]
    mask = (torch.arange(c).unsqueeze(0) < lengths.unsqueeze(1)).long()
    old_logps = -torch.rand(s, c, generator=g, dtype=torch.float64) * 3
    logps = old_logps + (torch.rand(s, c, generator=g, dtype=torch.float64) - 0.5)  # ratios in [0.61, 1.65]
    ref_logps = old_logps + (torch.rand(s, c, generator=g, dtype=torch.float64) - 0.5)
    adv = torch.randn(s, generator=g, dtype=torch.float64)
    return logps, old_logps, ref_logps, adv, mask


def _token_loss(logps, old_logps, ref_logps, adv):
    return per_token_loss(logps, old_logps, adv, epsilon=EPS, epsilon_high=EPS_HIGH, beta=0.04,
                          ref_logps=ref_logps).loss


@pytest.mark.parametrize("loss_type", ["grpo", "dr_grpo", "dapo"])
@pytest.mark.parametrize("micro", [1, 2, 3, 8])
def test_micro_batches_sum_to_full_batch(loss_type, micro):
    logps, old_logps, ref_logps, adv, mask = _random_batch()
    s = mask.shape[0]
    full_totals = _totals(mask, max_completion_length=6)
    full = aggregate(_token_loss(logps, old_logps, ref_logps, adv), mask, loss_type, full_totals)

    # independent full-batch value
    tl = _token_loss(logps, old_logps, ref_logps, adv) * mask
    if loss_type == "grpo":
        reference = (tl.sum(1) / mask.sum(1)).mean()
    elif loss_type == "dr_grpo":
        reference = tl.sum() / (s * 6)
    else:
        reference = tl.sum() / mask.sum()
    assert full.item() == pytest.approx(reference.item(), rel=1e-12)

    chunks = list(range(0, s, micro))
    totals = _totals(mask, max_completion_length=6, num_micro_batches=len(chunks))
    summed = sum(aggregate(_token_loss(logps[i:i + micro], old_logps[i:i + micro], ref_logps[i:i + micro],
                                       adv[i:i + micro]), mask[i:i + micro], loss_type, totals) for i in chunks)
    assert summed.item() == pytest.approx(full.item(), rel=1e-12)


@pytest.mark.parametrize("loss_type", ["grpo", "dr_grpo", "dapo", "bnpo"])
def test_micro_batch_gradients_accumulate_to_full_batch_gradient(loss_type):
    logps, old_logps, ref_logps, adv, mask = _random_batch()
    totals1 = _totals(mask, 6, num_micro_batches=1)
    leaf = logps.clone().requires_grad_(True)
    aggregate(_token_loss(leaf, old_logps, ref_logps, adv), mask, loss_type, totals1).backward()
    full_grad = leaf.grad.clone()

    micro = 2 if loss_type != "bnpo" else 8  # bnpo equals the full batch only as one micro-batch
    totals = _totals(mask, 6, num_micro_batches=8 // micro)
    leaf = logps.clone().requires_grad_(True)
    for i in range(0, 8, micro):
        sl = slice(i, i + micro)
        aggregate(_token_loss(leaf[sl], old_logps[sl], ref_logps[sl], adv[sl]), mask[sl], loss_type, totals).backward()
    torch.testing.assert_close(leaf.grad, full_grad, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("micro", [1, 2, 4])
def test_bnpo_is_mean_over_micro_batches_of_token_means(micro):
    logps, old_logps, ref_logps, adv, mask = _random_batch()
    chunks = list(range(0, 8, micro))
    totals = _totals(mask, 6, num_micro_batches=len(chunks))
    summed, token_means = 0.0, []
    for i in chunks:
        sl = slice(i, i + micro)
        tl = _token_loss(logps[sl], old_logps[sl], ref_logps[sl], adv[sl])
        summed = summed + aggregate(tl, mask[sl], "bnpo", totals)
        token_means.append(((tl * mask[sl]).sum() / mask[sl].sum()).item())
    assert summed.item() == pytest.approx(sum(token_means) / len(token_means), rel=1e-12)
    # the micro-batches hold different token counts, so this is not the dapo value
    dapo = aggregate(_token_loss(logps, old_logps, ref_logps, adv), mask, "dapo", _totals(mask, 6))
    assert summed.item() != pytest.approx(dapo.item(), rel=1e-6)


def test_bnpo_equals_dapo_with_one_micro_batch():
    logps, old_logps, ref_logps, adv, mask = _random_batch()
    tl = _token_loss(logps, old_logps, ref_logps, adv)
    totals = _totals(mask, 6, num_micro_batches=1)
    assert aggregate(tl, mask, "bnpo", totals).item() == pytest.approx(aggregate(tl, mask, "dapo", totals).item(),
                                                                       rel=1e-12)


# --- gradients ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("scale_rewards", ["group", "batch", "none"])
@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_equal_rewards_give_zero_advantages_and_zero_policy_gradient(scale_rewards, loss_type):
    # two groups of 8 with all-equal rewards (0.1 · 8 is not exact in float32)
    rewards = torch.tensor([0.1] * 8 + [0.7] * 8)
    adv = group_advantages(rewards, 8, scale_rewards)
    assert torch.equal(adv, torch.zeros(16))

    logps, old_logps, _, _, mask = _random_batch(seed=1, s=8)
    logps, old_logps, mask = torch.cat([logps, logps]), torch.cat([old_logps, old_logps]), torch.cat([mask, mask])
    leaf = logps.float().clone().requires_grad_(True)
    token_loss = per_token_loss(leaf, old_logps.float(), adv, epsilon=EPS, epsilon_high=EPS_HIGH).loss
    loss = aggregate(token_loss, mask, loss_type, _totals(mask, 6))
    loss.backward()
    assert loss.item() == 0.0
    assert torch.equal(leaf.grad, torch.zeros_like(leaf))


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_masked_tokens_get_no_gradient(loss_type):
    logps, old_logps, ref_logps, adv, mask = _random_batch(seed=2)
    # ratios within the clip range, so that every trained token has a gradient
    g = torch.Generator().manual_seed(3)
    old_logps = logps + (torch.rand(logps.shape, generator=g, dtype=torch.float64) - 0.5) * 0.1
    adv = adv.sign() * (adv.abs() + 0.1)  # no zero advantage
    leaf = logps.clone().requires_grad_(True)
    token_loss = per_token_loss(leaf, old_logps, adv, epsilon=EPS, epsilon_high=EPS_HIGH, beta=0.04,
                                ref_logps=ref_logps).loss
    aggregate(token_loss, mask, loss_type, _totals(mask, 6)).backward()
    assert (mask == 0).any()
    assert torch.equal(leaf.grad[mask == 0], torch.zeros(int((mask == 0).sum()), dtype=torch.float64))
    assert (leaf.grad[mask == 1] != 0).all()


def test_on_policy_first_iteration_ratio_one_no_clipping_no_kl():
    logps, _, _, adv, mask = _random_batch(seed=4)
    leaf = logps.clone().requires_grad_(True)
    out = per_token_loss(leaf, leaf.detach(), adv, epsilon=EPS, epsilon_high=EPS_HIGH, beta=0.1,
                         ref_logps=leaf.detach().clone())
    assert torch.equal(out.ratio, torch.ones_like(logps))
    assert not out.clipped_low.any() and not out.clipped_high.any()
    assert torch.equal(out.kl, torch.zeros_like(logps))
    # loss = -A on every token; the gradient of the grpo loss w.r.t. logp_it is -A_i / (n_i · S)
    torch.testing.assert_close(out.loss, (-adv).unsqueeze(1).expand_as(logps), rtol=0, atol=0)
    aggregate(out.loss, mask, "grpo", _totals(mask, 6)).backward()
    expected = (-adv.unsqueeze(1) / (mask.sum(1, keepdim=True) * 8)) * mask
    torch.testing.assert_close(leaf.grad, expected, rtol=1e-12, atol=1e-15)


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
