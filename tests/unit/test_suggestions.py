"""Did-you-mean for misspelled arguments of a reward and of an environment's constructor (found by the new user of
issue 19: `max_wrds` and `turn_costs` listed the valid names but did not point at the close one)."""

from __future__ import annotations

BRIEF = """
def brief(completions, max_words=8):
    return [float(len(c.split()) <= max_words) for c in completions]
"""

ENV = """
class Game:
    def __init__(self, turn_cost=0.1):
        self.turn_cost = turn_cost

    def reset(self, row):
        return "Play."

    def step(self, text):
        return None, 1.0, True
"""


def test_misspelled_reward_kwarg_suggests_the_parameter(project):
    project.write("brief.py", BRIEF)
    cfg = project.baseline()
    cfg["rewards"] = [{"function": "brief.py:brief", "kwargs": {"max_wrds": 5}}]
    [p] = [p for p in project.check(cfg) if p.key == "rewards[0].kwargs"]
    assert "does not accept `max_wrds`" in p.message
    assert p.fix.startswith("did you mean `max_words` (for `max_wrds`)? Otherwise remove them")


def test_misspelled_env_kwarg_suggests_the_parameter(project):
    project.write("game.py", ENV)
    cfg = project.baseline()
    cfg["rollout"] = {"function": "grpo_rollout.rollouts.environment:environment_rollout",
                      "kwargs": {"env": "game.py:Game", "env_kwargs": {"turn_costs": 0.2}}}
    [p] = [p for p in project.check(cfg) if p.key == "rollout.kwargs.env_kwargs"]
    assert "Game() does not accept these arguments" in p.message
    assert p.fix == "did you mean `turn_cost` (for `turn_costs`)? its parameters: turn_cost"
