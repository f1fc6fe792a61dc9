"""Benchmark: what a step without learning signal costs the trainer (issue 39.11). The same tiny-Llama run (transformers
generation, 4 prompts × 8 completions of up to 64 tokens, 4 steps) twice in one process: once with a reward that
varies inside every group (each step updates), once with a constant reward (no advantage, no KL, no entropy bonus:
every step skips its forward/backward, optimizer and schedule step). Compares ``time/training`` of steps 2-4.

    .venv/bin/python benchmarks/no_signal_step.py [--steps 4] [--completion 64]

Prints one line per run (median ``time/training``, the steps skipped) and the ratio; paste them into
docs/benchmarks.md with the command and the machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from tiny_model import make_tiny_model, tiny_config  # noqa: E402

from grpo_rollout.trainer import train  # noqa: E402
from grpo_rollout.trainer.reporting.progress import RichReporter  # noqa: E402

REWARDS = {
    "varied": "def varied(completion_ids, **kwargs):\n    return [float(ids[0] % 2) for ids in completion_ids]\n",
    "constant": "def constant(completion_ids, **kwargs):\n    return [1.0 for _ in completion_ids]\n",
}


def _run(root: Path, model: Path, reward: str, steps: int, completion: int) -> tuple:
    """(median time/training of steps 2.., steps skipped) of one run rewarded by ``reward``."""
    cfg = tiny_config(root, model, rewards_source=REWARDS[reward], reward=reward,
                      sampling={"max_completion_length": completion}, training={"max_steps": steps, "save_steps": 0})
    history = train(cfg, base_dir=root, reporter=RichReporter(quiet=True)).history
    return statistics.median(m["time/training"] for m in history[1:]), sum(m["no_signal_skipped"] for m in history)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--completion", type=int, default=64)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model = make_tiny_model(Path(tmp) / "tiny")
        results = {}
        for reward in REWARDS:
            (Path(tmp) / reward).mkdir()
            results[reward] = _run(Path(tmp) / reward, model, reward, args.steps, args.completion)
            print(f"{reward:8s} reward: time/training median {results[reward][0]:.4f} s, "
                  f"steps without signal {results[reward][1]}/{args.steps}")
    print(f"ratio without signal / with: {results['constant'][0] / results['varied'][0]:.5f}")


if __name__ == "__main__":
    main()
