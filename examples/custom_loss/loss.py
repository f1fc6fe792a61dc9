"""A policy loss of your own for ``training.loss_function`` (docs/grpo.md): PPO's clipped surrogate with a separate,
tighter clip for negative advantages, written out. The trainer calls it once per micro-batch with a ``LossInputs``
(``logps``, ``old_logps``, ``ratio``, ``advantages``, ``mask``: each ``(B, C)``) and averages what it
returns as ``training.loss_type`` says; the sampler-correction weights, ``beta``'s KL term and the entropy bonus are
added by the trainer.

    grpo-rollout train configs/quickstart.yaml training.loss_function=examples/custom_loss/loss.py:asymmetric_clip
"""

import torch


def asymmetric_clip(inputs):
    """``-min(r·A, clip(r)·A)`` per token, clipped to [0.8, 1.28] for A > 0 and [0.9, 1.1] for A < 0; ``(B, C)``."""
    adv = inputs.advantages
    low = torch.where(adv > 0, torch.full_like(adv, 0.8), torch.full_like(adv, 0.9))
    high = torch.where(adv > 0, torch.full_like(adv, 1.28), torch.full_like(adv, 1.1))
    clipped = torch.minimum(torch.maximum(inputs.ratio, low), high)
    return -torch.min(inputs.ratio * adv, clipped * adv)
