"""Benchmark: where the trainer's memory goes, phase by phase, on the job of ``vs_trl.py`` (issue 23).

    .venv/bin/python benchmarks/memory_phases.py [--mode spawn|off] [--steps 3] [--trl]

A thread samples this process's resident set (``/proc/self/statm``) every 5 ms while the recipe runs; each sample is
charged to the phase running then (set-up, generation + rewards, the policy update split into forward, backward and
the optimizer step, the weight sync). Printed: a table of each phase's peak RSS and how far it rose above the RSS
when the phase began, and the process's high-water mark (``ru_maxrss``). ``--trl`` runs TRL's GRPOTrainer on the same
job in a second process with the same sampler (generation + scoring, and the whole training step) for comparison.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

GIB = 1024 ** 3
PAGE = resource.getpagesize()


class Sampler:
    """Peak RSS per phase (GiB): a background thread reads the resident set every ``interval_s``; ``rises``: the
    largest climb above the RSS at a phase's entry, over all its entries (what the phase itself allocated)."""

    def __init__(self, interval_s: float = 0.005):
        self.phase, self.entry, self.interval_s = "between phases", 0.0, interval_s
        self.peaks: dict = {}
        self.rises: dict = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    @staticmethod
    def rss() -> float:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * PAGE / GIB

    def _run(self) -> None:
        while not self._stop.is_set():
            now, phase, entry = self.rss(), self.phase, self.entry
            self.peaks[phase] = max(self.peaks.get(phase, 0.0), now)
            self.rises[phase] = max(self.rises.get(phase, 0.0), now - entry)
            time.sleep(self.interval_s)

    @contextmanager
    def within(self, phase: str):
        outer = self.phase, self.entry
        self.phase, self.entry = phase, self.rss()
        try:
            yield
        finally:
            now = self.rss()  # the last sample of this entry, in case the thread missed it
            self.peaks[phase] = max(self.peaks.get(phase, 0.0), now)
            self.rises[phase] = max(self.rises.get(phase, 0.0), now - self.entry)
            self.phase, self.entry = outer

    def wrap(self, owner: type, name: str, phase: str) -> None:
        real = getattr(owner, name)

        def wrapped(*args, **kwargs):
            with self.within(phase):
                return real(*args, **kwargs)

        setattr(owner, name, wrapped)

    def report(self, title: str) -> dict:
        self._stop.set()
        self._thread.join()
        high = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20
        return {"title": title, "peaks": self.peaks, "rises": self.rises, "maxrss": high}


def run_grpo(mode: str, steps: int, model: str, training: dict) -> dict:
    sampler = Sampler()
    import torch

    from grpo_rollout.trainer.recipe import GRPORecipe
    from grpo_rollout.trainer.update.policy_update import PolicyUpdate
    from grpo_rollout.trainer.parallel.weight_sync import WeightSync

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import vs_trl

    sampler.wrap(GRPORecipe, "setup", "set-up (models, optimizer, server, first sync)")
    sampler.wrap(GRPORecipe, "collect", "generation + rewards")
    sampler.wrap(PolicyUpdate, "backward", "forward + backward (log-probs, loss, grads)")
    sampler.wrap(WeightSync, "send", "weight sync (gather, cast, write, reload)")
    real_step = torch.optim.AdamW.step  # the fused one too

    def step(self, *args, **kwargs):
        with sampler.within("optimizer step (AdamW)"):
            return real_step(self, *args, **kwargs)

    torch.optim.AdamW.step = step
    args = argparse.Namespace(model=model, dtype="float32", steps=steps, training=json.dumps(training), vllm=None)
    out: dict = {}
    vs_trl.work_grpo(args, out, mode)
    result = sampler.report(f"grpo-rollout vllm.mode {mode} {json.dumps(training) if training else ''}".strip())
    later = out["steps"][1:] or out["steps"]  # the first step warms up
    result["times"] = {k: statistics.median(s[k] for s in later) for k in ("step", "training")}
    return result


def run_trl(steps: int, model: str) -> dict:
    sampler = Sampler()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import trl
    import vs_trl

    sampler.wrap(trl.GRPOTrainer, "_generate_and_score_completions", "generation + rewards")
    sampler.wrap(trl.GRPOTrainer, "compute_loss", "forward (loss)")
    import torch

    real_step = torch.optim.AdamW.step

    def step(self, *args, **kwargs):
        with sampler.within("optimizer step (AdamW)"):
            return real_step(self, *args, **kwargs)

    torch.optim.AdamW.step = step
    args = argparse.Namespace(model=model, dtype="float32", steps=steps, gpu=False, trl_vllm=None)
    vs_trl.work_trl(args, {})
    return sampler.report("TRL GRPOTrainer")


def _print(result: dict) -> None:
    times = result.get("times")
    timing = f"; median step {times['step']:.1f} s, training {times['training']:.1f} s" if times else ""
    print(f"\n{result['title']}: high-water mark (ru_maxrss) {result['maxrss']:.2f} GiB{timing}\n")
    print("| phase | peak RSS (GiB) | largest rise above its entry (GiB) |")
    print("|---|---:|---:|")
    for phase, peak in result["peaks"].items():
        print(f"| {phase} | {peak:.2f} | {result['rises'].get(phase, 0):.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", default="spawn", choices=["spawn", "off"])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--model", default="builtin:smollm2-135m-instruct")
    parser.add_argument("--training", default="{}", help="JSON of extra training settings for grpo-rollout")
    parser.add_argument("--trl", action="store_true", help="also TRL on the same job (another process)")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        result = run_trl(args.steps, args.model) if args.worker == "trl" else \
            run_grpo(args.mode, args.steps, args.model, json.loads(args.training))
        print("RESULT " + json.dumps(result))
        return
    kinds = ["grpo"] + (["trl"] if args.trl else [])
    for kind in kinds:  # each a fresh process: its high-water mark is its own
        cmd = [sys.executable, __file__, "--worker", kind, "--mode", args.mode, "--steps", str(args.steps),
               "--model", args.model, "--training", args.training]
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=Path(__file__).resolve().parent.parent)
        lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
        if not lines:
            raise SystemExit(f"{kind} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
        _print(json.loads(lines[-1][len("RESULT "):]))


if __name__ == "__main__":
    main()
