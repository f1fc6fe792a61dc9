"""An environment written for TRL's ``GRPOTrainer(environment_factory=CounterEnv)``, used here unchanged.

The model must bring a counter from 0 to a target with the ``increment`` tool. In TRL's shape: ``reset(**row)`` gets
the dataset row's columns and may return text appended to the prompt, public methods are the tools, ``get_reward()``
scores the episode, and reward functions may read the environments (``environments``).

Run from the repository root (configs/trl_counter.yaml)::

    grpo-rollout train configs/trl_counter.yaml
"""

from __future__ import annotations

import random
from typing import Any, Dict, List


class CounterEnv:
    """A counter the model raises with ``increment``; one instance per episode."""

    def __init__(self):
        self.counter = 0
        self.target = 0
        self.calls = 0

    def reset(self, **kwargs: Any) -> str:
        """Start an episode for a dataset row (its columns as keyword arguments: ``prompt``, ``target``)."""
        self.counter, self.target, self.calls = 0, int(kwargs["target"]), 0
        return " The counter is at 0."

    def increment(self, step: int) -> str:
        """Add a number to the counter.

        Args:
            step: the number to add (may be negative)
        """
        self.calls += 1
        self.counter += step
        return f"The counter is at {self.counter}."

    def get_reward(self) -> float:
        """1.0 when the counter ends at the target, less the further it is (0 at a distance of the target or more)."""
        return max(0.0, 1.0 - abs(self.target - self.counter) / self.target)


def used_the_tool(environments: List[CounterEnv], **kwargs: Any) -> List[float]:
    """A TRL-shaped reward function reading the environments: 1.0 when the episode called ``increment`` at all."""
    return [1.0 if env.calls else 0.0 for env in environments]


def dataset(num_rows: int = 200, seed: int = 0) -> List[Dict[str, Any]]:
    """Rows ``{"prompt": [user message], "target": n}`` with targets from 2 to 9."""
    rng = random.Random(seed)
    rows = []
    for _ in range(num_rows):
        target = rng.randint(2, 9)
        text = f"Use the increment tool to bring the counter to {target}."
        rows.append({"prompt": [{"role": "user", "content": text}], "target": target})
    return rows
