"""A spawned vLLM server on the trainer's own GPU (one-GPU boxes): the share of the GPU's memory it gets.

vLLM takes ``gpu_memory_utilization`` of the device (0.9 by default) for weights, activations and its KV cache, which
on a GPU the trainer also uses would leave the trainer a tenth. When the server would share the trainer's device
(``vllm.mode: spawn``, a CUDA trainer, no ``vllm.server_devices``) and ``vllm.gpu_memory_utilization`` is not set,
the server gets what it needs, rounded up to a hundredth and kept within [0.05, 0.5]:

    weights (parameters × bytes of model.dtype)
    + KV cache for one step's sequences (2 × layers × KV heads × head size × bytes × max_model_len
      × prompts_per_step × num_generations)
    + 1 GiB (CUDA context, sampling buffers)

The start-up message says the split; setting ``vllm.gpu_memory_utilization`` overrides it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

OVERHEAD_GIB = 1.0
MIN_SHARE, MAX_SHARE = 0.05, 0.5
GIB = 1024 ** 3
_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclass(frozen=True)
class GpuShare:
    """The server's part of a shared GPU: ``share`` (its ``gpu_memory_utilization``) of ``total_gib``, from its
    ``weights_gib`` and ``kv_cache_gib`` (GiB)."""

    share: float
    total_gib: float
    weights_gib: float
    kv_cache_gib: float

    def text(self) -> str:
        """The start-up message."""
        return (f"vLLM shares the trainer's GPU ({self.total_gib:.0f} GiB): it gets gpu_memory_utilization "
                f"{self.share:.2f} ({self.share * self.total_gib:.1f} GiB: weights {self.weights_gib:.1f} + KV cache "
                f"{self.kv_cache_gib:.1f} + {OVERHEAD_GIB:.0f} GiB), the trainer the rest; set "
                "vllm.gpu_memory_utilization to choose it yourself")


def shared_gpu_share(config: Any, model: Any, max_model_len: int, server_devices: Optional[str],
                     total_bytes: Optional[int] = None) -> Optional[GpuShare]:
    """The share a spawned server on the trainer's GPU gets (see the module docstring), or ``None`` when it would not
    share one: not spawning, a CPU trainer, devices given for the server, or ``vllm.gpu_memory_utilization`` set.

    Args:
        config: the run's config. model: the trainer's model (its parameters and ``config``). max_model_len: the
            server's context (tokens). server_devices: this server's ``CUDA_VISIBLE_DEVICES`` (``None``: inherited).
        total_bytes: the GPU's memory (default: the trainer's device's, from CUDA).
    """
    device = next(model.parameters()).device
    if config.vllm.mode != "spawn" or device.type != "cuda" or server_devices \
            or "gpu_memory_utilization" in config.vllm.model_fields_set:
        return None
    if total_bytes is None:
        import torch

        total_bytes = torch.cuda.get_device_properties(device).total_memory
    size = _BYTES.get(config.model.dtype, 4)
    weights = sum(p.numel() for p in model.parameters()) * size
    c = model.config
    heads = c.num_attention_heads
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // heads
    kv_heads = getattr(c, "num_key_value_heads", None) or heads
    sequences = config.training.prompts_per_step * config.sampling.num_generations
    kv = 2 * c.num_hidden_layers * kv_heads * head_dim * size * max_model_len * sequences
    share = math.ceil((weights + kv + OVERHEAD_GIB * GIB) / total_bytes * 100) / 100
    return GpuShare(min(MAX_SHARE, max(MIN_SHARE, share)), total_bytes / GIB, weights / GIB, kv / GIB)
