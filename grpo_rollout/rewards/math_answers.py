"""math-verify (Hugging Face's math-answer checker, the one TRL's accuracy reward uses) as a reward: it parses the
completion's and the reference's answers (``\\boxed{}``, LaTeX, fractions, equivalent forms) and compares them.

Use it by dotted path: ``rewards: [{function: grpo_rollout.rewards.tasks:math_accuracy}]``.
"""

from __future__ import annotations

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
