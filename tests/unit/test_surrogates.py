"""Issue 32.2: CISPO's clipped importance weight and SAPO's soft gate against hand-computed values and gradients, their
aggregations, and a user's loss function checked."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from grpo_rollout.trainer.update.objective import AGGREGATED_AS, BatchTotals, aggregate, per_token_loss
from grpo_rollout.trainer.update.surrogates import (LossFunctionError, LossInputs, cispo_surrogate, policy_term,
                                                    sapo_surrogate, user_surrogate)


def _sigmoid(x):
    return 1 / (1 + math.exp(-x))


def test_cispo_clips_the_weight_and_keeps_every_tokens_gradient():
    logps = torch.log(torch.tensor([[0.05, 0.10, 0.70]])).requires_grad_()
    old = torch.log(torch.tensor([[0.10, 0.10, 0.10]]))
    ratio = torch.exp(logps - old)  # 0.5, 1, 7
    term = cispo_surrogate(ratio, logps, torch.tensor([2.0]), epsilon_low=1.0, epsilon_high=5.0)
    # weights clip(0.5, 1, 7 → max 6) with no lower bound; loss value -w·A
    assert term.loss.tolist()[0] == pytest.approx([-1.0, -2.0, -12.0])
    assert term.clipped_high.tolist() == [[False, False, True]] and not term.clipped_low.any()
    term.loss.sum().backward()
    assert logps.grad.tolist()[0] == pytest.approx([-1.0, -2.0, -12.0])  # d/dlogp = -w·A: the capped token too
    term = cispo_surrogate(ratio.detach(), logps, torch.tensor([2.0]), epsilon_low=0.2, epsilon_high=5.0)
    assert term.loss.tolist()[0][0] == pytest.approx(-1.6)  # 0.5 raised to 1 - 0.2
    assert term.clipped_low.tolist() == [[True, False, False]]


def test_sapo_gate_and_its_gradient():
    ratio = torch.tensor([[1.0, 2.0], [1.0, 1.0]], requires_grad=True)
    term = sapo_surrogate(ratio, torch.tensor([1.0, -1.0]), tau_positive=1.0, tau_negative=1.05)
    # f(r) = 4/τ σ(τ(r-1)): 2 at r = 1 with τ 1; 4σ(1) at r = 2; for A = -1 with τ 1.05: 4/1.05 · 1/2
    assert term.loss.flatten().tolist() == pytest.approx([-2.0, -4 * _sigmoid(1), 2 / 1.05, 2 / 1.05])
    term.loss.sum().backward()
    s1 = _sigmoid(1)
    # d/dr = -A · 4σ(1-σ): exactly -1 on-policy (r = 1, A = 1), smaller off-policy
    assert ratio.grad.flatten().tolist() == pytest.approx([-1.0, -4 * s1 * (1 - s1), 1.0, 1.0])
    assert not term.clipped_low.any() and not term.clipped_high.any()


def _training(**kw):
    base = dict(loss_type="grpo", cispo_epsilon_low=1.0, cispo_epsilon_high=5.0, sapo_tau_positive=1.0,
                sapo_tau_negative=1.05, loss_function="")
    return SimpleNamespace(**{**base, **kw})


def test_the_loss_type_picks_the_policy_term_and_its_aggregation():
    logps = torch.log(torch.tensor([[0.2, 0.3], [0.4, 0.5]]))
    old = logps - 0.1
    adv = torch.tensor([1.0, -1.0])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    assert policy_term(_training()) is None  # PPO's clip
    cispo = per_token_loss(logps, old, adv, epsilon=0.2, mask=mask, surrogate=policy_term(_training(loss_type="cispo")))
    w = math.exp(0.1)
    assert cispo.loss.flatten().tolist() == pytest.approx([-w, -w, w, w])
    sapo = per_token_loss(logps, old, adv, epsilon=0.2, mask=mask, surrogate=policy_term(_training(loss_type="sapo")))
    assert sapo.loss[0, 0].item() == pytest.approx(-4 * _sigmoid(w - 1))
    totals = BatchTotals(num_sequences=2, num_tokens=3, num_micro_batches=1, max_completion_length=2)
    for loss_type, like in AGGREGATED_AS.items():
        assert aggregate(cispo.loss, mask, loss_type, totals).item() == pytest.approx(
            aggregate(cispo.loss, mask, like, totals).item())
    assert aggregate(cispo.loss, mask, "cispo", totals).item() == pytest.approx((-w - w + w) / 3)


def _inputs():
    logps = torch.log(torch.tensor([[0.2, 0.3]])).requires_grad_()
    return LossInputs(logps, logps.detach(), torch.exp(logps - logps.detach()), torch.tensor([[1.0, 1.0]]),
                      torch.tensor([[1.0, 0.0]]))


def test_a_users_loss_function_is_checked():
    def reinforce(inputs):
        return -inputs.advantages * inputs.ratio

    def flat(inputs):
        return inputs.logps.sum()

    def broken(inputs):
        return inputs.values

    def no_gradient(inputs):
        return -inputs.advantages

    assert user_surrogate(reinforce, _inputs()).loss.flatten().tolist() == pytest.approx([-1.0, -1.0])
    with pytest.raises(LossFunctionError, match=r"flat.*returned a tensor of shape \(\); it must be \(B, C\) = \(1, 2\)"):
        user_surrogate(flat, _inputs())
    with pytest.raises(LossFunctionError, match=r"broken raised AttributeError.*\(at .*test_surrogates.py:\d+\)"):
        user_surrogate(broken, _inputs())
    with pytest.raises(LossFunctionError, match="no_gradient.*returned a loss without a gradient"):
        user_surrogate(no_gradient, _inputs())
    nan = user_surrogate(lambda inputs: inputs.logps * float("nan"), _inputs())  # passed on: the step is skipped
    assert torch.isnan(nan.loss).all()
