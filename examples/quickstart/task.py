"""The quickstart task: small additions, answered briefly.

The embedded SmolLM2-135M-Instruct gets about half of "What is 7 + 8? Reply with only the number." right at
temperature 0.7 and often adds a sentence around the number, so rewards vary inside every group from step 0 and
GRPO has something to push on: correctness (``grpo_rollout.rewards.library:accuracy``) and brevity
(``grpo_rollout.rewards.library:length_penalty``).
"""

from __future__ import annotations

import random


def addition_problems(num_rows: int = 256, seed: int = 0):
    """A ``datasets.Dataset`` of ``num_rows`` chat prompts "What is A + B? ..." (A, B in 1..9) with an ``answer``
    column holding A + B as a string."""
    return _additions(num_rows, seed, (1, 9))


def held_out_additions(num_rows: int = 32, seed: int = 1):
    """Held-out prompts for the quickstart's evaluation: the same question with a two-digit first number (A in
    10..29, B in 1..9), so no held-out sum is one the model trained on."""
    return _additions(num_rows, seed, (10, 29))


def _additions(num_rows: int, seed: int, first: tuple):
    from datasets import Dataset

    rng = random.Random(seed)
    rows = []
    for _ in range(num_rows):
        a, b = rng.randint(*first), rng.randint(1, 9)
        rows.append({"prompt": [{"role": "user", "content": f"What is {a} + {b}? Reply with only the number."}],
                     "answer": str(a + b)})
    return Dataset.from_list(rows)
