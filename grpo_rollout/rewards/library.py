"""Small reusable reward functions. Each follows the reward contract of :mod:`grpo_rollout.rewards.calling`:
``f(prompts, completions, ...) -> list[float | None]``, one score per completion.

Use them by dotted path, e.g. ``rewards: [{function: grpo_rollout.rewards.library:accuracy}]``.
"""

from __future__ import annotations

import re
from typing import Any, List, Optional, Sequence

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def completion_text(completion: Any) -> str:
    """The text of a completion: a string as it is, or the joined ``content`` of chat messages."""
    if isinstance(completion, str):
        return completion
    return "".join(str(m.get("content") or "") for m in completion if isinstance(m, dict))


def last_number(text: str) -> Optional[float]:
    """The last number written in ``text`` (commas as thousands separators allowed), or ``None``."""
    found = _NUMBER.findall(text)
    if not found:
        return None
    try:
        return float(found[-1].replace(",", ""))
    except ValueError:
        return None


def accuracy(completions: Sequence[Any], answer: Sequence[Any], mode: str = "last_number",
             **kwargs: Any) -> List[Optional[float]]:
    """1.0 when the completion's answer equals the dataset column ``answer``, else 0.0.

    Args:
        completions: ``N`` completions. answer: ``N`` reference answers (the ``answer`` column; ``None`` rows get
            ``None`` = no opinion).
        mode: ``"last_number"`` compares the last number in the completion with the answer as a number;
            ``"exact"`` compares stripped, case-folded strings; ``"contains"`` checks the answer text appears.

    Raises:
        ValueError: unknown ``mode``.
    """
    out: List[Optional[float]] = []
    for completion, ref in zip(completions, answer):
        if ref is None:
            out.append(None)
            continue
        text = completion_text(completion)
        if mode == "last_number":
            got, want = last_number(text), last_number(str(ref))
            out.append(float(got is not None and want is not None and abs(got - want) < 1e-6))
        elif mode == "exact":
            out.append(float(text.strip().casefold() == str(ref).strip().casefold()))
        elif mode == "contains":
            out.append(float(str(ref).strip().casefold() in text.casefold()))
        else:
            raise ValueError(f"accuracy: mode must be last_number, exact or contains, got {mode!r}")
    return out


def length_penalty(completion_ids: Sequence[Sequence[int]], target_length: int = 32,
                   **kwargs: Any) -> List[float]:
    """0.0 for completions of at most ``target_length`` tokens, falling linearly to -1.0 at twice that length (and
    staying there): discourages rambling without rewarding empty answers."""
    if target_length < 1:
        raise ValueError("length_penalty: target_length must be >= 1")
    return [-min(1.0, max(0, len(ids) - target_length) / target_length) for ids in completion_ids]
