"""Turn-level credit for multi-turn episodes (``training.credit: turn``): each turn's tokens get the group-normalised
return from that turn on, instead of every token of an episode getting the episode's advantage.

Following GRPO's process supervision (Shao et al. 2024, *DeepSeekMath*, arXiv:2402.03300, §4.1.3), with a discount.
For a group of ``G`` episodes, episode ``i`` having turns ``k = 1 .. K_i``:

- each turn's reward ``r_ik`` is the environment's reward after it (the rollout's ``turn_rewards`` extra), when it
  gave one; the last turn always has one: the environment's, plus what the episode's reward holds beyond the turn
  rewards (the reward functions' weighted sum minus ``Σ_k r_ik``), so an episode's turn rewards add up to its reward;
- the rewards given are normalised over the group: ``r̃_ik = (r_ik - mean(R)) / (std(R) + 1e-4)``, ``R`` every reward
  given in the group's turns (std unbiased; all equal: 0); a turn without a reward has ``r̃_ik = 0`` (DeepSeekMath's
  process reward model scores every step; counting an unscored turn as a reward of 0 would favour short episodes);
- the tokens of turn ``k`` (from its first sampled token to the next turn's: ``turn_starts``) get
  ``A_ik = Σ_{l >= k} γ^(l-k) · r̃_il`` with ``γ = training.turn_discount`` (DeepSeekMath: ``γ = 1``).

Masks are unchanged: the environment's tokens inside a turn's span get its advantage but are never trained. A
rollout without ``turn_starts`` is one turn per episode, and one without ``turn_rewards`` gives its whole reward to the
last turn: then every turn gets the episode's normalised reward (γ = 1), GRPO's episode credit with the group std.
Groups never span training processes, so each rank computes its own; the per-completion summary the logs show
(``advantage`` in completions.jsonl) is the mean over its trained tokens.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, List, Optional, Sequence, Tuple

import torch

from ...rollouts.contract import RolloutError
from ...runs import names as rn
from .advantages import EPS


def turn_rewards_of(reward: float, turn_rewards: Optional[Sequence[Any]], num_turns: int) -> List[Optional[float]]:
    """An episode's ``num_turns`` turn rewards: the environment's (``None``: none given), the last one plus what the
    episode's ``reward`` holds beyond their sum."""
    given = [None if r is None else float(r) for r in (turn_rewards or [])][:num_turns]
    out = given + [None] * (num_turns - len(given))
    out[-1] = (out[-1] or 0.0) + reward - sum(r for r in out if r is not None)
    return out


def group_turn_advantages(turn_rewards: List[List[Optional[float]]], gamma: float) -> List[List[float]]:
    """Each turn's advantage in one group (module docstring): ``turn_rewards[i][k]`` (``None``: no reward) →
    ``A_ik``.

    Raises:
        ValueError: an episode has no turn.
    """
    if any(not t for t in turn_rewards):
        raise ValueError("every episode needs at least one turn")
    given = [r for t in turn_rewards for r in t if r is not None]
    flat = torch.tensor(given, dtype=torch.float64)
    if flat.numel() < 2 or bool(flat.max() == flat.min()):
        return [[0.0] * len(t) for t in turn_rewards]
    mean, std = flat.mean().item(), flat.std().item()
    out = []
    for t in turn_rewards:
        normalised = [0.0 if r is None else (r - mean) / (std + EPS) for r in t]
        returns, running = [0.0] * len(t), 0.0
        for k in range(len(t) - 1, -1, -1):
            running = normalised[k] + gamma * running
            returns[k] = running
        out.append(returns)
    return out


def checked_extras(starts: Any, given: Any, length: int, where: str) -> Tuple[List[int], Optional[List[Any]]]:
    """A completion's ``turn_starts`` (increasing completion-token indices from 0) and ``turn_rewards`` (finite
    numbers or ``None``, at most one per turn), checked.

    Raises:
        RolloutError: either is malformed (the message names the completion and the value).
    """
    if starts is None:
        starts = [0]
    if not isinstance(starts, (list, tuple)) or not starts or any(
            isinstance(x, bool) or not isinstance(x, int) for x in starts) or starts[0] != 0 \
            or any(b <= a for a, b in zip(starts, starts[1:])):
        raise RolloutError(f"{where}: `turn_starts` must be increasing completion-token indices from 0, one per turn, "
                           f"got {str(starts)[:80]}")
    if given is not None and (not isinstance(given, (list, tuple)) or len(given) > len(starts) or any(
            r is not None and (isinstance(r, bool) or not isinstance(r, (int, float)) or not math.isfinite(r))
            for r in given)):
        raise RolloutError(f"{where}: `turn_rewards` must hold at most one finite number (or None) per turn "
                           f"({len(starts)} turns), got {str(given)[:80]}")
    return [s for s in starts if s < max(length, 1)], given


def token_advantages(turn_advantages: Sequence[float], turn_starts: Sequence[int], length: int) -> List[float]:
    """``(length,)`` per-token advantages of one completion: turn ``k``'s from ``turn_starts[k]`` to the next start."""
    out = [0.0] * length
    starts = list(turn_starts) + [length]
    for k, adv in enumerate(turn_advantages):
        for t in range(max(0, starts[k]), min(length, starts[k + 1])):
            out[t] = adv
    return out


def with_turn_credit(batch: Any, dist: Any, num_generations: int, gamma: float) -> Any:
    """``batch`` (a :class:`~...orchestrator.batch.ScoredBatch`) with per-token advantages (``token_advantages``), its
    per-completion ``advantages`` the mean over each completion's trained tokens, and the whole step's
    ``step_advantages`` (a collective: every rank's summaries).

    Raises:
        RolloutError: one process, a completion's ``turn_starts`` or ``turn_rewards`` is malformed.
        RankError: several processes, the same on any rank (every rank raises it, naming the rank).
    """
    out, scores = batch.rollout, batch.scores
    starts = out.extras.get(rn.TURN_STARTS_EXTRA) or [[0]] * len(out)
    given = out.extras.get(rn.TURN_REWARDS_EXTRA) or [None] * len(out)
    checked, error = [], None
    try:
        checked = [checked_extras(s, r, len(ids), f"completion {i}")
                   for i, (s, r, ids) in enumerate(zip(starts, given, out.completion_ids))]
    except RolloutError as exc:  # every rank must learn of it before the gather below
        error = exc
    dist.agree(error)
    starts = [s for s, _ in checked]  # turns that start past a cut completion are gone (their rewards move on)
    per_turn = [turn_rewards_of(r, g, len(s)) for r, (s, g) in zip(scores.rewards, checked)]
    tokens, summary = [], []
    for first in range(0, len(out), num_generations):
        rows = range(first, first + num_generations)
        for i, advs in zip(rows, group_turn_advantages([per_turn[i] for i in rows], gamma)):
            row = token_advantages(advs, starts[i], len(out.completion_ids[i]))
            trained = [a for a, m in zip(row, out.completion_mask[i]) if m]
            tokens.append(row)
            summary.append(sum(trained) / len(trained) if trained else 0.0)
    step = [a for part in dist.gather(summary) for a in part]
    return replace(batch, advantages=torch.tensor(summary, dtype=torch.float32),
                   step_advantages=torch.tensor(step, dtype=torch.float32), token_advantages=tokens)
