"""The GRPO loss over micro-batches (they add up to the full batch) and its gradients (zero where they must be)."""

from __future__ import annotations

import pytest
import torch

from grpo_rollout.trainer.update.advantages import group_advantages
from grpo_rollout.trainer.update.objective import LOSS_TYPES, aggregate, per_token_loss
from loss_helpers import EPS, EPS_HIGH, _random_batch, _totals


# --- micro-batching -------------------------------------------------------------------------------------------------

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
