"""Completion log-probs (grpo_rollout.trainer.update.logprobs) against a full forward pass of a tiny random Llama."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from grpo_rollout.trainer.update.logprobs import completion_logprobs, pack, packing_isolates  # noqa: E402

PAD = 0
PROMPTS = [[5, 6, 7], [8], [9, 10, 11, 12, 13], [14, 15], [3, 4]]
COMPLETIONS = [[20, 21], [22, 23, 24, 25], [26], [27, 28, 29], []]  # the last one is empty
# lengths 5, 2, 8, 3, 2, 3: padding-free rows of width 8 hold [2], [0, 3] and [5, 1, 4] (first-fit decreasing)
SHARED_PROMPTS = [[5, 6, 7], [8], [9, 10, 11, 12, 13], [14, 15], [3, 4], [16]]
SHARED_COMPLETIONS = [[20, 21], [22], [26, 30, 31], [27], [], [23, 24]]


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=100, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64)
    return transformers.LlamaForCausalLM(config).float().eval()


def _reference(model, prompts, completions, temperature=1.0):
    """log_softmax(full forward logits / T) at the position before each completion token, one sequence at a time
    (no padding involved), as a (B, C) tensor with 0 at padding."""
    c = max(1, max(len(x) for x in completions))
    out = torch.zeros(len(prompts), c)
    with torch.no_grad():
        for i, (p, comp) in enumerate(zip(prompts, completions)):
            if not comp:
                continue
            ids = torch.tensor([p + comp])
            logits = model(input_ids=ids).logits[0].float() / temperature
            logp = logits.log_softmax(-1)
            for j, tok in enumerate(comp):
                out[i, j] = logp[len(p) + j - 1, tok]
    return out


def test_pack_layout():
    b = pack(PROMPTS, COMPLETIONS, pad_id=99)
    assert b.input_ids.shape == (5, 6)  # longest prompt + completion: 5 + 1 (others 3 + 2, 1 + 4, 2 + 3, 2 + 0)
    assert b.input_ids[1].tolist() == [8, 22, 23, 24, 25, 99]
    assert b.attention_mask[1].tolist() == [1, 1, 1, 1, 1, 0]
    assert b.input_ids[2].tolist() == [9, 10, 11, 12, 13, 26]
    assert b.completion_start.tolist() == [3, 1, 5, 2, 2]
    assert b.completion_ids.tolist() == [[20, 21, 0, 0], [22, 23, 24, 25], [26, 0, 0, 0], [27, 28, 29, 0],
                                         [0, 0, 0, 0]]
    assert b.completion_valid.tolist() == [[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0], [1, 1, 1, 0], [0, 0, 0, 0]]
    assert b.input_ids[4].tolist() == [3, 4, 99, 99, 99, 99]
    assert b.attention_mask[4].tolist() == [1, 1, 0, 0, 0, 0]


@pytest.mark.parametrize("chunk_size", [1, 3, 4096])
def test_matches_full_forward_log_softmax(model, chunk_size):
    batch = pack(PROMPTS, COMPLETIONS, PAD)
    with torch.no_grad():
        got = completion_logprobs(model, batch, chunk_size=chunk_size)
    expected = _reference(model, PROMPTS, COMPLETIONS)
    assert got.shape == (5, 4) and got.dtype == torch.float32
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
    # sanity: real log-probs of a random model are clearly negative and not all equal
    assert (got[batch.completion_valid.bool()] < -1).all()


def test_matches_batched_forward_logits(model):
    # the same check against the batched, right-padded forward pass of the full model
    batch = pack(PROMPTS, COMPLETIONS, PAD)
    with torch.no_grad():
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits.float()
        got = completion_logprobs(model, batch, chunk_size=3)
    logp = logits.log_softmax(-1)
    for i, (p, comp) in enumerate(zip(PROMPTS, COMPLETIONS)):
        for j, tok in enumerate(comp):
            assert got[i, j].item() == pytest.approx(logp[i, len(p) + j - 1, tok].item(), abs=1e-5)


def test_temperature_divides_logits(model):
    batch = pack(PROMPTS, COMPLETIONS, PAD)
    with torch.no_grad():
        got = completion_logprobs(model, batch, temperature=2.0, chunk_size=3)
        plain = completion_logprobs(model, batch, temperature=1.0, chunk_size=3)
    torch.testing.assert_close(got, _reference(model, PROMPTS, COMPLETIONS, temperature=2.0), atol=1e-5, rtol=0)
    valid = batch.completion_valid.bool()
    assert (got[valid] - plain[valid]).abs().min() > 1e-3  # the temperature is really applied


def test_padding_positions_are_zero(model):
    batch = pack(PROMPTS, COMPLETIONS, PAD)
    with torch.no_grad():
        got = completion_logprobs(model, batch, chunk_size=2)
    invalid = ~batch.completion_valid.bool()
    assert invalid.any()
    assert torch.equal(got[invalid], torch.zeros(int(invalid.sum())))
    assert torch.equal(got[4], torch.zeros(4))  # the empty completion


def test_gradients_flow_to_the_model(model):
    model.zero_grad(set_to_none=True)
    batch = pack(PROMPTS, COMPLETIONS, PAD)
    out = completion_logprobs(model, batch, chunk_size=3)
    assert out.requires_grad
    out.sum().backward()
    for name in ("lm_head.weight", "model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
                 "model.layers.1.mlp.down_proj.weight"):
        grad = model.get_parameter(name).grad
        assert grad is not None and grad.abs().sum() > 0, name
    # embedding rows of tokens that appear nowhere in the batch get no gradient
    emb_grad = model.get_parameter("model.embed_tokens.weight").grad
    assert torch.equal(emb_grad[90], torch.zeros(64))
    model.zero_grad(set_to_none=True)


def test_gradient_of_one_logprob_matches_full_forward(model):
    # d logp[1, 2] / d lm_head equals the gradient taken through the full model's logits
    batch = pack(PROMPTS, COMPLETIONS, PAD)
    model.zero_grad(set_to_none=True)
    completion_logprobs(model, batch, chunk_size=1)[1, 2].backward()
    got = model.lm_head.weight.grad.clone()
    model.zero_grad(set_to_none=True)
    p, comp = PROMPTS[1], COMPLETIONS[1]
    logits = model(input_ids=torch.tensor([p + comp])).logits[0]
    logits.log_softmax(-1)[len(p) + 1, comp[2]].backward()
    torch.testing.assert_close(got, model.lm_head.weight.grad, atol=1e-5, rtol=1e-4)
    model.zero_grad(set_to_none=True)


def test_model_without_output_projection_raises_type_error():
    config = transformers.LlamaConfig(vocab_size=100, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=2)
    with pytest.raises(TypeError, match="LlamaModel"):
        completion_logprobs(transformers.LlamaModel(config), pack([[1]], [[2]], PAD))
    with pytest.raises(TypeError, match="Linear"):
        completion_logprobs(torch.nn.Linear(4, 4), pack([[1]], [[2]], PAD))


def test_pack_padding_free_layout():
    b = pack(SHARED_PROMPTS, SHARED_COMPLETIONS, pad_id=99, padding_free=True)
    assert b.attention_mask is None
    assert b.row.tolist() == [1, 2, 0, 1, 2, 2]
    assert b.input_ids.tolist() == [[9, 10, 11, 12, 13, 26, 30, 31],
                                     [5, 6, 7, 20, 21, 14, 15, 27],
                                     [16, 23, 24, 8, 22, 3, 4, 99]]
    assert b.position_ids.tolist() == [[0, 1, 2, 3, 4, 5, 6, 7],
                                        [0, 1, 2, 3, 4, 0, 1, 2],
                                        [0, 1, 2, 0, 1, 0, 1, 0]]  # the padding that ends a row restarts too
    assert b.completion_start.tolist() == [3, 4, 5, 7, 7, 1]  # within each sequence's row
    assert b.completion_ids.tolist() == [[20, 21, 0], [22, 0, 0], [26, 30, 31], [27, 0, 0], [0, 0, 0], [23, 24, 0]]
    assert b.num_tokens == 23 and b.input_ids.numel() == 24
    padded = pack(SHARED_PROMPTS, SHARED_COMPLETIONS, pad_id=99)
    assert padded.num_tokens == 23 and padded.input_ids.numel() == 48 and padded.position_ids is None


@pytest.mark.parametrize("chunk_size", [1, 4096])
def test_padding_free_matches_full_forward(model, chunk_size):
    batch = pack(SHARED_PROMPTS, SHARED_COMPLETIONS, PAD, padding_free=True)
    with torch.no_grad():
        got = completion_logprobs(model, batch, chunk_size=chunk_size)
    torch.testing.assert_close(got, _reference(model, SHARED_PROMPTS, SHARED_COMPLETIONS), atol=1e-5, rtol=0)
    assert got[4].abs().sum() == 0  # the empty completion, sharing a row


def test_padding_free_gradients_match_padded(model):
    grads = []
    for padding_free in (False, True):
        model.zero_grad(set_to_none=True)
        logps = completion_logprobs(model, pack(SHARED_PROMPTS, SHARED_COMPLETIONS, PAD, padding_free), chunk_size=3)
        (logps * torch.linspace(-1.0, 1.0, logps.numel()).view_as(logps)).sum().backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
    model.zero_grad(set_to_none=True)
    for name, grad in grads[0].items():
        assert grad.abs().sum() > 0, name
        torch.testing.assert_close(grads[1][name], grad, atol=1e-5, rtol=1e-4)


class _Cumulative(torch.nn.Module):
    """A "decoder" without a mask: each position's state is the running mean of all embeddings before it, so a
    sequence packed after another sees it."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(100, 8)
        self.head = torch.nn.Linear(8, 100)

    def get_decoder(self):
        return self

    def get_output_embeddings(self):
        return self.head

    def get_input_embeddings(self):
        return self.embed

    def forward(self, input_ids, position_ids=None, attention_mask=None, use_cache=None):
        from types import SimpleNamespace

        e = self.embed(input_ids)
        return SimpleNamespace(last_hidden_state=e.cumsum(1) / torch.arange(1, e.shape[1] + 1).view(1, -1, 1))


def test_packing_isolates_is_checked_on_the_model(model):
    assert packing_isolates(model)  # transformers builds a block-diagonal mask from the position ids
    assert not packing_isolates(_Cumulative())
