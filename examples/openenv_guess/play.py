"""The training side of configs/openenv_guess.yaml: the dataset, and how the model's text becomes an action."""

from __future__ import annotations

import random
import re
from typing import Any, Dict, List


def to_action(text: str) -> Dict[str, Any]:
    """The model's turn → the environment's action: its first number (0, an always-wrong guess, when it wrote none)."""
    found = re.search(r"-?\d+", text)
    return {"guess": int(found.group()) if found else 0}


def dataset(num_rows: int = 200, seed: int = 0) -> List[Dict[str, Any]]:
    """Rows ``{"prompt": ..., "secret": n}``: the secret goes to the server's reset, the prompt opens the game."""
    rng = random.Random(seed)
    return [{"prompt": "Let's play a guessing game.", "secret": rng.randint(1, 10)} for _ in range(num_rows)]
