"""Calling reward functions: signature dispatch, async functions, ``None`` scores, the weighted sum.

A reward function is ``f(prompts, completions, completion_ids, **kwargs) -> list[float | None]`` with one score per
completion (``N = P × n``). It receives, as keyword arguments, only what it names (or everything, if it takes
``**kwargs``): the standard arguments below, every dataset column of the prompt's row (repeated per completion; the
prompt column too), every extra key the rollout returned, and its own ``kwargs`` from the config. ``None`` means "no
opinion" on that completion: it counts as 0 in the weighted sum and is left out of that function's mean/std. ``async
def`` functions run concurrently. A function may return a :class:`~.scores.RewardScores` to say which completions it
gave up on for lack of time; they are counted as ``rewards/<name>/timeouts``.
"""

from __future__ import annotations

import asyncio
import difflib
import inspect
import math
import numbers
from dataclasses import dataclass, field
from typing import Any, Callable, Collection, Dict, List, Mapping, Optional, Sequence

from ..runs import names as rn
from ..user_code.coroutines import run_coroutine
from ..rollouts.contract import EpisodeFailure
from ..user_code.signatures import defined_at, describe, named_params, raised_at, required_params, select_kwargs
from .scores import RewardScores, mean_std

#: Arguments every reward function can ask for by name.
STANDARD_REWARD_ARGS = ("prompts", "completions", "completion_ids", "step")


class RewardError(ValueError):
    """A reward function raised or returned something other than one float/None per completion."""


@dataclass
class RewardFunction:
    """A resolved reward function with its weight and config kwargs; ``name`` is used in metrics."""

    name: str
    fn: Callable
    weight: float = 1.0
    kwargs: Optional[Dict[str, Any]] = None


@dataclass
class RewardResult:
    """Scores of one batch (the trainer's :class:`~grpo_rollout.orchestrator.batch.CompletionScores` adds what else it
    knows of each completion).

    Attributes:
        rewards: ``N`` weighted sums (``None`` scores count as 0).
        per_function: name → ``N`` scores, ``nan`` where the function returned ``None``.
        timed_out: name → ``N`` flags, for each function that returned a :class:`~.scores.RewardScores`: whether it
            gave up on the completion for lack of time. time_limits: name → that function's time limit (seconds).
    """

    rewards: List[float]
    per_function: Dict[str, List[float]]
    timed_out: Dict[str, List[bool]] = field(default_factory=dict)
    time_limits: Dict[str, Optional[float]] = field(default_factory=dict)

    def stats(self) -> Dict[str, float]:
        """``rewards/<name>/mean`` and ``/std`` (the sample std, :func:`~.scores.mean_std`) per function over
        non-``None`` scores (``nan`` if all ``None``), and ``rewards/<name>/timeouts`` (a count) for the functions
        that report their timeouts."""
        out = {}
        for name, scores in self.per_function.items():
            mean, std = mean_std([s for s in scores if not math.isnan(s)])
            out[rn.reward_fn(name, "mean")] = mean
            out[rn.reward_fn(name, "std")] = std
        for name, flags in self.timed_out.items():
            out[rn.reward_fn(name, rn.TIMEOUTS)] = sum(1 for f in flags if f)
        return out


def implied_rewards(rollout_fn: Callable, rollout_kwargs: Mapping[str, Any], base_dir: Any = None,
                    taken: Collection[str] = (), env_timeout_s: Optional[float] = None) -> List[RewardFunction]:
    """The reward functions a rollout adds to the configured ones: what its optional hook
    ``rollout_fn.implied_rewards(kwargs, base_dir) -> [(name, function) or (name, function, weight), ...]`` returns
    (weight 1 when not given; a hook naming ``env_timeout_s`` gets it too, when given: ``rollout.env_timeout_s``).
    The tool-calling rollout's: one per TRL environment class with a ``get_reward`` method;
    the verifiers rollout's: one per rubric function, with the rubric's weight. A name already ``taken`` gets a ``_2``
    suffix.

    Raises:
        RolloutError: the hook could not load what the kwargs name.
    """
    hook = getattr(rollout_fn, "implied_rewards", None)
    out, names = [], set(taken)
    extra = {"env_timeout_s": env_timeout_s} if env_timeout_s is not None and callable(hook) and \
        "env_timeout_s" in named_params(hook) else {}
    for name, fn, *weight in (hook(dict(rollout_kwargs), base_dir, **extra) if callable(hook) else []):
        unique = name if name not in names else next(f"{name}_{i}" for i in range(2, len(names) + 3)
                                                     if f"{name}_{i}" not in names)
        names.add(unique)
        out.append(RewardFunction(unique, fn, *weight))
    return out


def unique_names(functions: Sequence[Callable]) -> List[str]:
    """Metric names for reward functions: ``__name__``, suffixed ``_2``, ``_3`` ... when repeated."""
    names, seen = [], {}
    for fn in functions:
        base = getattr(fn, "__name__", type(fn).__name__)
        seen[base] = seen.get(base, 0) + 1
        names.append(base if seen[base] == 1 else f"{base}_{seen[base]}")
    return names


def _check_scores(name: str, scores: Any, num_completions: int, fn: Optional[Callable] = None) -> List[float]:
    where = defined_at(fn) if fn is not None else ""
    if hasattr(scores, "tolist"):
        scores = scores.tolist()
    if not isinstance(scores, (list, tuple)):
        raise RewardError(f"reward function `{name}` returned {type(scores).__name__}; it must return a list with one "
                          f"float (or None) per completion ({num_completions})")
    if len(scores) != num_completions:
        raise RewardError(f"reward function `{name}`{where} returned {len(scores)} scores for {num_completions} "
                          "completions; it must return one score (a float, or None for no opinion) per completion, in "
                          "the order of `completions`: e.g. `return [score(c) for c in completions]` (a score per "
                          "prompt must be repeated for each of its num_generations completions)")
    out = []
    for i, s in enumerate(scores):
        if s is None:
            out.append(float("nan"))
        elif isinstance(s, numbers.Real) and math.isfinite(s):  # bools count as 0/1
            out.append(float(s))
        else:
            raise RewardError(f"reward function `{name}` returned {s!r} for completion {i}; expected a finite float "
                              "or None")
    return out


def argument_sources(columns: Collection[str], extras: Collection[str], kwargs: Collection[str] = ()) -> Dict[str, str]:
    """Every name a reward function can take, and what it is (``"a standard argument"``, ``"a dataset column"``,
    ``"an extra of the rollout"``, ``"a config kwarg"``), in that order of precedence: a standard argument wins over
    a column of the same name, a config kwarg over everything (:func:`compute_rewards` passes them so)."""
    return {**{c: "a dataset column" for c in columns}, **{e: "an extra of the rollout" for e in extras},
            **{a: "a standard argument" for a in STANDARD_REWARD_ARGS}, **{k: "a config kwarg" for k in kwargs}}


_PLURALS = {"a standard argument": "standard arguments", "a dataset column": "dataset columns",
            "an extra of the rollout": "rollout extras", "a config kwarg": "config kwargs"}


def unserved_message(name: str, where: str, missing: Sequence[str], sources: Mapping[str, str]) -> str:
    """What a reward function ``name`` (``where``: `` (defined at FILE:LINE)`` or ``""``) that requires ``missing``
    (none of ``sources``, :func:`argument_sources`) is told: every name it could take, by kind, and a did-you-mean
    for each missing one close to one of them."""
    by_kind: Dict[str, List[str]] = {kind: [] for kind in _PLURALS}
    for arg, kind in sources.items():
        by_kind[kind].append(arg)
    listed = "; ".join(f"{_PLURALS[kind]}: {', '.join(names) or 'none'}" for kind, names in by_kind.items()
                       if names or kind != "a config kwarg")
    hints = [f"did you mean `{close[0]}` ({sources[close[0]]}) for `{m}`?" for m in missing
             if (close := difflib.get_close_matches(m, list(sources), n=1, cutoff=0.75))]
    return (f"reward function `{name}`{where} requires {', '.join(f'`{m}`' for m in missing)}, which is neither a "
            f"standard argument, a dataset column, a rollout extra nor a config kwarg (it can take {listed})"
            + (f"; {' '.join(hints)}" if hints else "") + "; rename the parameter, return it from the rollout, set "
            "it in the reward's kwargs, or give it a default")


async def _call_all(functions: Sequence[RewardFunction], args: Mapping[str, Any],
                    sources: Mapping[str, str]) -> List[Any]:
    async def one(rf: RewardFunction) -> Any:
        available = {**args, **(rf.kwargs or {})}
        missing = [p for p in required_params(rf.fn) if p not in available]
        if missing:
            raise RewardError(unserved_message(rf.name, defined_at(rf.fn), missing,
                                               {**sources, **{k: "a config kwarg" for k in rf.kwargs or {}}}))
        kwargs = select_kwargs(rf.fn, available)
        try:
            if inspect.iscoroutinefunction(rf.fn) or inspect.iscoroutinefunction(getattr(rf.fn, "__call__", None)):
                return await rf.fn(**kwargs)
            return rf.fn(**kwargs)
        except EpisodeFailure:  # an environment's get_reward past rollout.env_timeout_s: a failed episode, as it is
            raise
        except (Exception, SystemExit) as exc:  # SystemExit too: a reward calling sys.exit() must not end the run
            raise RewardError(f"reward function `{rf.name}` ({describe(rf.fn)}) raised "
                              f"{type(exc).__name__}: {exc}{raised_at(exc)}") from exc

    return await asyncio.gather(*(one(rf) for rf in functions))


def compute_rewards(functions: Sequence[RewardFunction], *, prompts: Sequence[Any], completions: Sequence[Any],
                    completion_ids: Sequence[Sequence[int]], columns: Mapping[str, Sequence[Any]],
                    extras: Mapping[str, Sequence[Any]], step: int) -> RewardResult:
    """Call every reward function on a batch of ``N`` completions and combine their scores.

    Args:
        prompts, completions, completion_ids: ``N`` entries each (one per completion).
        columns: dataset columns, ``N`` values each. extras: rollout extras, ``N`` values each.
        step: the training step.

    Raises:
        RewardError: naming the function when one raises or returns the wrong number/type of scores.
    """
    num_completions = len(completions)
    args: Dict[str, Any] = {**columns, **extras, "prompts": list(prompts), "completions": list(completions),
                            "completion_ids": [list(c) for c in completion_ids], "step": step}
    # also from inside a running loop (a notebook)
    raw = run_coroutine(_call_all(functions, args, argument_sources(columns, extras)))
    per_function = {rf.name: _check_scores(rf.name, scores, num_completions, rf.fn)
                    for rf, scores in zip(functions, raw)}
    reporting = [(rf.name, scores) for rf, scores in zip(functions, raw) if isinstance(scores, RewardScores)]
    timed_out = {name: [i in set(scores.timed_out) for i in range(num_completions)] for name, scores in reporting}
    limits = {name: scores.limit_s for name, scores in reporting}
    total = [0.0] * num_completions
    for rf in functions:
        for i, s in enumerate(per_function[rf.name]):
            if not math.isnan(s):
                total[i] += rf.weight * s
    for i, t in enumerate(total):
        if not math.isfinite(t):
            scores = ", ".join(f"{name}={vals[i]:g}" for name, vals in per_function.items())
            raise RewardError(f"the weighted sum of the rewards of completion {i} is {t} ({scores}): the scores are "
                              "too large to add up; scale them down")
    return RewardResult(total, per_function, timed_out, limits)
