"""What a step held in memory, as ``memory/*`` metrics (GiB): the trainer process's resident set after the step and
its peak so far (``ru_maxrss``: the operating system's own high-water mark), and on CUDA the peak of allocated tensor
memory during the step (``torch.cuda.max_memory_allocated``, reset when the step starts). With several training
processes each is the largest over the ranks."""

from __future__ import annotations

import resource
import sys
from typing import Any, Dict

import torch

from ...runs import names as rn

GIB = 1024 ** 3


def start_step(device: torch.device) -> None:
    """Reset CUDA's peak so that ``memory/cuda_peak_gib`` is this step's."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def memory_metrics(device: torch.device) -> Dict[str, float]:
    """This process's ``memory/rss_gib`` (now), ``memory/peak_rss_gib`` (the process's peak so far) and, on CUDA,
    ``memory/cuda_peak_gib`` (the step's peak of allocated tensors), in GiB."""
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    out = {rn.MEMORY_PEAK_RSS: peak_kib / (GIB if sys.platform == "darwin" else 1024 ** 2)}
    try:
        with open("/proc/self/statm") as f:  # pages: size resident ...
            out[rn.MEMORY_RSS] = int(f.read().split()[1]) * resource.getpagesize() / GIB
    except OSError:  # no /proc (macOS): the peak alone
        pass
    if device.type == "cuda":
        out[rn.MEMORY_CUDA_PEAK] = torch.cuda.max_memory_allocated(device) / GIB
    return out


def largest_rank_memory(dist: Any) -> Dict[str, float]:
    """:func:`memory_metrics` of every rank (a collective), each key's largest value (a key only some ranks have
    keeps theirs)."""
    out: Dict[str, float] = {}
    for part in dist.gather(memory_metrics(dist.device)):
        for k, v in part.items():
            out[k] = max(out.get(k, v), v)
    return out
