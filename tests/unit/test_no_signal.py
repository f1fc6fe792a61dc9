"""Issue 39.11: a step without learning signal (trainer/update/no_signal.py). Which loss terms keep a gradient when
every advantage is 0, counted from the loss itself, and the decision that every rank shares."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from grpo_rollout.orchestrator.batch import ScoredBatch
from grpo_rollout.distributed import Dist
from grpo_rollout.trainer.update.no_signal import moving_tokens, step_has_signal
from grpo_rollout.trainer.update.objective import aggregate, gradient_without_advantages, per_token_loss
from grpo_rollout.trainer.update.surrogates import policy_term
from loss_helpers import _random_batch, _totals

LOSS_FUNCTION = '''
def plus_length_penalty(inputs):
    return -inputs.ratio * inputs.advantages + 0.01 * inputs.logps   # a term of its own, without advantages
'''

# each: the training settings (over dapo, token level, beta 0, no entropy bonus) and whether A = 0 leaves a gradient
OPTIONS = {
    "grpo": ({"loss_type": "grpo"}, False), "dr_grpo": ({"loss_type": "dr_grpo"}, False),
    "dapo": ({}, False), "bnpo": ({"loss_type": "bnpo"}, False),
    "gspo": ({"loss_type": "grpo", "importance_level": "sequence"}, False),
    "cispo": ({"loss_type": "cispo"}, False), "sapo": ({"loss_type": "sapo"}, False),
    "sampler_weights": ({"token_weights": True}, False),
    "kl": ({"beta": 0.1}, True), "entropy_bonus": ({"entropy_coef": 0.01}, True),
    "loss_function": ({"loss_function": "plus_length_penalty"}, True),
}


def _training(tmp_path, loss_type="dapo", beta=0.0, entropy_coef=0.0, loss_function="", mask_truncated=False, **_):
    if loss_function:
        (tmp_path / "loss.py").write_text(LOSS_FUNCTION)
        loss_function = f"{tmp_path / 'loss.py'}:{loss_function}"
    return SimpleNamespace(loss_type=loss_type, beta=beta, entropy_coef=entropy_coef, loss_function=loss_function,
                           cispo_epsilon_low=1.0, cispo_epsilon_high=5.0, sapo_tau_positive=1.05,
                           sapo_tau_negative=1.0, mask_truncated_completions=mask_truncated)


@pytest.mark.parametrize("name", OPTIONS)
def test_the_terms_named_are_those_with_a_gradient_at_zero_advantages(tmp_path, name):
    """Every loss option of the 2026 set, off-policy (ratios in [0.61, 1.65]), every advantage 0: the gradient is 0
    exactly when no term is named, so skipping the update then changes nothing, and only then."""
    settings, has_gradient = OPTIONS[name]
    training = _training(tmp_path, **settings)
    _, old, ref, _, mask = _random_batch(seed=3)
    logps = (old + 0.3 * torch.randn(old.shape, generator=torch.Generator().manual_seed(1),
                                     dtype=torch.float64)).requires_grad_()
    entropy = (2.0 - logps.exp()).clone()  # any function of the policy's log-probs
    weights = torch.rand(old.shape, dtype=torch.float64) + 0.5 if settings.get("token_weights") else None
    out = per_token_loss(logps, old, torch.zeros(len(old), dtype=torch.float64), epsilon=0.2, epsilon_high=0.28,
                         beta=training.beta, ref_logps=ref, token_weights=weights,
                         importance_level=settings.get("importance_level", "token"), mask=mask, entropy=entropy,
                         entropy_coef=training.entropy_coef, surrogate=policy_term(training))
    aggregate(out.loss, mask, training.loss_type, _totals(mask, 8)).backward()
    moved = bool(logps.grad[mask.bool()].abs().max() > 0)
    assert moved == has_gradient == bool(gradient_without_advantages(training)), (name, logps.grad)


class Rollout(SimpleNamespace):
    def __len__(self):
        return len(self.completion_ids)


def _batch(advantages, masks, truncated=None, token_advantages=None):
    rollout = Rollout(completion_ids=[[5] * len(m) for m in masks], completion_mask=masks,
                      prompt_ids=[[1]] * len(masks), logprobs=None, segments=None)
    scores = SimpleNamespace(truncated=truncated or [False] * len(masks))
    return ScoredBatch(rollout, scores, 0.0, advantages=torch.tensor(advantages),
                       token_advantages=token_advantages)


def test_only_trained_tokens_with_an_advantage_count():
    assert moving_tokens(_batch([0.0, 0.0], [[1, 1], [1, 0]]).training_rows(False)) == 0
    assert moving_tokens(_batch([0.0, 0.5], [[1, 1], [1, 0, 1]]).training_rows(False)) == 2
    # a truncated completion masked out (training.mask_truncated_completions) moves nothing
    cut = _batch([0.0, 0.5], [[1, 1], [1, 1]], truncated=[False, True])
    assert step_has_signal(cut, _training(None, mask_truncated=True), Dist()) is False
    assert step_has_signal(cut, _training(None), Dist()) is True
    # turn credit: two turns of +1 and -1 average to an advantage of 0, yet each token has one
    turns = _batch([0.0, 0.0], [[1, 1], [1, 1]], token_advantages=[[1.0, -1.0], [0.0, 0.0]])
    assert moving_tokens(turns.training_rows(False)) == 2 and step_has_signal(turns, _training(None), Dist())
    assert moving_tokens(_batch([float("nan")], [[1]]).training_rows(False)) == 1  # a NaN goes to the non-finite guard


class TwoRanks(Dist):
    """This process as rank 0 of two, the other rank's numbers given (its collectives combine them)."""

    def __init__(self, other):
        super().__init__(0, 2)
        self.other = other

    def max(self, values):
        return [max(a, b) for a, b in zip(values, self.other)]


def test_one_rank_with_signal_means_every_rank_updates():
    flat = _batch([0.0] * 4, [[1, 1]] * 4)
    assert step_has_signal(flat, _training(None), TwoRanks([0])) is False
    assert step_has_signal(flat, _training(None), TwoRanks([3])) is True  # the other rank has 3 moving tokens
    assert step_has_signal(flat, _training(None, entropy_coef=0.01), TwoRanks([0])) is True
