"""The trainer's top-k / top-p / min-p filtering reproduces the distribution transformers' samplers draw from."""

from __future__ import annotations

import pytest
import torch
from transformers.generation.logits_process import MinPLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from grpo_rollout.trainer.logprobs import filter_logits


@pytest.mark.parametrize("top_k, top_p, min_p", [(5, 1.0, 0.0), (-1, 0.9, 0.0), (-1, 1.0, 0.1), (20, 0.8, 0.0)])
def test_matches_transformers_warpers(top_k, top_p, min_p):
    torch.manual_seed(0)
    logits = torch.randn(6, 100) * 3
    expected = logits.clone()
    if top_k > 0:
        expected = TopKLogitsWarper(top_k)(None, expected)
    if top_p < 1:
        expected = TopPLogitsWarper(top_p)(None, expected)
    if min_p > 0:
        expected = MinPLogitsWarper(min_p)(None, expected)
    targets = expected.argmax(-1)  # a token the sampler can draw
    ours = filter_logits(logits, targets, top_k, top_p, min_p)
    assert torch.equal(torch.isinf(ours), torch.isinf(expected))
    assert torch.allclose(ours.log_softmax(-1)[~torch.isinf(ours)], expected.log_softmax(-1)[~torch.isinf(expected)])


def test_sampled_token_is_never_filtered_out():
    logits = torch.tensor([[5.0, 4.0, 3.0, -2.0]])
    out = filter_logits(logits, torch.tensor([3]), top_k=2)
    assert torch.isfinite(out[0, 3]) and torch.isinf(out[0, 2])
    assert out.log_softmax(-1)[0, 3] < 0
