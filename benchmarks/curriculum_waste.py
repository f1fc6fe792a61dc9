"""Benchmark by simulation: how many rollouts the pass-rate curriculum (``data.curriculum: pass_rate``, issue 32.7)
saves from groups without reward variance (no advantage, nothing learned), with the trainer's own prompt order and
curriculum (:class:`~grpo_rollout.orchestrator.prompt_order.PromptOrder`,
:class:`~grpo_rollout.orchestrator.curriculum.PassRateCurriculum`) and a simulated policy instead of a model.

The simulated policy solves prompt ``i`` with probability ``p_i``: a quarter of the prompts start solved (``p = 1``), a
quarter unsolvable (``p = 0``, they stay so), the rest in ``[0.1, 0.9]``; a group with a mixed result teaches its
prompt, ``p_i += --learn`` (up to 1). A completion's reward is 1 when solved. Each prompt's k-th visit draws its
completions from a generator seeded by ``(seed, prompt, k)``, so both arms see the same outcome for the same visit.

    .venv/bin/python benchmarks/curriculum_waste.py [--prompts 200] [--steps 100] [--per-step 16] [--group 8]

Prints, per arm (no curriculum; pass_rate with patience/pause pairs; the defaults as a stream with
``max_staleness: 1`` runs them, each draw counting the visits of 3 steps before): the share of groups without reward
variance, the mixed groups (the ones with a gradient) per step, and the mean pass probability of the learnable
prompts at the end. Paste the lines into docs/benchmarks.md with the command.
"""

from __future__ import annotations

import argparse
import random
from typing import List, Optional, Tuple

from grpo_rollout.orchestrator.curriculum import PassRateCurriculum
from grpo_rollout.orchestrator.prompt_order import PromptOrder


def start_skills(prompts: int, seed: int) -> List[float]:
    rng = random.Random(seed)
    quarter = prompts // 4
    return [1.0] * quarter + [0.0] * quarter + [rng.uniform(0.1, 0.9) for _ in range(prompts - 2 * quarter)]


def run_arm(args, curriculum: Optional[Tuple[int, int]], lag: int = 1) -> Tuple[float, float, float]:
    skills = start_skills(args.prompts, args.seed)
    learnable = [i for i, p in enumerate(skills) if 0 < p < 1]
    tracker = PassRateCurriculum(*curriculum, success_reward=1.0) if curriculum else None
    order = PromptOrder(args.prompts, args.per_step, args.seed, shuffle=True, curriculum=tracker, lag=lag)
    visits = [0] * args.prompts
    flat = mixed = 0
    for step in range(args.steps):
        rows = order.indices(step)
        rewards = []
        for row in rows:
            rng = random.Random(f"{args.seed}/{row}/{visits[row]}")
            visits[row] += 1
            group = [1.0 if rng.random() < skills[row] else 0.0 for _ in range(args.group)]
            rewards += group
            if 0 < sum(group) < args.group:
                mixed += 1
                skills[row] = min(1.0, skills[row] + args.learn)
            else:
                flat += 1
        if tracker is not None:
            order.count(step, [(rows, rewards)])  # as the stage does: the next step's draw counts them
    groups = args.steps * args.per_step
    return flat / groups, mixed / args.steps, sum(skills[i] for i in learnable) / len(learnable)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=200)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--per-step", type=int, default=16)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--learn", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    epochs = args.steps * args.per_step / args.prompts
    print(f"{args.prompts} prompts, {args.steps} steps of {args.per_step} groups of {args.group} ({epochs:.1f} epochs)")
    for name, curriculum, lag in (("none", None, 1), ("pass_rate 2/1", (2, 1), 1), ("pass_rate 1/1", (1, 1), 1),
                                  ("pass_rate 2/3", (2, 3), 1), ("2/1, lag 3", (2, 1), 3)):
        flat, mixed, skill = run_arm(args, curriculum, lag)
        print(f"{name:14s} groups without variance {flat:6.1%}   mixed groups per step {mixed:5.2f}   "
              f"learnable prompts' mean pass probability at the end {skill:.3f}")


if __name__ == "__main__":
    main()
