"""Mixed precision: float32 master weights and optimizer state, ``model.dtype`` compute.

``model.dtype: bfloat16`` does not store the trained weights in bfloat16: an AdamW update of ``lr`` 1e-6 on a weight
of size ~0.02 is far below bfloat16's resolution there (8 bits of mantissa: steps of ~1e-4), so in pure bfloat16
most updates round away (measured, one step at lr 1e-6 on a tiny Llama: 0.9% of the weights changed in bfloat16,
50.8% in float32). Instead, as transformers' ``Trainer`` does under ``bf16=True`` and torchtitan under FSDP2:

- the policy's weights, gradients and AdamW state stay float32 (the "master" copy), and so do checkpoints, so a
  resume continues exactly;
- forward passes run under ``torch.autocast`` in ``model.dtype`` (one process), and with several processes FSDP2
  gathers the weights in ``model.dtype`` and reduces gradients in float32 (``MixedPrecisionPolicy``);
- the weights sent to a vLLM server are cast to ``model.dtype``, the dtype it was started with.

A LoRA policy keeps its frozen base in ``model.dtype`` (it never changes, so nothing rounds away) and its adapters
in float32 (PEFT's default).

``model.dtype: float16`` is refused by the config checks (:func:`~grpo_rollout.config.algorithm_checks.check_precision`):
autocast in float16 needs a gradient scaler, which this trainer does not have; bfloat16 has float32's range.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from typing import ContextManager, Dict, Optional

import torch

from ...models.pretrained import torch_dtype

MASTER_DTYPE = "float32"  # what trained weights and optimizer state are stored in


@dataclass(frozen=True)
class Precision:
    """How the trainer stores and computes.

    Attributes:
        compute: ``model.dtype`` as a torch dtype (the dtype of matmuls, of generation and of the servers' weights).
        device_type: ``"cpu"`` or ``"cuda"`` (for ``torch.autocast``).
    """

    compute: torch.dtype
    device_type: str

    @staticmethod
    def from_config(dtype: str, device: torch.device) -> "Precision":
        """``dtype``: ``model.dtype`` (``float32`` | ``bfloat16`` | ``float16``)."""
        return Precision(torch_dtype(dtype), device.type)

    @property
    def mixed(self) -> bool:
        """True when compute is in a 16-bit dtype over float32 weights."""
        return self.compute != torch.float32

    def describe(self, lora: bool) -> str:
        """One line naming the compute dtype and the dtype of the trained (master) weights and optimizer state, as the
        run prints it at start and writes it at the top of ``config.yaml``."""
        compute = str(self.compute).removeprefix("torch.")
        how = " (torch.autocast)" if self.mixed else ""
        if lora:
            return (f"compute {compute}{how}; frozen base weights {compute}; LoRA adapters, their gradients and AdamW "
                    f"state {MASTER_DTYPE}")
        return f"compute {compute}{how}; master weights, gradients and AdamW state {MASTER_DTYPE}"

    def load_dtype(self, lora: bool) -> str:
        """The dtype to load the policy in: float32 master weights, except a LoRA base (frozen: ``model.dtype``)."""
        return str(self.compute).removeprefix("torch.") if lora else MASTER_DTYPE

    def autocast(self) -> ContextManager:
        """``torch.autocast`` in the compute dtype (nothing for float32)."""
        if not self.mixed:
            return nullcontext()
        return torch.autocast(device_type=self.device_type, dtype=self.compute)

    def fsdp_policy(self) -> Optional[object]:
        """FSDP2's ``MixedPrecisionPolicy``: gather in the compute dtype, reduce gradients in float32 (``None`` for
        float32)."""
        if not self.mixed:
            return None
        from torch.distributed.fsdp import MixedPrecisionPolicy

        return MixedPrecisionPolicy(param_dtype=self.compute, reduce_dtype=torch.float32)

    def for_server(self, weights: Optional[Dict[str, torch.Tensor]]) -> Optional[Dict[str, torch.Tensor]]:
        """``weights`` cast to the compute dtype, the one vLLM was started with (``--dtype model.dtype``); floating
        tensors only, others as they are. Tensors shared under several names (tied embeddings) stay shared."""
        if weights is None or not self.mixed:
            return weights
        cast: Dict[int, torch.Tensor] = {}
        out = {}
        for name, t in weights.items():
            if not t.is_floating_point() or t.dtype == self.compute:
                out[name] = t
                continue
            if id(t) not in cast:
                cast[id(t)] = t.detach().to(self.compute)
            out[name] = cast[id(t)]
        return out
