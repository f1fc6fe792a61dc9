"""Helpers for the LoRA tests: the adapter size, the expected number of LoRA parameters, a batch and its log-probs."""

from __future__ import annotations

import torch

from grpo_rollout.trainer.update.logprobs import completion_logprobs, pack


R, ALPHA = 4, 8.0
LLAMA_LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def expected_lora_parameters(config, r: int) -> int:
    """``r · (in + out)`` for each of a Llama decoder layer's seven linear layers, times the layers (Hu et al. 2021:
    ``A`` is ``r × in``, ``B`` is ``out × r``)."""
    h, i = config.hidden_size, config.intermediate_size
    kv = config.num_key_value_heads * (h // config.num_attention_heads)
    shapes = [(h, h), (h, kv), (h, kv), (h, h), (h, i), (h, i), (i, h)]  # q k v o gate up down as (in, out)
    return config.num_hidden_layers * sum(r * (a + b) for a, b in shapes)


def _batch(seed: int = 0):
    """A padded batch of 3 random (prompt, completion) pairs for log-prob comparisons."""
    gen = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(0, 49152, (n,), generator=gen).tolist() for n in (5, 7, 4)]
    completions = [torch.randint(0, 49152, (n,), generator=gen).tolist() for n in (6, 3, 8)]
    return pack(prompts, completions, pad_id=0)


def _logprobs(model, batch) -> torch.Tensor:
    with torch.no_grad():
        return completion_logprobs(model, batch)
