"""DAPO's dynamic sampling: drop groups without reward variance, and which prompts to roll out instead.

DAPO (Yu et al. 2025, arXiv:2503.14476, section 3.2) drops groups whose completions all got the same reward and
samples more prompts until the batch is full. Refill round ``r`` (1, 2, ...) of step ``s`` walks another shuffled
order of the dataset (seeded by the round, so a resumed run draws the same prompts) from the step's position on and
takes the first ``prompts_per_step`` rows that this step has not drawn yet — neither its own prompts nor an earlier
round's — so no prompt is trained twice in one step. The draw covers the whole step (every rank computes the same
list and takes its own slice), so ranks never share a prompt either.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import torch

from ..runs import names as rn
from .batch import ScoredBatch
from ..distributed import Dist
from .prompt_order import PromptOrder

ROUND_SEED_STRIDE = 1_000_003  # round r's order is seeded with training.seed + r × this


def refill_indices(step: int, round_: int, num_rows: int, prompts_per_step: int, seed: int,
                   drawn: Iterable[int]) -> List[int]:
    """Row indices for refill round ``round_`` of step ``step`` (0-based): at most ``prompts_per_step`` rows, none
    in ``drawn`` (the rows the step has drawn so far), in the round's own shuffled order starting at the step's
    position. Fewer (down to none) when the dataset has no unused rows left."""
    used = set(drawn)
    order = PromptOrder(num_rows, 1, seed + ROUND_SEED_STRIDE * round_, shuffle=True)
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


@dataclass
class RefillCounts:
    """What dynamic sampling did in one step (one rank's, or summed over ranks by :func:`even_out_groups`).

    Attributes:
        rounds: rollout calls made (the most any rank made, once evened out). dropped: groups without reward variance
        that were dropped. kept: groups with variance kept. wanted: groups the step should train.
        trained: groups trained (set by :func:`even_out_groups`; 0 when no group had variance: no update).
    """

    rounds: int
    dropped: int
    kept: int
    wanted: int
    trained: int = 0

    def metrics(self) -> Dict[str, float]:
        """The ``dynamic_sampling/*`` metrics."""
        return {rn.DS_ROUNDS: self.rounds, rn.DS_GROUPS_DROPPED: self.dropped, rn.DS_GROUPS_TRAINED: self.trained,
                rn.DS_FILLED: float(self.trained > 0 and self.trained >= self.wanted)}


def groups_with_signal(rewards: Sequence[float], num_generations: int) -> List[int]:
    """Indices of the groups whose rewards are not all equal (``rewards``: one per completion, group after group)."""
    grouped = torch.tensor(list(rewards), dtype=torch.float32).view(-1, num_generations)
    return [i for i in range(grouped.shape[0]) if grouped[i].max() > grouped[i].min()]


def keep_groups_with_signal(step: int, first: ScoredBatch, drawn: Sequence[int],
                            refill: Callable[[List[int]], Optional[ScoredBatch]], *, num_generations: int,
                            max_rounds: int, num_rows: int, prompts_per_step: int,
                            seed: int) -> Tuple[ScoredBatch, RefillCounts]:
    """Drop this rank's groups whose rewards are all equal and roll out more prompts (:func:`refill_indices`) until
    it holds its share of groups with reward variance or ``max_rounds`` rollout calls are spent. Returns the kept
    groups (at most the share) and this rank's counts for :func:`even_out_groups`.

    Args:
        step: 0-based. first: the step's own batch. drawn: the whole step's dataset rows (never drawn twice).
        refill: the scored batch of this rank's share of some dataset rows (``None``: no rows for this rank).
        num_generations: the group size. max_rounds: ``training.dynamic_sampling.max_rounds``. num_rows: the
        dataset's rows. prompts_per_step, seed: ``training.prompts_per_step``, ``training.seed``.
    """
    g, target = num_generations, first.num_groups
    kept: List[ScoredBatch] = []
    have = dropped = 0
    rounds = 1
    drawn = list(drawn)
    batch = first
    while True:
        signal = groups_with_signal(batch.scores.rewards, g)
        dropped += batch.num_groups - len(signal)
        signal = signal[:target - have]
        kept.append(batch.select_groups(signal))
        have += len(signal)
        if have >= target or rounds >= max_rounds:
            break
        indices = refill_indices(step, rounds, num_rows, prompts_per_step, seed, drawn)
        drawn += indices
        refilled = refill(indices)
        if refilled is None:  # every row of the dataset was drawn in this step already
            break
        batch = refilled
        rounds += 1
    return ScoredBatch.concat(kept), RefillCounts(rounds, dropped, have, target)


def even_out_groups(dist: Dist, step: int, kept: ScoredBatch, first: ScoredBatch, counts: RefillCounts,
                    max_rounds: int, say: Callable[[str], None]) -> Tuple[ScoredBatch, RefillCounts]:
    """Give every rank the same number of groups (the fewest any rank kept: FSDP needs the same micro-batches on
    every rank), say when a step could not be filled, and sum the counts over ranks (a collective). When no rank
    kept any group, return the ``first`` round's groups as they are (all advantages 0: logged, not trained).
    ``step`` is 0-based; the message names it 1-based."""
    [fewest] = dist.min([counts.kept])
    rounds_sum, dropped, kept_sum, wanted = dist.sum([counts.rounds, counts.dropped, counts.kept, counts.wanted])
    [most_rounds] = dist.max([counts.rounds])
    fewest = int(fewest)
    if fewest == 0:  # logged as sampled; the update is skipped (no advantage anywhere)
        batch, trained = first, 0
    else:
        batch, trained = kept.select_groups(range(fewest)), fewest * dist.world_size
    if trained < wanted or fewest == 0:
        what = (f"{trained} of {int(wanted)} groups" if fewest else
                "no group with reward variance, so no update (the first round's groups are logged)")
        say(f"Step {step + 1}: dynamic sampling reached training.dynamic_sampling.max_rounds = {max_rounds} rollout "
            f"calls with {int(kept_sum)} group(s) with reward variance: {what}")
    return batch, RefillCounts(int(most_rounds), int(dropped), int(kept_sum), int(wanted), trained)
