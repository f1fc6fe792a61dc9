"""math-verify (Hugging Face's math-answer checker, the one TRL's accuracy reward uses) as a reward: it parses the
completion's and the reference's answers (``\\boxed{}``, LaTeX, fractions, equivalent forms) and compares them.

Each completion is scored in a worker process with a time limit (:mod:`.bounded`): math-verify's own limit is a
``signal.alarm``, which raises off the main thread (``training.async_generation``, a notebook's ``train()``,
``asyncio.to_thread``) and can be left for 5 s per parse and per comparison; here one completion gets at most
``timeout_s`` in every thread, then scores 0.0 and is counted (``rewards/math_accuracy/timeouts``).

Use it by dotted path: ``rewards: [{function: grpo_rollout.rewards.tasks:math_accuracy}]``.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..config.key_suggestions import did_you_mean
from .bounded import DEFAULT_WORKERS, run_bounded
from .library import completion_text
from .scores import RewardScores

#: Seconds math-verify may spend on one completion (parsing both answers and comparing them) unless a config says
#: otherwise (``rewards[].kwargs.timeout_s``).
DEFAULT_TIMEOUT_S = 5.0


def warm_up() -> None:
    """A scoring worker's start, outside any time limit: import math-verify (and sympy) and score once, so a
    completion's ``timeout_s`` is spent on it alone; quiet math-verify's warning that its own timeout is off (here
    the worker's kill is the bound)."""
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    score_answer("1", "1")


def score_answer(completion: str, reference: str) -> float:
    """1.0 when math-verify finds ``completion``'s answer equal to ``reference`` (a number or text, LaTeX or not),
    else 0.0 (also when nothing parses). No time limit of its own: :func:`math_accuracy` runs it in a killable
    worker."""
    from math_verify import parse, verify

    gold = parse(reference if "$" in reference or "\\" in reference else f"${reference}$", parsing_timeout=None)
    guess = parse(completion, parsing_timeout=None)
    return 1.0 if gold and guess and verify(gold, guess, timeout_seconds=None) else 0.0


def math_accuracy(completions: Sequence[Any], answer: Sequence[Any], timeout_s: float = DEFAULT_TIMEOUT_S,
                  workers: int = DEFAULT_WORKERS, **kwargs: Any) -> RewardScores:
    """1.0 when math-verify finds the completion's answer equal to ``answer`` (``\\boxed{\\frac{1}{2}}`` equals
    ``0.5``), 0.0 when not or when nothing parses; ``None`` for a row without an answer. Works from any thread.

    Args:
        completions: ``N`` completions. answer: ``N`` references (the dataset's ``answer`` column; a number or
            text, LaTeX or not).
        timeout_s: seconds one completion may take (parsing and comparing); one that takes longer scores 0.0 and
            is reported as timed out. A batch takes at most ``ceil(N / workers) × timeout_s`` longer than its
            scoring's own time.
        workers: worker processes scoring at once.

    Returns:
        :class:`~.scores.RewardScores`: the ``N`` scores, and which completions ran out of time.

    Raises:
        ValueError: ``timeout_s`` is not a number > 0 or ``workers`` not a whole number >= 1.
    """
    problems = validate_kwargs({"timeout_s": timeout_s, "workers": workers})
    if problems:
        raise ValueError("; ".join(f"{key} {message} ({fix})" for key, message, fix in problems))
    todo = [i for i, ref in enumerate(answer) if ref is not None]
    done = run_bounded(score_answer, [(completion_text(completions[i]), str(answer[i])) for i in todo], timeout_s,
                       workers, warm_up=warm_up)
    scores: list[Optional[float]] = [None] * len(completions)
    for i, value in zip(todo, done.values):
        scores[i] = 0.0 if value is None else value
    return RewardScores(scores, timed_out=[todo[j] for j in done.timed_out], limit_s=timeout_s)


#: The config kwargs math_accuracy takes (``rewards[].kwargs``); anything else would vanish into ``**kwargs``.
SETTINGS = ("timeout_s", "workers")


def validate_kwargs(kwargs: Dict[str, Any], base_dir: Any = None) -> List[Tuple[str, str, str]]:
    """validate-config's check of :func:`math_accuracy`'s ``rewards[].kwargs``: ``(key, problem, fix)`` for an
    unknown setting (a typo such as ``timeout`` would be taken as a dataset column and ignored), a ``timeout_s``
    that is not a number > 0 (0 or less would mean no bound) and a ``workers`` that is not a whole number >= 1
    (0 would wait for ever)."""
    problems = [(key, f"is not a setting of math_accuracy ({', '.join(SETTINGS)})",
                 did_you_mean(key, SETTINGS) or "remove it") for key in kwargs if key not in SETTINGS]
    timeout = kwargs.get("timeout_s", DEFAULT_TIMEOUT_S)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        problems.append(("timeout_s", f"must be a number of seconds > 0, got {timeout!r}",
                         f"e.g. timeout_s: {DEFAULT_TIMEOUT_S:g}"))
    workers = kwargs.get("workers", DEFAULT_WORKERS)
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        problems.append(("workers", f"must be a whole number >= 1, got {workers!r}", "e.g. workers: 2"))
    return problems


math_accuracy.validate_kwargs = validate_kwargs  # type: ignore[attr-defined]
