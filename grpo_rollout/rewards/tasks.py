"""Rewards that score with the field's task libraries, through their public APIs:

- :func:`math_accuracy`: math-verify (Hugging Face's math-answer checker, the one TRL's accuracy reward uses) parses
  the completion's and the reference's answers (``\\boxed{}``, LaTeX, fractions, equivalent forms) and compares them;
- :func:`reasoning_gym_score`: a reasoning-gym task's own scorer (``reasoning_gym.get_score_answer_fn``) on the
  completion's answer, for rows from a ``reasoning_gym:<task>`` source (:mod:`grpo_rollout.data.reasoning_gym`).

Use them by dotted path: ``rewards: [{function: grpo_rollout.rewards.tasks:math_accuracy}]``.
"""

from __future__ import annotations

import json
from typing import Any, List, Optional, Sequence

from .library import completion_text


def math_accuracy(completions: Sequence[Any], answer: Sequence[Any], **kwargs: Any) -> List[Optional[float]]:
    """1.0 when math-verify finds the completion's answer equal to ``answer`` (``\\boxed{\\frac{1}{2}}`` equals
    ``0.5``), 0.0 when not or when nothing parses; ``None`` for a row without an answer.

    Args:
        completions: ``N`` completions. answer: ``N`` references (the dataset's ``answer`` column; a number or
            text, LaTeX or not).
    """
    from math_verify import parse, verify

    out: List[Optional[float]] = []
    for completion, ref in zip(completions, answer):
        if ref is None:
            out.append(None)
            continue
        gold = parse(str(ref) if "$" in str(ref) or "\\" in str(ref) else f"${ref}$")
        guess = parse(completion_text(completion))
        out.append(1.0 if gold and guess and verify(gold, guess) else 0.0)
    return out


def reasoning_gym_score(completions: Sequence[Any], task_entry: Sequence[str], **kwargs: Any) -> List[float]:
    """The task's own score (0.0 to 1.0) of each completion's answer: the text inside ``<answer>...</answer>``
    when there is one (reasoning-gym's convention), else what follows the last ``=`` (``5 - 3 = 2``), else the
    whole completion; stripped, and one candidate only (scoring several and keeping the best would reward a list of
    guesses).

    Args:
        completions: ``N`` completions. task_entry: ``N`` reasoning-gym entries as JSON (the ``task_entry`` column
            a ``reasoning_gym:<task>`` source makes).
    """
    import reasoning_gym
    from reasoning_gym.utils import extract_answer

    scores = []
    for completion, raw in zip(completions, task_entry):
        entry = json.loads(raw)
        text = completion_text(completion)
        answer = extract_answer(text) if "<answer>" in text else text.rsplit("=", 1)[-1].strip()
        score = reasoning_gym.get_score_answer_fn(entry["metadata"]["source_dataset"])(answer or "", entry)
        scores.append(float(score))
    return scores
