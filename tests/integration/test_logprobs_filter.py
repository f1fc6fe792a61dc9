"""The trainer's sampling filters reproduce the distribution vLLM samples from (issue 28.10a): temperature, then min-p,
then top-k, then top-p, as ``vllm/v1/sample/sampler.py`` applies them; the in-process sampler (``vllm.mode: off``)
follows the same order. ``test_sampling_filters_server.py`` checks every combination against a real server."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest
import torch
from transformers.generation.logits_process import MinPLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from grpo_rollout.generation.sampling_filter import filter_logits

#: every combination of the four filters: (temperature, top_k, top_p, min_p)
COMBINATIONS = list(itertools.product([1.0, 0.7], [-1, 3], [1.0, 0.6], [0.0, 0.2]))


def transformers_order(logits: torch.Tensor, top_k: int, top_p: float, min_p: float) -> torch.Tensor:
    """transformers' order (min-p last): what the trainer computed before issue 28."""
    out = logits.clone()
    if top_k > 0:
        out = TopKLogitsWarper(top_k)(None, out)
    if top_p < 1:
        out = TopPLogitsWarper(top_p)(None, out)
    if min_p > 0:
        out = MinPLogitsWarper(min_p)(None, out)
    return out


def test_min_p_comes_before_top_p_as_in_vllm():
    """The issue's input: probabilities [0.5, 0.3, 0.1, 0.1], top_p 0.6, min_p 0.3. vLLM keeps token 0 alone
    (min-p leaves [0.625, 0.375], whose top 0.6 is token 0): log-prob 0.0. Min-p last gave -0.470."""
    logits = torch.tensor([[0.5, 0.3, 0.1, 0.1]]).log()
    ours = filter_logits(logits, torch.tensor([0]), top_p=0.6, min_p=0.3).log_softmax(-1)
    assert ours[0, 0].item() == 0.0
    assert torch.isinf(ours[0, 1:]).all()
    before = transformers_order(logits, -1, 0.6, 0.3).log_softmax(-1)[0, 0].item()
    assert before == pytest.approx(-0.470, abs=1e-3)


def _vllm_processed(logits: torch.Tensor, temperature: float, top_k: int, top_p: float, min_p: float) -> torch.Tensor:
    """vLLM's own code on ``logits``: temperature, its min-p logits processor, ``apply_top_k_top_p``."""
    from vllm import SamplingParams
    from vllm.v1.sample.logits_processor.builtin import MinPLogitsProcessor
    from vllm.v1.sample.logits_processor.interface import BatchUpdate
    from vllm.v1.sample.ops.topk_topp_sampler import apply_top_k_top_p_pytorch

    rows = logits.shape[0]
    out = logits.clone() / temperature
    config = SimpleNamespace(scheduler_config=SimpleNamespace(max_num_seqs=rows))
    min_p_processor = MinPLogitsProcessor(config, torch.device("cpu"), False)
    min_p_processor.update_state(BatchUpdate(rows, [], [(i, SamplingParams(min_p=min_p), [], []) for i in range(rows)],
                                             []))
    out = min_p_processor.apply(out)
    k = torch.full((rows,), top_k) if top_k > 0 else None
    p = torch.full((rows,), top_p) if top_p < 1 else None
    return apply_top_k_top_p_pytorch(out, k, p, allow_cpu_sync=True)


@pytest.mark.parametrize("temperature, top_k, top_p, min_p", COMBINATIONS)
def test_every_combination_matches_vllms_own_code(temperature, top_k, top_p, min_p):
    pytest.importorskip("vllm")
    torch.manual_seed(0)
    logits = torch.randn(64, 50) * 2
    expected = _vllm_processed(logits, temperature, top_k, top_p, min_p)
    targets = expected.argmax(-1)
    ours = filter_logits(logits / temperature, targets, top_k, top_p, min_p)
    assert torch.equal(torch.isinf(ours), torch.isinf(expected))
    assert torch.allclose(ours.log_softmax(-1), expected.log_softmax(-1), atol=1e-6)


def test_the_orders_differ_on_these_inputs():
    """So the comparison above can fail: with min-p and top-p both on, min-p last keeps other tokens (min-p and
    top-k commute: both keep the most likely token, and min-p's threshold is relative to it)."""
    torch.manual_seed(0)
    logits = torch.randn(64, 50) * 2
    for top_k, top_p in ((-1, 0.6), (3, 0.6)):
        ours = filter_logits(logits, None, top_k, top_p, 0.2)
        assert not torch.equal(torch.isinf(ours), torch.isinf(transformers_order(logits, top_k, top_p, 0.2)))


@pytest.mark.parametrize("top_k, top_p, min_p", [(5, 1.0, 0.0), (-1, 0.9, 0.0), (-1, 1.0, 0.1), (20, 0.8, 0.0)])
def test_one_filter_or_top_k_with_top_p_matches_transformers_warpers(top_k, top_p, min_p):
    """Without min-p beside another filter the two orders agree."""
    torch.manual_seed(0)
    logits = torch.randn(6, 100) * 3
    expected = transformers_order(logits, top_k, top_p, min_p)
    targets = expected.argmax(-1)  # a token the sampler can draw
    ours = filter_logits(logits, targets, top_k, top_p, min_p)
    assert torch.equal(torch.isinf(ours), torch.isinf(expected))
    assert torch.allclose(ours.log_softmax(-1)[~torch.isinf(ours)], expected.log_softmax(-1)[~torch.isinf(expected)])


def test_sampled_token_is_never_filtered_out():
    logits = torch.tensor([[5.0, 4.0, 3.0, -2.0]])
    out = filter_logits(logits, torch.tensor([3]), top_k=2)
    assert torch.isfinite(out[0, 3]) and torch.isinf(out[0, 2])
    assert out.log_softmax(-1)[0, 3] < 0


@pytest.mark.model
def test_in_process_sampler_draws_from_the_distribution_the_trainer_scores(peaked_model, monkeypatch):
    """``vllm.mode: off``: for every combination the sampler's log-probs equal the trainer's; with transformers' own
    warpers (min-p last, what the sampler used before) the combinations of min-p and top-p differ."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from grpo_rollout.generation import transformers_client
    from grpo_rollout.generation.transformers_client import TransformersClient
    from grpo_rollout.trainer.update.logprobs import completion_logprobs, pack

    lm = AutoModelForCausalLM.from_pretrained(peaked_model, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(peaked_model)
    client = TransformersClient(lm, tokenizer, 32)

    def gap(temperature: float, top_k: int, top_p: float, min_p: float) -> float:
        torch.manual_seed(1)
        out = client.generate([[5, 6, 7], [8, 9], [10, 11, 12, 13]], n=4, temperature=temperature, top_k=top_k,
                              top_p=top_p, min_p=min_p, max_tokens=16)
        batch = pack([p for p in out.prompt_ids for _ in range(4)], out.completion_ids, tokenizer.pad_token_id)
        with torch.no_grad():
            trainer = completion_logprobs(lm, batch, temperature, top_k=top_k, top_p=top_p, min_p=min_p)
        valid = batch.completion_valid.bool()
        sampler = torch.zeros_like(trainer)
        for i, lps in enumerate(out.logprobs):
            sampler[i, :len(lps)] = torch.tensor(lps)
        return (sampler - trainer)[valid].abs().max().item()

    for combination in COMBINATIONS:
        assert gap(*combination) < 1e-4, combination

    class MinPLast(transformers_client.SamplerFilter):
        def __call__(self, input_ids, scores):
            return transformers_order(scores.float() / self.temperature, self.top_k, self.top_p, self.min_p)

    monkeypatch.setattr(transformers_client, "SamplerFilter", MinPLast)
    assert gap(1.0, -1, 0.6, 0.2) > 1e-2
