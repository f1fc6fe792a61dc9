"""An OpenEnv environment server, written with openenv-core's own server classes: guess a secret number from 1 to 10
with "higher"/"lower" hints. configs/openenv_guess.yaml has the run serve this app (`server: ...:app`); any OpenEnv
server reachable by URL works the same way (`url: http://...`).

By hand:  python examples/openenv_guess/server.py 8000      (then url: http://127.0.0.1:8000)
"""

from __future__ import annotations

import sys
from typing import Any, Optional

from openenv.core.env_server import Action, Environment, Observation, State, create_app


class GuessAction(Action):
    """The model's guess."""

    guess: int


class GuessObservation(Observation):
    """What the player is told."""

    message: str = ""


class GuessEnvironment(Environment):
    """One game per WebSocket session; reset takes the dataset row's columns (here ``secret``)."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self):
        super().__init__()
        self.secret, self.turns = 5, 0

    def reset(self, seed: Optional[int] = None, episode_id: Optional[str] = None, **kwargs: Any) -> GuessObservation:
        self.secret, self.turns = int(kwargs.get("secret", 5)), 0
        return GuessObservation(message="I picked a number from 1 to 10. Reply with one number.", done=False)

    def step(self, action: GuessAction, timeout_s: Optional[float] = None, **kwargs: Any) -> GuessObservation:
        self.turns += 1
        if action.guess == self.secret:
            return GuessObservation(message="Right!", done=True, reward=1.0)
        hint = "higher" if action.guess < self.secret else "lower"
        return GuessObservation(message=f"No, {hint}. Reply with one number.", done=False, reward=-0.2)

    @property
    def state(self) -> State:
        return State(step_count=self.turns)


app = create_app(GuessEnvironment, GuessAction, GuessObservation, max_concurrent_envs=256)

if __name__ == "__main__":
    import uvicorn

    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]) if len(sys.argv) > 1 else 8000)
