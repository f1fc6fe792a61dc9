"""Correcting for the sampler/trainer mismatch: the sampler (vLLM) and the trainer compute slightly different
probabilities for the same tokens (kernels, precision, or a stale weight copy), so the batch is slightly off-policy.

Truncated importance sampling (TIS; Yao et al. 2025, "Your Efficient RL Framework Secretly Brings You Off-Policy RL
Training") reweights each token's loss by ``w = π_trainer(token) / π_sampler(token)``, capped at ``cap``; the masked
variant (MIS) drops tokens (or whole sequences) whose ratio exceeds the cap instead. Sequence-level modes use the
product of the token ratios of the sequence (``training.sampler_correction``).

Not the ratio of the clipped surrogate: that one is against the old policy (the trainer's own log-probs before the
step's first update), and ``training.importance_level`` says whether it is per token or per sequence
(:mod:`.losses`).
"""

from __future__ import annotations

import torch

from ...config.schema import SAMPLER_CORRECTIONS as MODES  # the one list of modes (the config's)


def importance_weights(trainer_logps: torch.Tensor, sampler_logps: torch.Tensor, mask: torch.Tensor, mode: str,
                       cap: float) -> torch.Tensor:
    """Per-token loss weights ``(B, C)``.

    Args:
        trainer_logps, sampler_logps: ``(B, C)`` log-probs of the same tokens (nats), trainer's without grad.
        mask: ``(B, C)`` 1 on trained tokens; other positions never enter the arithmetic (their log-probs may be
            placeholders, even ``-inf``) and get weight 1.
        mode: one of :data:`MODES`. cap: upper bound (> 0) of the ratio.

    Raises:
        ValueError: unknown mode.
    """
    if mode == "none":
        return torch.ones_like(trainer_logps)
    # where, not a product: a masked position may hold a -inf placeholder, and (x - -inf) * 0 is NaN
    log_ratio = torch.where(mask.bool(), trainer_logps - sampler_logps, torch.zeros_like(trainer_logps))
    if mode.startswith("sequence"):
        log_ratio = log_ratio.sum(dim=1, keepdim=True).expand_as(trainer_logps)
    ratio = torch.exp(log_ratio.clamp(max=50.0))
    if mode.endswith("truncate"):
        return ratio.clamp(max=cap)
    if mode.endswith("mask"):
        return torch.where(ratio <= cap, ratio, torch.zeros_like(ratio))
    raise ValueError(f"importance-sampling mode must be one of {', '.join(MODES)}, got {mode!r}")
