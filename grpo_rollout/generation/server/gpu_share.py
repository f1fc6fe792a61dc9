"""A spawned vLLM server on the trainer's own GPU (one-GPU boxes): the share of the GPU's memory it gets.

vLLM takes ``gpu_memory_utilization`` of the device (0.9 by default) for weights, activations and its KV cache, which
on a GPU the trainer also uses would leave the trainer a tenth. When the server would share the trainer's device
(``vllm.mode: spawn``, a CUDA trainer, no ``vllm.server_devices``) and ``vllm.gpu_memory_utilization`` is not set,
the server gets what it needs, rounded up to a hundredth and kept within [0.05, 0.5]:

    weights (parameters × bytes of model.dtype)
    + KV cache for one step's sequences (2 × layers × KV heads × head size × bytes × max_model_len
      × prompts_per_step × num_generations)
    + 1 GiB (CUDA context, sampling buffers)

The start-up message says the split, and ``validate-config`` shows it before anything loads (:func:`planned_split`);
setting ``vllm.gpu_memory_utilization`` overrides it. With ``vllm.sleep_during_training`` the server also frees its
KV cache and offloads its weights while the trainer computes (:mod:`.sleep_routes`).
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


def _needs(config: Any, params: int, model_config: Any, max_model_len: int) -> tuple:
    """``(weights, kv_cache)`` bytes a server of this model needs for one step's sequences (the module's rule)."""
    size = _BYTES.get(config.model.dtype, 4)
    c = model_config
    heads = c.num_attention_heads
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // heads
    kv_heads = getattr(c, "num_key_value_heads", None) or heads
    sequences = config.training.prompts_per_step * config.sampling.num_generations
    return params * size, 2 * c.num_hidden_layers * kv_heads * head_dim * size * max_model_len * sequences


def _share(weights: int, kv: int, total_bytes: int) -> float:
    return min(MAX_SHARE, max(MIN_SHARE, math.ceil((weights + kv + OVERHEAD_GIB * GIB) / total_bytes * 100) / 100))


def _shares_gpu(config: Any, cuda_trainer: bool, server_devices: Optional[str]) -> bool:
    return config.vllm.mode == "spawn" and cuda_trainer and not server_devices \
        and "gpu_memory_utilization" not in config.vllm.model_fields_set


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
    if not _shares_gpu(config, device.type == "cuda", server_devices):
        return None
    if total_bytes is None:
        import torch

        total_bytes = torch.cuda.get_device_properties(device).total_memory
    weights, kv = _needs(config, sum(p.numel() for p in model.parameters()), model.config, max_model_len)
    return GpuShare(_share(weights, kv, total_bytes), total_bytes / GIB, weights / GIB, kv / GIB)


def planned_split(config: Any, total_bytes: Optional[int] = None) -> Optional[str]:
    """For ``validate-config``, before any weights load: how a spawned server and a CUDA trainer (``training.device``
    cuda, or auto with CUDA here) would split one GPU; ``None`` when they would not share one. The model's size comes
    from its ``config.json`` (a model on the meta device: no weights read); a model not on this machine yet is said.

    Args:
        total_bytes: the GPU's memory (default: CUDA device 0's here, if any).
    """
    import torch

    device = config.training.device
    cuda = device == "cuda" or (device == "auto" and torch.cuda.is_available())
    if not _shares_gpu(config, cuda, config.vllm.server_devices[0] if config.vllm.server_devices else None):
        return None
    head = "One GPU shared by the trainer and its spawned vLLM server: "
    model_config, params = _model_size(config.model.name_or_path)
    if model_config is None:
        return head + (f"the server's share is chosen from {config.model.name_or_path}'s size once it is on this "
                       "machine (weights + one step's KV cache + 1 GiB)")
    from ...config.batch_checks import needed_model_len

    context = getattr(model_config, "max_position_embeddings", None) or 0
    length = config.vllm.max_model_len or min(needed_model_len(config.sampling) or context, context or 10 ** 9)
    weights, kv = _needs(config, params, model_config, length)
    if total_bytes is None and torch.cuda.is_available():
        total_bytes = torch.cuda.get_device_properties(0).total_memory
    need = (weights + kv) / GIB + OVERHEAD_GIB
    split = (f"gpu_memory_utilization {_share(weights, kv, total_bytes):.2f} of this {total_bytes / GIB:.0f} GiB GPU"
             if total_bytes else f"that ÷ the GPU's memory, within [{MIN_SHARE}, {MAX_SHARE}] (e.g. "
             f"{_share(weights, kv, 24 * GIB):.2f} of a 24 GiB GPU, {_share(weights, kv, 80 * GIB):.2f} of 80 GiB)")
    return head + (f"the server needs {need:.1f} GiB (weights {weights / GIB:.1f} + KV cache for {length} tokens × "
                   f"{config.training.prompts_per_step * config.sampling.num_generations} sequences {kv / GIB:.1f} + "
                   f"{OVERHEAD_GIB:.0f}): {split}; the trainer gets the rest"
                   + ("; it sleeps while the trainer computes" if config.vllm.sleep_during_training else "")
                   + ". Set vllm.gpu_memory_utilization to choose it yourself")


def _model_size(name: str) -> tuple:
    """``(model config, parameter count)`` of a model on this machine (``(None, 0)``: not here, or unreadable)."""
    from ...models.builtin import PREFIX, cache_dir

    path = str(cache_dir() / "models" / name[len(PREFIX):]) if name.startswith(PREFIX) else name
    try:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM

        model_config = AutoConfig.from_pretrained(path, local_files_only=True)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(model_config)
        return model_config, sum(p.numel() for p in model.parameters())
    except Exception:  # noqa: BLE001 - not downloaded, or not a causal LM: the split is then said without numbers
        return None, 0
