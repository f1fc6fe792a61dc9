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

from ...config.schema import Config

OVERHEAD_GIB = 1.0
MIN_SHARE, MAX_SHARE = 0.05, 0.5
GIB = 1024 ** 3
_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclass(frozen=True)
class GpuShare:
    """One server's part of a shared GPU: ``share`` (its ``gpu_memory_utilization``) of ``total_gib``, from its
    ``weights_gib`` and ``kv_cache_gib`` (GiB), for each of ``servers`` servers on that GPU. ``kv_cache_gib`` is
    ``None`` when the model's config does not give its attention shape (the share is then the cap)."""

    share: float
    total_gib: float
    weights_gib: float
    kv_cache_gib: Optional[float]
    servers: int = 1

    @property
    def needed_gib(self) -> Optional[float]:
        """What one server needs (GiB): weights + KV cache + the overhead."""
        return None if self.kv_cache_gib is None else self.weights_gib + self.kv_cache_gib + OVERHEAD_GIB

    def parts(self) -> str:
        """``weights 0.9 + KV cache 0.6 + 1 GiB``, the sum said."""
        kv = "KV cache unknown" if self.kv_cache_gib is None else f"KV cache {self.kv_cache_gib:.1f}"
        return f"weights {self.weights_gib:.1f} + {kv} + {OVERHEAD_GIB:.0f}"

    def too_small(self) -> Optional[str]:
        """A warning when the share is capped below what the server needs (``None``: it fits)."""
        need = self.needed_gib
        if need is None or need <= self.share * self.total_gib + 1e-9:
            return None
        return (f"the server needs {need:.1f} GiB but the servers together get at most {MAX_SHARE:.0%} of the "
                f"{self.total_gib:.0f} GiB GPU, so it will likely not start: give each server its own GPU "
                "(vllm.server_devices), use a smaller model, or set vllm.gpu_memory_utilization")

    def text(self) -> str:
        """The start-up message."""
        who = "vLLM shares" if self.servers == 1 else f"{self.servers} vLLM servers share"
        each = "it gets" if self.servers == 1 else "each gets"
        warning = self.too_small()
        return (f"{who} the trainer's GPU ({self.total_gib:.0f} GiB): {each} gpu_memory_utilization "
                f"{self.share:.2f} ({self.share * self.total_gib:.1f} GiB: {self.parts()} GiB), the trainer the "
                "rest; set vllm.gpu_memory_utilization to choose it yourself" + (f". Warning: {warning}" if warning
                                                                                  else ""))


def _needs(config: Config, params: int, model_config: Config, max_model_len: int, servers: int = 1) -> tuple:
    """``(weights, kv_cache)`` bytes one of ``servers`` servers of this model needs for its part of one step's
    sequences (the module's rule); ``kv_cache`` is ``None`` when the config lacks the attention shape. A composite
    config (vision-language) is read through its text model's config."""
    size = _BYTES.get(config.model.dtype, 4)
    c = model_config.get_text_config() if hasattr(model_config, "get_text_config") else model_config
    try:
        heads = c.num_attention_heads
        head_dim = getattr(c, "head_dim", None) or c.hidden_size // heads
        kv_heads = getattr(c, "num_key_value_heads", None) or heads
        layers = c.num_hidden_layers
    except (AttributeError, TypeError, ZeroDivisionError):
        return params * size, None
    sequences = -(-config.training.prompts_per_step * config.sampling.num_generations // servers)
    return params * size, 2 * layers * kv_heads * head_dim * size * max_model_len * sequences


def _share(weights: int, kv: Optional[int], total_bytes: int, servers: int = 1) -> float:
    cap = MAX_SHARE / servers
    if kv is None:
        return math.floor(cap * 100) / 100
    share = math.ceil((weights + kv + OVERHEAD_GIB * GIB) / total_bytes * 100) / 100
    return min(math.floor(cap * 100) / 100, max(MIN_SHARE, share))


def _shares_gpu(config: Config, cuda_trainer: bool, server_devices: Optional[str]) -> bool:
    return config.vllm.mode == "spawn" and cuda_trainer and not server_devices \
        and "gpu_memory_utilization" not in config.vllm.model_fields_set


def _plan(config: Config, params: int, model_config: Config, max_model_len: int, total_bytes: int) -> GpuShare:
    servers = max(1, config.vllm.num_servers)
    weights, kv = _needs(config, params, model_config, max_model_len, servers)
    return GpuShare(_share(weights, kv, total_bytes, servers), total_bytes / GIB, weights / GIB,
                    None if kv is None else kv / GIB, servers)


def shared_gpu_share(config: Config, model: Any, max_model_len: int, server_devices: Optional[str],
                     total_bytes: Optional[int] = None) -> Optional[GpuShare]:
    """The share each spawned server on the trainer's GPU gets (see the module docstring; with
    ``vllm.num_servers`` > 1 each holds the weights and a KV cache for its part of the sequences, and they share the
    cap), or ``None`` when it would not share one: not spawning, a CPU trainer, devices given for the server, or
    ``vllm.gpu_memory_utilization`` set.

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
    return _plan(config, sum(p.numel() for p in model.parameters()), model.config, max_model_len, total_bytes)


def planned_split(config: Config, total_bytes: Optional[int] = None) -> Optional[str]:
    """For ``validate-config``, before any weights load: how spawned servers and a CUDA trainer (``training.device``
    cuda, or auto with CUDA here) would split one GPU; ``None`` when they would not share one. The model's size comes
    from its ``config.json`` (a model on the meta device: no weights read); a model not on this machine yet, or one
    whose config cannot be read, is said.

    Args:
        total_bytes: the GPU's memory (default: CUDA device 0's here, if any).
    """
    import torch

    device = config.training.device
    cuda = device == "cuda" or (device == "auto" and torch.cuda.is_available())
    if not _shares_gpu(config, cuda, config.vllm.server_devices[0] if config.vllm.server_devices else None):
        return None
    k = max(1, config.vllm.num_servers)
    head = f"One GPU shared by the trainer and its {'spawned vLLM server' if k == 1 else f'{k} spawned vLLM servers'}: "
    model_config, params, why = _model_size(config.model.name_or_path, config.model.trust_remote_code)
    if model_config is None:
        return head + (f"the servers' share is chosen at start from {config.model.name_or_path}'s size (weights + "
                       f"one step's KV cache + 1 GiB); {why}")
    from ...config.batch_checks import needed_model_len

    context = getattr(model_config.get_text_config(), "max_position_embeddings", None) or 0
    length = config.vllm.max_model_len or min(needed_model_len(config.sampling) or context, context or 10 ** 9)
    if total_bytes is None and torch.cuda.is_available():
        total_bytes = torch.cuda.get_device_properties(0).total_memory
    plans = {gib: _plan(config, params, model_config, length, gib * GIB) for gib in
             ([total_bytes / GIB] if total_bytes else [24, 80])}
    first = next(iter(plans.values()))
    need = f"{first.needed_gib:.1f} GiB" if first.needed_gib is not None else "an unknown amount (its config.json " \
        "has no attention shape)"
    split = ", ".join(f"gpu_memory_utilization {p.share:.2f} of a {gib:.0f} GiB GPU" for gib, p in plans.items())
    each = "the server needs" if k == 1 else "each server needs"
    warning = first.too_small()
    return head + (f"{each} {need} ({first.parts()}; KV cache for {length} tokens × "
                   f"{-(-config.training.prompts_per_step * config.sampling.num_generations // k)} sequences): "
                   f"{split}{'' if total_bytes else ' (this machine has no GPU)'}; the trainer gets the rest"
                   + ("; the servers sleep while the trainer computes" if config.vllm.sleep_during_training else "")
                   + ". Set vllm.gpu_memory_utilization to choose it yourself"
                   + (f". Warning: {warning}" if warning else ""))


def _model_size(name: str, trust_remote_code: bool = False) -> tuple:
    """``(model config, parameter count, None)`` of a model on this machine, or ``(None, 0, why not)``."""
    from ...models.builtin import PREFIX, cache_dir

    path = str(cache_dir() / "models" / name[len(PREFIX):]) if name.startswith(PREFIX) else name
    try:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM

        model_config = AutoConfig.from_pretrained(path, local_files_only=True, trust_remote_code=trust_remote_code)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(model_config, trust_remote_code=trust_remote_code)
        return model_config, sum(p.numel() for p in model.parameters()), None
    except OSError as exc:  # not a folder here and not in the hub cache, or a folder whose config.json is broken
        from pathlib import Path

        if not Path(path).is_dir():
            return None, 0, "it is not on this machine yet"
        return None, 0, f"its config could not be read here ({str(exc)[:160]})"
    except Exception as exc:  # noqa: BLE001 - unreadable here: said, never a traceback in validate-config
        return None, 0, f"its config could not be read here ({type(exc).__name__}: {str(exc)[:160]})"
