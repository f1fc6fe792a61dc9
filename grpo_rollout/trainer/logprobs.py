"""Log-probabilities of completion tokens under a model, computed only where they are needed.

The decoder runs once over ``prompt + completion``; the output projection (vocabulary-sized) and the log-softmax are
applied only to the hidden states that predict completion tokens, ``chunk_size`` positions at a time, so the batch
never holds a ``(B, T, vocab)`` tensor (32 × 128 × 49152 fp32 would be 0.8 GB).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Sequence

import torch


@dataclass
class PackedBatch:
    """Sequences laid out for one forward pass (right-padded).

    Attributes:
        input_ids: ``(B, T)`` prompt followed by completion, then padding.
        attention_mask: ``(B, T)`` 1 on real tokens.
        completion_start: ``(B,)`` index of each sequence's first completion token.
        completion_ids: ``(B, C)`` completion tokens, right-padded with 0.
        completion_valid: ``(B, C)`` 1 where ``completion_ids`` holds a real token.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    completion_start: torch.Tensor
    completion_ids: torch.Tensor
    completion_valid: torch.Tensor


def pack(prompt_ids: Sequence[Sequence[int]], completion_ids: Sequence[Sequence[int]], pad_id: int) -> PackedBatch:
    """Lay out ``B`` (prompt, completion) pairs as a right-padded batch (see :class:`PackedBatch`)."""
    b = len(prompt_ids)
    width = max(len(p) + len(c) for p, c in zip(prompt_ids, completion_ids))
    c_width = max(1, max(len(c) for c in completion_ids))
    input_ids = torch.full((b, width), pad_id, dtype=torch.long)
    attention = torch.zeros((b, width), dtype=torch.long)
    comp = torch.zeros((b, c_width), dtype=torch.long)
    valid = torch.zeros((b, c_width), dtype=torch.long)
    start = torch.zeros(b, dtype=torch.long)
    for i, (p, c) in enumerate(zip(prompt_ids, completion_ids)):
        seq = list(p) + list(c)
        input_ids[i, : len(seq)] = torch.tensor(seq, dtype=torch.long)
        attention[i, : len(seq)] = 1
        start[i] = len(p)
        if c:
            comp[i, : len(c)] = torch.tensor(list(c), dtype=torch.long)
            valid[i, : len(c)] = 1
    return PackedBatch(input_ids, attention, start, comp, valid)


def _decoder_and_head(model: torch.nn.Module):
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    if head is None or decoder is None:
        raise TypeError(f"{type(model).__name__} does not expose get_decoder()/get_output_embeddings(); "
                        "only causal LMs with a separate output projection are supported")
    return decoder, head


def completion_logprobs(model: torch.nn.Module, batch: PackedBatch, temperature: float = 1.0,
                        chunk_size: int = 1024) -> torch.Tensor:
    """Log-probabilities of each completion token, ``(B, C)`` (0 at padding), differentiable w.r.t. the model.

    Logits are divided by ``temperature`` before the log-softmax, so the values describe the distribution the
    sampler drew from (as TRL does). Positions are processed ``chunk_size`` at a time through the output projection.

    Raises:
        TypeError: the model has no separate decoder / output projection.
    """
    decoder, head = _decoder_and_head(model)
    device = next(model.parameters()).device
    input_ids = batch.input_ids.to(device)
    hidden = decoder(input_ids=input_ids, attention_mask=batch.attention_mask.to(device)).last_hidden_state
    b, c = batch.completion_ids.shape
    # hidden state at position (start + j - 1) predicts completion token j
    positions = (batch.completion_start.unsqueeze(1) - 1 + torch.arange(c).unsqueeze(0)).clamp(max=hidden.shape[1] - 1)
    valid = batch.completion_valid.bool()
    rows = torch.arange(b).unsqueeze(1).expand(b, c)[valid]
    cols = positions[valid]
    targets = batch.completion_ids[valid].to(device)
    flat: List[torch.Tensor] = []
    for s in range(0, rows.numel(), chunk_size):
        h = hidden[rows[s:s + chunk_size].to(device), cols[s:s + chunk_size].to(device)]
        logits = head(h).float() / temperature
        flat.append(logits.log_softmax(-1).gather(-1, targets[s:s + chunk_size].unsqueeze(-1)).squeeze(-1))
    out = torch.zeros((b, c), dtype=torch.float32, device=device)
    if flat:
        out = out.index_put((rows.to(device), torch.nonzero(valid)[:, 1].to(device)), torch.cat(flat))
    return out
