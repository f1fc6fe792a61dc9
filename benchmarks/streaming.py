"""Streaming rollouts against synchronous steps on a simulated GPU box (issue 30): samples/s and the trainer's busy share
for training.max_staleness 0, 1, 2, 4, 8 in one invocation.

    .venv/bin/python benchmarks/streaming.py [--steps 20] [--median-s 0.3] [--tail-ratio 10]

Generation is :class:`simulated_server.SimulatedServer`: each group's request sleeps a log-normal latency (p99/p50 =
``--tail-ratio``) and answers random tokens, so it takes none of the 2 cores and behaves like a server on a GPU; the
trainer is the real one (a 2-layer Llama, 4 prompts × 8 completions of up to 16 tokens per step). Every setting runs
the same steps with the same latency draws' seed. Reported per k:

- samples/s: completions trained / the steps' summed ``time/step`` (seconds);
- trainer busy: 1 − (summed ``time/generation``, the trainer waiting for rollouts) / (summed ``time/step``);
- servers idle: 1 − (time with at least one request running) / (the steps' wall time);
- staleness mean / max and groups dropped as stale (k ≥ 1).

k = 0 is the synchronous step (the code path of ``max_staleness: null``). Results: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests"), str(REPO / "benchmarks")]

from simulated_server import SimulatedServer, lognormal_latency, use_simulated_server  # noqa: E402
from tiny_model import make_tiny_model, tiny_config  # noqa: E402


def run(k: int, steps: int, median_s: float, tail_ratio: float, root: Path, model: Path) -> dict:
    """One training run at ``max_staleness`` k; its summary numbers."""
    from grpo_rollout.trainer import train
    from grpo_rollout.trainer.reporting.progress import RichReporter

    servers = []

    def server_of(loaded):
        servers.append(SimulatedServer(loaded.tokenizer, lognormal_latency(median_s, tail_ratio, seed=1), 49152))
        return servers[-1]

    root.mkdir(parents=True, exist_ok=True)
    use_simulated_server(setattr, server_of)
    cfg = tiny_config(root, model, rows=200, sampling={"max_completion_length": 16},
                      training={"max_steps": steps, "max_staleness": k},
                      vllm={"mode": "attach", "url": "http://simulated", "max_logprob_mismatch": None})
    result = train(cfg, base_dir=root, reporter=RichReporter(quiet=True))
    h = result.history
    total = sum(m["time/step"] for m in h)
    waiting = sum(m["time/generation"] for m in h)
    out = {"k": k, "samples_per_s": steps * 4 * 8 / total, "trainer_busy": 1 - waiting / total,
           "servers_idle": max(0.0, 1 - servers[0].busy_seconds() / total), "step_s": total / steps,
           "reward_first3": sum(m["reward"] for m in h[:3]) / 3, "reward_last3": sum(m["reward"] for m in h[-3:]) / 3}
    if k:
        out.update(staleness_mean=sum(m["async/staleness_mean"] for m in h) / steps,
                   staleness_max=max(m["async/staleness_max"] for m in h),
                   dropped_stale=sum(m["async/groups_dropped_stale"] for m in h))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--median-s", type=float, default=0.3, help="median seconds of a group's rollout")
    parser.add_argument("--tail-ratio", type=float, default=10.0, help="p99 / p50 of the rollout latency")
    parser.add_argument("--ks", default="0,1,2,4,8")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="grpo-rollout-streaming-") as tmp:
        model = make_tiny_model(Path(tmp) / "model")
        for k in (int(x) for x in args.ks.split(",")):
            rows.append(run(k, args.steps, args.median_s, args.tail_ratio, Path(tmp) / f"k{k}", model))
            print(json.dumps({key: round(v, 3) if isinstance(v, float) else v for key, v in rows[-1].items()}),
                  flush=True)
    base = rows[0]["samples_per_s"]
    print("| k | samples/s | × k=0 | trainer busy | servers idle | staleness mean / max | dropped stale |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        stale = f"{r['staleness_mean']:.2f} / {r['staleness_max']}" if r["k"] else "0 / 0"
        print(f"| {r['k']} | {r['samples_per_s']:.1f} | {r['samples_per_s'] / base:.2f} | {r['trainer_busy']:.0%} | "
              f"{r['servers_idle']:.0%} | {stale} | {r.get('dropped_stale', 0)} |")


if __name__ == "__main__":
    main()
