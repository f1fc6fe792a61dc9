"""Multiplication with a calculator tool: the model should call ``multiply`` and report the product.

Used by ``configs/multiply.yaml``: the dataset (:func:`dataset`), the tool (:func:`multiply`) and two rewards,
one for a correct tool call and one for a correct final answer.
"""

from __future__ import annotations

import random
from typing import Any, Dict, List, Optional, Sequence

from grpo_rollout.rewards.library import accuracy


def multiply(a: int, b: int) -> int:
    """Multiply two integers.

    Args:
        a: The first factor.
        b: The second factor.

    Returns:
        The product a * b.
    """
    return int(a) * int(b)


#: A worked example shown before each question: SmolLM2-135M almost never writes a valid call from the system prompt
#: alone (0-13 % of samples), but copies a demonstrated one about half the time.
DEMONSTRATION = [
    {"role": "user", "content": "Multiply 13 and 24."},
    {"role": "assistant", "content": '<tool_call>{"name": "multiply", "arguments": {"a": 13, "b": 24}}</tool_call>'},
    {"role": "tool", "content": "312"},
    {"role": "assistant", "content": "The answer is 312."},
]


def dataset(num_rows: int = 256, low: int = 2, high: int = 99, seed: int = 0,
            demonstration: bool = True) -> List[Dict[str, Any]]:
    """``num_rows`` questions "Multiply A and B." with columns ``prompt``, ``a``, ``b``, ``result`` (= a × b).

    Factors are drawn uniformly from ``[low, high]`` (large enough that the model cannot answer from memory).
    ``prompt`` is a list of chat messages: :data:`DEMONSTRATION` (when ``demonstration``), then the question.
    """
    rng = random.Random(seed)
    rows = []
    for _ in range(num_rows):
        a, b = rng.randint(low, high), rng.randint(low, high)
        question = {"role": "user", "content": f"Multiply {a} and {b}."}
        prompt = (DEMONSTRATION + [question]) if demonstration else [question]
        rows.append({"prompt": prompt, "a": a, "b": b, "result": a * b})
    return rows


def correct_tool_call(tool_results: Sequence[Sequence[Dict[str, Any]]], a: Sequence[int], b: Sequence[int],
                      **kwargs: Any) -> List[float]:
    """1.0 when the completion called ``multiply`` successfully with the prompt's two factors (either order)."""
    out = []
    for results, x, y in zip(tool_results, a, b):
        ok = any(r.get("name") == "multiply" and r.get("error") is None
                 and sorted(r["arguments"].values()) == sorted([x, y]) for r in results)
        out.append(float(ok))
    return out


def correct_answer(final_response: Sequence[str], result: Sequence[int], **kwargs: Any) -> List[Optional[float]]:
    """1.0 when the last number of the model's final turn is the product (the library's ``accuracy``, applied to the
    final turn rather than the whole completion, which also holds the tool's answer)."""
    return accuracy(list(final_response), list(result), mode="last_number")
