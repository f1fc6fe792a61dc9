"""Completion log-probs (grpo_rollout.trainer.logprobs) against a full forward pass of a tiny random Llama."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from grpo_rollout.trainer.logprobs import completion_logprobs, pack  # noqa: E402

PAD = 0
PROMPTS = [[5, 6, 7], [8], [9, 10, 11, 12, 13], [14, 15], [3, 4]]
COMPLETIONS = [[20, 21], [22, 23, 24, 25], [26], [27, 28, 29], []]  # the last one is empty


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
