"""The task both agent examples train on (configs/agent_openai.yaml, configs/agent_sdk.yaml): small sums, scored from
what the agent function returned (`agent_result`)."""

import random
from typing import Any, Dict, List, Optional


def dataset(num_rows: int = 200, seed: int = 0) -> List[Dict[str, Any]]:
    """Rows ``{"prompt": "What is a + b?", "answer": a + b}`` with a, b from 2 to 20."""
    rng = random.Random(seed)
    rows = []
    for _ in range(num_rows):
        a, b = rng.randint(2, 20), rng.randint(2, 20)
        rows.append({"prompt": f"What is {a} + {b}?", "answer": a + b})
    return rows


def agent_score(completions, agent_result: List[Optional[Dict[str, Any]]], **kwargs) -> List[float]:
    """The score each episode's agent gave itself (0 when the token budget ended the episode: no result)."""
    return [0.0 if r is None else float(r["score"]) for r in agent_result]


def short_answer(completions, agent_result: List[Optional[Dict[str, Any]]], **kwargs) -> List[float]:
    """1 for an answer of at most 8 words."""
    return [float(r is not None and 0 < len(r["answer"].split()) <= 8) for r in agent_result]
