"""Benchmark: math_accuracy's bounded scoring (each completion in a killable worker process, issue 28) against
math-verify called in-process on the main thread (its own signal.alarm bound), on the same completions; and a batch
with completions that hang math-verify.

    .venv/bin/python benchmarks/math_scoring.py [--completions 256] [--workers 2]

Prints one line per measurement (paste them into docs/benchmarks.md with the command and the machine).
"""

from __future__ import annotations

import argparse
import time

from math_verify import parse, verify

from grpo_rollout.rewards.math_answers import math_accuracy

TOWER = r"\boxed{5^{5^{5^{5^5}}}}"  # minutes of sympy without a bound


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--completions", type=int, default=256)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    n = args.completions
    completions = [f"The answer is \\boxed{{\\frac{{{i}}}{{3}}}}" for i in range(n)]
    references = [f"\\frac{{{i % 7}}}{{3}}" for i in range(n)]
    start = time.perf_counter()
    inline = [1.0 if verify(parse(r), parse(c)) else 0.0 for c, r in zip(completions, references)]
    in_process = time.perf_counter() - start
    math_accuracy(completions[:args.workers], references[:args.workers], workers=args.workers)  # start the workers
    start = time.perf_counter()
    bounded = math_accuracy(completions, references, workers=args.workers)
    pooled = time.perf_counter() - start
    print(f"{n} completions: in-process {in_process:.2f} s, bounded ({args.workers} workers) {pooled:.2f} s, "
          f"ratio {pooled / in_process:.2f}, same scores: {list(bounded) == inline}")
    hanging = [r"\boxed{4}"] * 95
    for i in (10, 30, 50, 70, 90):
        hanging.insert(i, TOWER)
    start = time.perf_counter()
    scores = math_accuracy(hanging, ["4"] * 100, timeout_s=1.0, workers=args.workers)
    print(f"100 completions, 5 of them hanging, timeout_s 1: {time.perf_counter() - start:.1f} s, correct scored "
          f"{sum(scores):.0f} of 95, timed out {scores.timed_out}")


if __name__ == "__main__":
    main()
