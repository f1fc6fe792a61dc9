"""Micro-batches: one forward/backward pass worth of sequences, laid out on the training device.

:func:`build_micro_batches` turns a checked rollout's sequences, masks and sampler log-probs and the advantages into
:class:`MicroBatch` objects, right-padded or padding-free (:func:`~.logprobs.pack`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence

import torch

from .logprobs import PackedBatch, pack


@dataclass
class MicroBatch:
    """One forward/backward pass worth of sequences (``B`` rows, ``C`` = longest completion).

    Attributes:
        packed: token layout (:class:`~.logprobs.PackedBatch`).
        mask: ``(B, C)`` float, 1 on trained tokens.
        advantages: ``(B,)``.
        sampler_logprobs: ``(B, C)`` the sampler's log-probs (nats; placeholders where ``mask`` is 0), or ``None``.
        old_logprobs: ``(B, C)`` the policy's before the first update (only with ``num_iterations > 1``).
        ref_logprobs: ``(B, C)`` the reference model's (only with ``beta > 0``).
        is_weights: ``(B, C)`` sampler-correction weights, set on the first iteration.
    """

    packed: PackedBatch
    mask: torch.Tensor
    advantages: torch.Tensor
    sampler_logprobs: Optional[torch.Tensor] = None
    old_logprobs: Optional[torch.Tensor] = None
    ref_logprobs: Optional[torch.Tensor] = None
    is_weights: Optional[torch.Tensor] = None


def build_micro_batches(prompt_ids: Sequence[Sequence[int]], completion_ids: Sequence[Sequence[int]],
                        masks: Sequence[Sequence[int]], logprobs: Optional[Sequence[Sequence[float]]],
                        advantages: torch.Tensor, size: int, pad_id: int, device: torch.device,
                        padding_free: bool = False) -> List[MicroBatch]:
    """Split ``N`` sequences into micro-batches of ``size`` (in order) on ``device``, right-padded or padding-free
    (see :func:`~.logprobs.pack`).

    Args:
        prompt_ids, completion_ids, masks: ``N`` lists each (masks: 0/1 per completion token).
        logprobs: ``N`` lists of sampler log-probs, or ``None``. advantages: ``(N,)``.
    """
    batches = []
    for start in range(0, len(completion_ids), size):
        idx = range(start, min(start + size, len(completion_ids)))
        packed = pack([prompt_ids[i] for i in idx], [completion_ids[i] for i in idx], pad_id, padding_free)
        mask = torch.zeros_like(packed.completion_valid, dtype=torch.float32)
        sampler = torch.zeros_like(mask) if logprobs is not None else None
        for row, i in enumerate(idx):
            mask[row, : len(masks[i])] = torch.tensor(masks[i], dtype=torch.float32)
            if sampler is not None:
                sampler[row, : len(logprobs[i])] = torch.tensor(logprobs[i], dtype=torch.float32)
        batches.append(MicroBatch(packed, mask.to(device), advantages[list(idx)].to(device),
                                  None if sampler is None else sampler.to(device)))
    return batches
