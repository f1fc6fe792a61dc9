"""Issue 32.1: the policy's entropy at each completion token, computed in the chunked log-prob pass, against a full
forward pass; filtered-out tokens add nothing; the bonus enters the loss as -coef · H; the logged statistics."""

from __future__ import annotations

import math

import pytest
import torch

transformers = pytest.importorskip("transformers")

from grpo_rollout.trainer.update.logprobs import completion_logprobs, pack, token_entropy  # noqa: E402
from grpo_rollout.trainer.update.objective import per_token_loss  # noqa: E402
from test_logprobs import model  # noqa: E402,F401 - the fixture: a tiny random Llama

PROMPTS = [[5, 6, 7], [8], [9, 10, 11, 12, 13]]
COMPLETIONS = [[20, 21], [22, 23, 24, 25], [26]]


def _reference_entropy(model, temperature=1.0, top_k=None, completions=COMPLETIONS):
    """-Σ p log p of softmax(full forward logits / T) (top-k renormalised) before each completion token, (B, C)."""
    out = torch.zeros(len(PROMPTS), 4)
    with torch.no_grad():
        for i, (p, comp) in enumerate(zip(PROMPTS, completions)):
            logits = model(input_ids=torch.tensor([p + comp])).logits[0].float() / temperature
            for j in range(len(comp)):
                row = logits[len(p) + j - 1]
                if top_k:
                    row = row.topk(top_k).values
                probs = row.softmax(-1)
                out[i, j] = -(probs * probs.log()).sum()
    return out


def test_token_entropy_of_known_distributions_and_filtered_tokens():
    uniform = torch.full((1, 4), math.log(0.25))
    assert token_entropy(uniform).item() == pytest.approx(math.log(4))
    half = torch.tensor([[math.log(0.5), math.log(0.5), -math.inf, -math.inf]], requires_grad=True)
    h = token_entropy(half)
    assert h.item() == pytest.approx(math.log(2))
    h.sum().backward()
    assert torch.isfinite(half.grad).all()  # a filtered-out token adds 0 to the value and to the gradient
    assert token_entropy(half.detach(), differentiable=False).item() == pytest.approx(math.log(2))


@pytest.mark.parametrize("chunk_size", [1, 3, 1024])
def test_entropy_matches_a_full_forward_pass(model, chunk_size):
    batch = pack(PROMPTS, COMPLETIONS, 0)
    logps, entropy = completion_logprobs(model, batch, 1.0, chunk_size, entropy="measure")
    assert entropy.shape == logps.shape == (3, 4)
    expected = _reference_entropy(model)
    valid = batch.completion_valid.bool()
    assert torch.allclose(entropy[valid], expected[valid], atol=1e-5)
    assert (entropy[~valid] == 0).all()
    assert torch.equal(logps, completion_logprobs(model, batch, 1.0, chunk_size))  # the log-probs are unchanged
    assert not entropy.requires_grad


def _greedy(model, prompt, length):
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(length):
            ids.append(int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax()))
    return ids[len(prompt):]


def test_entropy_of_the_filtered_distribution_the_sampler_drew_from(model):
    """Tokens the sampler could have drawn (here greedy ones, inside the top 5): the entropy is the top-5
    distribution's, renormalised."""
    completions = [_greedy(model, p, len(c)) for p, c in zip(PROMPTS, COMPLETIONS)]
    batch = pack(PROMPTS, completions, 0)
    _, entropy = completion_logprobs(model, batch, 0.7, 2, top_k=5, entropy="measure")
    expected = _reference_entropy(model, 0.7, top_k=5, completions=completions)
    valid = batch.completion_valid.bool()
    assert torch.allclose(entropy[valid], expected[valid], atol=1e-5)
    assert (entropy[valid] < math.log(5) + 1e-6).all()  # at most the entropy of 5 equally likely tokens


def test_the_bonus_subtracts_coef_times_entropy_and_its_gradient_raises_entropy(model):
    batch = pack(PROMPTS, COMPLETIONS, 0)
    logps, entropy = completion_logprobs(model, batch, 1.0, 1024, entropy="train")
    assert entropy.requires_grad
    mask = batch.completion_valid.float()
    adv = torch.tensor([1.0, -1.0, 0.5])
    plain = per_token_loss(logps, logps.detach(), adv, epsilon=0.2, mask=mask)
    bonus = per_token_loss(logps, logps.detach(), adv, epsilon=0.2, mask=mask, entropy=entropy, entropy_coef=0.01)
    assert torch.allclose(bonus.loss - plain.loss, -0.01 * entropy)
    with pytest.raises(ValueError, match="needs the tokens' entropy"):
        per_token_loss(logps, logps.detach(), adv, epsilon=0.2, entropy_coef=0.01)
    # one gradient step on -mean entropy alone raises the mean entropy
    params = [p for p in model.parameters()]
    before = entropy[mask.bool()].mean()
    grads = torch.autograd.grad(-before, params)
    with torch.no_grad():
        for p, g in zip(params, grads):
            p.sub_(0.5 * g)
        after = completion_logprobs(model, batch, 1.0, 1024, entropy="measure")[1][mask.bool()].mean()
        for p, g in zip(params, grads):  # the module-scoped model back as it was
            p.add_(0.5 * g)
    assert after > before.detach()
