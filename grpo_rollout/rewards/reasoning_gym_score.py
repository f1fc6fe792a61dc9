"""A reasoning-gym task's own scorer as a reward, for rows from a ``reasoning_gym:<task>`` source
(:mod:`grpo_rollout.data.reasoning_gym`).

Use it by dotted path: ``rewards: [{function: grpo_rollout.rewards.tasks:reasoning_gym_score}]``.
"""

from __future__ import annotations

import contextlib
import functools
import json
import random
import warnings
from typing import Any, Callable, Iterator, List, Optional, Sequence, Set

from .final_answer import final_answer
from .library import completion_text

#: tasks whose scorer raised on an answer and were warned about (once each)
_WARNED: Set[str] = set()


def reasoning_gym_score(completions: Sequence[Any], task_entry: Sequence[str], task: Optional[Sequence[str]] = None,
                        task_kwargs: Optional[Sequence[str]] = None, **kwargs: Any) -> List[float]:
    """The task's own score (0.0 to 1.0) of each completion's final answer: the last ``<answer>...</answer>``, else
    a ``\\boxed{}``, a final-answer phrase (``The answer is: mother``) or a closing statement (``1 x 3 is 3.``), else
    the whole completion (the rules of :mod:`grpo_rollout.rewards.final_answer`); one string is scored.

    The scorer is the ``score_answer`` of the task made with the row's own settings (``task`` and ``task_kwargs``, the
    columns a ``reasoning_gym:<task>`` source makes: some tasks score by their settings, e.g. ``word_ladder``'s word
    length), given the entry made again (the JSON copy has lists where the scorer may compare tuples); for rows
    without those columns, the entry's ``source_dataset`` scores with its default settings.

    Args:
        completions: ``N`` completions. task_entry: ``N`` reasoning-gym entries as JSON. task, task_kwargs: ``N``
            task names and their settings as JSON (optional).

    Raises:
        ValueError, TypeError, AssertionError: reasoning-gym cannot make the row's task (its own message).
    """
    scores = []
    for i, (completion, raw) in enumerate(zip(completions, task_entry)):
        entry = json.loads(raw)
        if task is not None and task_kwargs is not None and task[i] and task_kwargs[i]:
            scorer = _configured(task[i], task_kwargs[i]).score_answer
            entry = _original_entry(task[i], task_kwargs[i], entry)
        else:
            scorer = _default_scorer(entry["metadata"]["source_dataset"])
        scores.append(_score(scorer, final_answer(completion_text(completion)), entry))
    return scores


def _score(scorer: Callable[[str, dict], float], answer: str, entry: dict) -> float:
    """The scorer's score, or 0.0 when it raises on the answer (``prime_factorization`` raises ``ValueError`` on
    ``2 × 433.``): an answer the task's own scorer cannot read is a wrong answer, not a reason to stop training. The
    first such error of each task is warned about, since a scorer that always raises would otherwise look like a
    model that is always wrong."""
    try:
        return float(scorer(answer, entry))
    except Exception as exc:  # noqa: BLE001 - reasoning-gym scorers raise many kinds on unreadable answers
        task = entry.get("metadata", {}).get("source_dataset", "?")
        if task not in _WARNED:
            _WARNED.add(task)
            warnings.warn(f"reasoning-gym's `{task}` scorer raised {type(exc).__name__}: {exc} on the answer "
                          f"{answer[:80]!r}; it scores 0.0 (said once per task)", stacklevel=3)
        return 0.0


@functools.lru_cache(maxsize=32)
def _configured(task: str, task_kwargs: str):
    """The task as the rows were made (cached: some tasks load word lists or puzzles when made)."""
    from ..data.reasoning_gym import create

    with _global_random_kept():
        return create(task, json.loads(task_kwargs))


def _original_entry(task: str, task_kwargs: str, entry: dict) -> dict:
    """The entry as reasoning-gym made it, when it can be made again (the same question and answer at its
    ``source_index``): JSON turns the tuples some scorers compare with into lists (``arc_agi``'s board, which then
    never equals the answer), so the row's copy is only the fallback (for rows edited since, or a task that is not
    reproducible: a ``codeio`` answer drawn from numpy's global random state)."""
    index = entry.get("metadata", {}).get("source_index")
    if not isinstance(index, int):
        return entry
    original = _made_entry(task, task_kwargs, index)
    same = original.get("question") == entry.get("question") and original.get("answer") == entry.get("answer")
    return original if same else entry


@functools.lru_cache(maxsize=1024)
def _made_entry(task: str, task_kwargs: str, index: int) -> dict:
    task_object = _configured(task, task_kwargs)
    with _global_random_kept():
        return task_object[index]


@contextlib.contextmanager
def _global_random_kept() -> Iterator[None]:
    """Python's and numpy's global random states as they were before (some tasks draw from them when making an entry,
    e.g. ``codeio``; a reward of the user's own seeded from them must get the same draws as without this one)."""
    import numpy as np

    saved, saved_np = random.getstate(), np.random.get_state()
    try:
        yield
    finally:
        random.setstate(saved)
        np.random.set_state(saved_np)


@functools.lru_cache(maxsize=32)
def _default_scorer(task: str) -> Callable[[str, dict], float]:
    import reasoning_gym

    return reasoning_gym.get_score_answer_fn(task)
