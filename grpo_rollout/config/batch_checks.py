"""How a step splits into micro-batches and across training processes, and the settings several servers share."""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional

from .problems import Problem, add_error as _err, add_warning as _warn
from .schema import Config


_WINDOW = 10_000  # how far from the configured value check_batch looks for a value that would divide
# the keys the micro-batch split is computed from: with an error at one of them, a split error would be a follow-on
_SPLIT_KEYS = ("sampling.num_generations", "training.prompts_per_step", "training.micro_batch_size")


def check_batch(config: Config, problems: List[Problem]) -> None:
    """``prompts_per_step × num_generations`` must split into whole micro-batches; lengths must fit the server."""
    s, t = config.sampling, config.training
    if min(s.num_generations, t.prompts_per_step, t.micro_batch_size) < 1:
        return
    seqs = t.prompts_per_step * s.num_generations
    if seqs % t.micro_batch_size:
        # search near the given values only (a window, not every number: the values may be huge)
        near = range(max(1, t.micro_batch_size - _WINDOW), min(seqs, t.micro_batch_size + _WINDOW) + 1)
        divisors = [d for d in near if seqs % d == 0] + [1, seqs]
        mbs = sorted(set(divisors), key=lambda d: (abs(d - t.micro_batch_size), -d))[:2]
        near = range(max(1, t.prompts_per_step - _WINDOW), t.prompts_per_step + _WINDOW + 1)
        pps = [p for p in near if (p * s.num_generations) % t.micro_batch_size == 0]
        pps = sorted(pps, key=lambda p: abs(p - t.prompts_per_step))[:2]
        fix = f"set training.micro_batch_size to {' or '.join(map(str, sorted(mbs)))}"
        if pps:
            fix += f", or training.prompts_per_step to {' or '.join(map(str, sorted(pps)))}"
        _err(problems, "training.micro_batch_size", t.micro_batch_size,
             f"prompts_per_step × num_generations = {t.prompts_per_step} × {s.num_generations} = {seqs} is not "
             f"divisible by micro_batch_size {t.micro_batch_size}", fix, depends_on=_SPLIT_KEYS)
    max_len = config.vllm.max_model_len
    if max_len and s.max_prompt_length and s.max_completion_length and \
            s.max_prompt_length + s.max_completion_length > max_len:
        _err(problems, "vllm.max_model_len", max_len,
             f"sampling.max_prompt_length + sampling.max_completion_length = {s.max_prompt_length} + "
             f"{s.max_completion_length} = {s.max_prompt_length + s.max_completion_length} exceeds it",
             f"raise vllm.max_model_len to {s.max_prompt_length + s.max_completion_length} or shorten the lengths",
             depends_on=("sampling.max_prompt_length", "sampling.max_completion_length", "vllm.max_model_len"))


def world_size() -> int:
    """How many training processes this run has: torchrun's ``WORLD_SIZE`` (1 without torchrun)."""
    try:
        return max(1, int(os.environ.get("WORLD_SIZE", "1")))
    except ValueError:
        return 1


def check_processes(config: Config, problems: List[Problem], processes: Optional[int] = None) -> None:
    """With N training processes each takes ``prompts_per_step / N`` whole groups, split into the same micro-batches
    one process would make; and the settings for several servers must fit together."""
    n = processes or world_size()
    s, t, v = config.sampling, config.training, config.vllm
    if n > 1 and t.prompts_per_step >= 1 and t.prompts_per_step % n:
        near = sorted({max(n, t.prompts_per_step - t.prompts_per_step % n), t.prompts_per_step + n - t.prompts_per_step % n})
        _err(problems, "training.prompts_per_step", t.prompts_per_step,
             f"is not divisible by the {n} training processes (each trains on whole groups of its own prompts)",
             f"set training.prompts_per_step to {' or '.join(map(str, near))}, or run {t.prompts_per_step} processes",
             depends_on=("training.prompts_per_step",))
    elif n > 1 and t.prompts_per_step >= 1 and s.num_generations >= 1 and t.micro_batch_size >= 1:
        local = t.prompts_per_step // n * s.num_generations
        if local % t.micro_batch_size:
            _err(problems, "training.micro_batch_size", t.micro_batch_size,
                 f"each of the {n} processes has {t.prompts_per_step // n} × {s.num_generations} = {local} sequences, "
                 f"not divisible by micro_batch_size {t.micro_batch_size}",
                 f"use a micro_batch_size that divides {local}", depends_on=_SPLIT_KEYS)
    if v.num_servers < 1:
        _err(problems, "vllm.num_servers", v.num_servers, "must be >= 1", "e.g. 2")
    elif v.server_devices and len(v.server_devices) != v.num_servers:
        _err(problems, "vllm.server_devices", v.server_devices,
             f"names devices for {len(v.server_devices)} server(s) but vllm.num_servers is {v.num_servers}",
             'one entry per server, e.g. ["4,5", "6,7"] for two servers on two GPUs each, or [] to inherit')
    if v.mode == "attach" and v.num_servers > 1:
        _warn(problems, "vllm.num_servers", v.num_servers, "is only used by spawn mode; attach uses vllm.url/urls",
              "list the running servers in vllm.urls")
    if t.async_generation and v.mode == "off":
        _err(problems, "training.async_generation", True,
             "needs a vLLM server: with vllm.mode off the trainer's own model generates, and it cannot sample the "
             "next step while the same model is being updated", "use vllm.mode: spawn or attach, or set it to false")
    if v.weight_transfer == "nccl":
        import torch

        if not torch.cuda.is_available():
            _err(problems, "vllm.weight_transfer", "nccl", "needs CUDA (an NCCL broadcast from GPU to GPU)",
                 "use auto (a folder for a server on this machine, HTTP bytes for one elsewhere)")


def needed_model_len(sampling: Any) -> Optional[int]:
    """``max_prompt_length + max_completion_length`` of a config's ``sampling`` section (``None`` when prompts are
    not limited): the ``max_model_len`` a server must offer."""
    if not sampling.max_prompt_length:
        return None
    return sampling.max_prompt_length + sampling.max_completion_length


def batch_arithmetic(config: Config) -> Dict[str, int]:
    """How a step splits: sequences per step, micro-batches (forward/backward passes) per step, totals."""
    s, t = config.sampling, config.training
    seqs = t.prompts_per_step * s.num_generations
    micro = -(-seqs // max(t.micro_batch_size, 1)) * t.num_iterations
    return {
        "prompts per step": t.prompts_per_step,
        "sequences per step (prompts × num_generations)": seqs,
        "micro-batches per step (× num_iterations)": micro,
        "optimizer updates per step": t.num_iterations,
        "total sequences": seqs * t.max_steps,
        "total optimizer updates": t.num_iterations * t.max_steps,
    }
