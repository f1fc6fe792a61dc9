"""Benchmark: the cost of a seed per prompt (issue 28.4) on /generate/: 4 quickstart prompts × 8 samples × 32 tokens
on the embedded model, seeded and unseeded, median of 5 requests after a warm-up. Run it on a commit before and one
after a change to the route to compare them in one sitting.

    .venv/bin/python benchmarks/seeded_generation.py [--label new]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from grpo_rollout.generation.server.launch import ServerSettings
from grpo_rollout.generation.spawn import ManagedServer
from grpo_rollout.models.builtin import resolve_model_path

SUMS = ((1, 2), (3, 5), (6, 2), (9, 4))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--label", default="")
    args = ap.parse_args()
    path = resolve_model_path("builtin:smollm2-135m-instruct")
    server = ManagedServer(ServerSettings(model=path, port=0, max_model_len=256), Path(tempfile.mkdtemp()) / "vllm.log")
    server.start(timeout_s=900)
    prompts = [[{"role": "user", "content": f"What is {a} + {b}? Reply with only the number."}] for a, b in SUMS]
    try:
        for label, seed in (("seeded", 0), ("unseeded", None)):
            times, tokens = [], 0
            for rep in range(6):
                start = time.perf_counter()
                answer = httpx.post(server.url + "/generate/", timeout=600, json={
                    "prompts": prompts, "n": 8, "temperature": 0.7, "max_tokens": 32,
                    "seed": None if seed is None else seed + rep})
                answer.raise_for_status()
                times.append(time.perf_counter() - start)
                tokens += sum(len(c) for c in answer.json()["completion_ids"]) if rep else 0
            print(f"{args.label} {label}: median {statistics.median(times[1:]):.2f} s a request, "
                  f"{tokens / sum(times[1:]):.0f} tokens/s")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
