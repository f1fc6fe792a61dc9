"""Benchmark: step time with 1 vs 2 training processes and 1 vs 2 vLLM servers, one after the other in one run.

    .venv/bin/python benchmarks/scaling.py [--model builtin:smollm2-135m-instruct] [--steps 4] [--dtype float32]

Each setup trains the quickstart task (examples/quickstart/task.py) for ``--steps`` steps of 4 prompts × 8
completions (up to 32 tokens) through the real CLI (``torchrun -m grpo_rollout train`` for 2 processes) and reads
``metrics.jsonl``: the median step time over steps 2.. (the first step warms up), split into generation / training /
weight sync, and the wall time of the whole command (server start and model load included). Ratios are against the
first setup. On a 2-core CPU box every process and server shares the same two cores, so expect no speed-up there:
the numbers show the overhead of the machinery. On a GPU box give the devices (``--trainer-devices 0,1
--server-devices 2 3``): only the setups they allow run. Prints a markdown table for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def setups(args: argparse.Namespace):
    """``(label, processes, vllm section)`` of each run (on a GPU box: only those the given devices allow)."""
    out = []
    trainer = [d for d in (args.trainer_devices or "").split(",") if d]
    for processes in (1, 2):
        for servers in (1, 2):
            if args.server_devices and (servers > len(args.server_devices) or processes > len(trainer)):
                continue
            vllm = {"mode": "spawn", "num_servers": servers}
            if args.server_devices:
                vllm.update(server_devices=args.server_devices[:servers],
                            gpu_memory_utilization=args.gpu_memory_utilization)
            out.append((f"{processes} process{'es' if processes > 1 else ''}, {servers} server"
                        f"{'s' if servers > 1 else ''}", processes, vllm))
    return sorted(out, key=lambda item: (item[2]["num_servers"], item[1]))


def run(label: str, processes: int, vllm: dict, args: argparse.Namespace, folder: Path) -> dict:
    config = {
        "model": {"name_or_path": args.model, "dtype": args.dtype},
        "data": {"train": str(ROOT / "examples/quickstart/task.py:addition_problems")},
        "rewards": [{"function": "grpo_rollout.rewards.library:accuracy"},
                    {"function": "grpo_rollout.rewards.library:length_penalty", "weight": 0.5,
                     "kwargs": {"target_length": 8}}],
        "sampling": {"num_generations": 8, "temperature": 0.7, "max_completion_length": 32, "max_prompt_length": 128,
                     "seed": 0},
        "training": {"output_dir": str(folder / "out"), "max_steps": args.steps, "prompts_per_step": 4,
                     "micro_batch_size": 8, "learning_rate": 1e-5},
        "vllm": {"kv_cache_space_gib": 1, **vllm},
    }
    (folder / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    cmd = [sys.executable, "-m", "grpo_rollout", "train", "config.yaml"]
    if processes > 1:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(processes),
               "-m", "grpo_rollout", "train", "config.yaml"]
    env = {**os.environ, "OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 2) // processes))}
    if args.trainer_devices:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(args.trainer_devices.split(",")[:processes])
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=folder, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{label} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    rows = [json.loads(line) for line in (folder / "out" / "metrics.jsonl").read_text().splitlines()][1:]

    def median(key: str) -> float:
        return statistics.median(r[key] for r in rows)

    return {"label": label, "step": median("time/step"), "generation": median("time/generation"),
            "training": median("time/training"), "sync": median("time/sync"), "wall": wall,
            "mismatch": max(r.get("sampler/logprob_abs_diff", 0.0) for r in rows)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="builtin:smollm2-135m-instruct")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--trainer-devices", default=None, help="GPU box: CUDA devices of the trainer, e.g. 0,1")
    parser.add_argument("--server-devices", nargs="*", default=None, help="GPU box: each server's, e.g. 2 3")
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.85)
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, (label, processes, vllm) in enumerate(setups(args)):
            folder = Path(tmp) / f"run{i}"
            folder.mkdir()
            results.append(run(label, processes, vllm, args, folder))
            print(f"{label}: {results[-1]}", file=sys.stderr)
    base = results[0]["step"]
    print("| setup | step (s, median) | ratio | generation | training | sync | whole command (s) | max \\|Δlogp\\| |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        print(f"| {r['label']} | {r['step']:.1f} | {r['step'] / base:.2f} | {r['generation']:.1f} | "
              f"{r['training']:.1f} | {r['sync']:.2f} | {r['wall']:.0f} | {r['mismatch']:.1e} |")


if __name__ == "__main__":
    main()
