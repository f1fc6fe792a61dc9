"""Which prompts DAPO's dynamic sampling rolls out again when a step's groups lack reward variance.

DAPO (Yu et al. 2025, arXiv:2503.14476, section 3.2) drops groups whose completions all got the same reward and
samples more prompts until the batch is full. Refill round ``r`` (1, 2, ...) of step ``s`` walks another shuffled
order of the dataset (seeded by the round, so a resumed run draws the same prompts) from the step's position on and
takes the first ``prompts_per_step`` rows that this step has not drawn yet — neither its own prompts nor an earlier
round's — so no prompt is trained twice in one step. The draw covers the whole step (every rank computes the same
list and takes its own slice), so ranks never share a prompt either.
"""

from __future__ import annotations

from typing import Iterable, List

from .prompt_order import PromptSampler

ROUND_SEED_STRIDE = 1_000_003  # round r's order is seeded with training.seed + r × this


def refill_indices(step: int, round_: int, num_rows: int, prompts_per_step: int, seed: int,
                   drawn: Iterable[int]) -> List[int]:
    """Row indices for refill round ``round_`` of step ``step`` (0-based): at most ``prompts_per_step`` rows, none
    in ``drawn`` (the rows the step has drawn so far), in the round's own shuffled order starting at the step's
    position. Fewer (down to none) when the dataset has no unused rows left."""
    used = set(drawn)
    order = PromptSampler(num_rows, 1, seed + ROUND_SEED_STRIDE * round_, shuffle=True)
    start = step * prompts_per_step
    picked: List[int] = []
    for position in range(start, start + 2 * num_rows):  # holds one whole epoch: every row once at least
        [row] = order.indices(position)
        if row not in used:
            used.add(row)
            picked.append(row)
            if len(picked) == prompts_per_step:
                break
    return picked
