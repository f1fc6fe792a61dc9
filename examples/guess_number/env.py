"""Guess the number: a multi-turn environment with "higher"/"lower" feedback.

The secret comes from the dataset row (column ``secret``), so the ``n`` samples of a group play the same game and
GRPO compares strategies, not luck with secrets. Reward: 1.0 for a right guess on the first try, minus
``turn_cost`` per extra turn; 0.0 if the secret is not found within ``max_guesses`` turns.
"""

from __future__ import annotations

import random
import re
from typing import Any, Dict, List, Optional, Tuple

_INT = re.compile(r"-?\d+")

PROMPT = ("I am thinking of a whole number between {low} and {high}. Guess it! Reply with just one number; "
          "I will tell you if the secret is higher or lower.")


class GuessNumberEnv:
    """One game. ``reset(row)`` → the first prompt; ``step(text)`` → (feedback, reward or None, done).

    Args:
        low, high: the secret's range (inclusive). max_guesses: turns before the game is lost.
        turn_cost: reward lost per turn after the first.
    """

    def __init__(self, low: int = 1, high: int = 10, max_guesses: int = 4, turn_cost: float = 0.25):
        self.low, self.high, self.max_guesses, self.turn_cost = low, high, max_guesses, turn_cost
        self.secret = low
        self.turns = 0

    def reset(self, row: Dict[str, Any]) -> str:
        self.secret = int(row["secret"])
        self.turns = 0
        return PROMPT.format(low=self.low, high=self.high)

    def step(self, text: str) -> Tuple[str, Optional[float], bool]:
        self.turns += 1
        found = _INT.findall(text)
        guess = int(found[0]) if found else None
        if guess == self.secret:
            return "Correct!", max(0.0, 1.0 - self.turn_cost * (self.turns - 1)), True
        if self.turns >= self.max_guesses:
            return f"Out of guesses; it was {self.secret}.", 0.0, True
        if guess is None:
            return f"That is not a number. Reply with one number between {self.low} and {self.high}.", None, False
        hint = "higher" if self.secret > guess else "lower"
        return f"No, the secret is {hint} than {guess}. Guess again: reply with just one number.", None, False


def dataset(num_rows: int = 200, low: int = 1, high: int = 10, seed: int = 0) -> List[Dict[str, Any]]:
    """``num_rows`` games: columns ``prompt`` (the opening text, for reference) and ``secret``."""
    rng = random.Random(seed)
    return [{"prompt": PROMPT.format(low=low, high=high), "secret": rng.randint(low, high)} for _ in range(num_rows)]
