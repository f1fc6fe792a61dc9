"""Guess the number: a multi-turn environment with "higher"/"lower" feedback.

The secret comes from the dataset row (column ``secret``), so the ``n`` samples of a group play the same game and
GRPO compares strategies, not luck with secrets. Reward: 1.0 for a right guess on the first try, minus
``turn_cost`` per extra turn; 0.0 if the secret is not found within ``max_guesses`` turns; plus ``hint_bonus`` for
every guess that respects the feedback so far (inside the range still possible, not tried before), which pays for
the skill the game is about, reading "higher"/"lower", even in games that end unsolved.
"""

from __future__ import annotations

import random
import re
from typing import Any, Dict, List, Optional, Tuple

_INT = re.compile(r"-?\d+")

PROMPT = ("I am thinking of a whole number between {low} and {high}. Guess it! Reply with just one number; "
          "I will tell you if the secret is higher or lower.")
HIGHER = "No, the secret is higher than {guess}. Guess again: reply with just one number."
LOWER = "No, the secret is lower than {guess}. Guess again: reply with just one number."


def demonstration(low: int, high: int) -> List[Dict[str, str]]:
    """A short finished game shown before the real one (SmolLM2-135M rarely answers with a bare number without it)."""
    first, secret = (low + high) // 2, (low + high) // 2 + max(1, (high - low) // 4)
    return [{"role": "user", "content": PROMPT.format(low=low, high=high)},
            {"role": "assistant", "content": str(first)},
            {"role": "user", "content": HIGHER.format(guess=first)},
            {"role": "assistant", "content": str(secret)},
            {"role": "user", "content": "Correct! Let's play again."}]


class GuessNumberEnv:
    """One game. ``reset(row)`` → the first prompt; ``step(text)`` → (feedback, reward or None, done).

    Args:
        low, high: the secret's range (inclusive). max_guesses: turns before the game is lost.
        turn_cost: reward lost per turn after the first. hint_bonus: reward per guess consistent with the feedback.
        demonstration: start with a finished example game.
    """

    def __init__(self, low: int = 1, high: int = 10, max_guesses: int = 4, turn_cost: float = 0.25,
                 hint_bonus: float = 0.0, demonstration: bool = True):
        self.low, self.high, self.max_guesses, self.turn_cost = low, high, max_guesses, turn_cost
        self.hint_bonus, self.demonstration = hint_bonus, demonstration
        self.secret = low
        self.turns = 0
        self.possible = (low, high)  # the secret's range given the feedback so far
        self.tried: set = set()

    def reset(self, row: Dict[str, Any]) -> List[Dict[str, str]]:
        """Start a game with ``row["secret"]``; returns the example game (if enabled) and the opening question."""
        self.secret = int(row["secret"])
        self.turns = 0
        self.possible, self.tried = (self.low, self.high), set()
        opening = {"role": "user", "content": PROMPT.format(low=self.low, high=self.high)}
        return (demonstration(self.low, self.high) if self.demonstration else []) + [opening]

    def step(self, text: str) -> Tuple[str, Optional[float], bool]:
        """Read the first integer in ``text`` as the guess; returns (feedback, reward or None, game over)."""
        self.turns += 1
        found = _INT.findall(text)
        guess = int(found[0]) if found else None
        lo, hi = self.possible
        bonus = self.hint_bonus if guess is not None and lo <= guess <= hi and guess not in self.tried else 0.0
        if guess is not None:
            self.tried.add(guess)
        if guess == self.secret:
            return "Correct!", max(0.0, 1.0 - self.turn_cost * (self.turns - 1)) + bonus, True
        if self.turns >= self.max_guesses:
            return f"Out of guesses; it was {self.secret}.", bonus, True
        if guess is None:
            return f"That is not a number. Reply with one number between {self.low} and {self.high}.", None, False
        if self.secret > guess:
            self.possible = (max(lo, guess + 1), hi)
            return HIGHER.format(guess=guess), bonus or None, False
        self.possible = (lo, min(hi, guess - 1))
        return LOWER.format(guess=guess), bonus or None, False


def dataset(num_rows: int = 200, low: int = 1, high: int = 10, seed: int = 0) -> List[Dict[str, Any]]:
    """``num_rows`` games: columns ``prompt`` (the opening text, for reference) and ``secret``."""
    rng = random.Random(seed)
    return [{"prompt": PROMPT.format(low=low, high=high), "secret": rng.randint(low, high)} for _ in range(num_rows)]
