"""Benchmark: a CPU server's start and generation speed with the model in vLLM's engine-core process (what
``server_command`` starts on every core: ``VLLM_ENABLE_V1_MULTIPROCESSING=0``) against a worker process of its own
bound to the same cores (vLLM's multi-process executor: what every start used before, and what a server with the user's
own ``VLLM_CPU_OMP_THREADS_BIND`` keeps), in one run.

    .venv/bin/python benchmarks/server_start.py [--model builtin:smollm2-135m-instruct] [--rounds 2]

Each arm starts the server (seconds until ``/health/`` answers), generates 32 sequences × 64 tokens (``ignore_eos``,
temperature 1, a seed per round) ``--rounds`` times and stops it; the arms alternate. Prints one line per arm and
round and the completion token ids' agreement between the arms. Paste the lines into docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import httpx

from grpo_rollout.generation.server.launch import ServerSettings
from grpo_rollout.generation.spawn import ManagedServer
from grpo_rollout.models.builtin import resolve_model_path


def one_arm(model: str, engine_process: bool, rounds: int) -> list:
    """Start a server in one layout, time its start and ``rounds`` generations; return the generated token ids."""
    cores = ",".join(map(str, sorted(os.sched_getaffinity(0))))
    if not engine_process:  # a binding of one's own: server_command leaves vLLM's worker process, bound so
        os.environ.update(VLLM_CPU_OMP_THREADS_BIND=cores, VLLM_CPU_NUM_OF_RESERVED_CPU="0")
    name = "engine process" if engine_process else "bound worker"
    settings = ServerSettings(model=model, port=0, max_model_len=512, cpu_cores=cores)
    srv = ManagedServer(settings, Path(tempfile.mkdtemp()) / "vllm.log")
    started = time.perf_counter()
    srv.start(timeout_s=600)
    print(f"{name}: start {time.perf_counter() - started:.1f} s")
    ids = []
    try:
        for seed in range(rounds):
            t = time.perf_counter()
            answer = httpx.post(srv.url + "/v1/completions", timeout=600, json={
                "model": model, "prompt": "Once upon a time", "n": 32, "max_tokens": 64, "ignore_eos": True,
                "temperature": 1.0, "seed": seed, "return_token_ids": True}).json()
            tokens = answer["usage"]["completion_tokens"]
            dt = time.perf_counter() - t
            print(f"{name}: round {seed}: {tokens} tokens in {dt:.1f} s = {tokens / dt:.0f} tok/s")
            ids.append(sorted(tuple(c["token_ids"]) for c in answer["choices"]))
    finally:
        srv.stop()
        for key in ("VLLM_CPU_OMP_THREADS_BIND", "VLLM_CPU_NUM_OF_RESERVED_CPU"):
            os.environ.pop(key, None)
    return ids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="builtin:smollm2-135m-instruct")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    model = resolve_model_path(args.model)
    worker = one_arm(model, engine_process=False, rounds=args.rounds)
    engine = one_arm(model, engine_process=True, rounds=args.rounds)
    same = sum(a == b for a, b in zip(worker, engine))
    print(f"rounds with the same completion token ids in both layouts: {same} of {args.rounds}")


if __name__ == "__main__":
    main()
