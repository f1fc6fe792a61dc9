"""Rewards that score with the field's task libraries, through their public APIs (one module each):

- :func:`math_accuracy` (:mod:`.math_answers`): math-verify parses the completion's and the reference's answers
  (``\\boxed{}``, LaTeX, fractions, equivalent forms) and compares them;
- :func:`reasoning_gym_score` (:mod:`.reasoning_gym_score`): a reasoning-gym task's own scorer on the completion's answer,
  for rows from a ``reasoning_gym:<task>`` source (:mod:`grpo_rollout.data.reasoning_gym`).

Use them by dotted path: ``rewards: [{function: grpo_rollout.rewards.tasks:math_accuracy}]``.
"""

from .math_answers import math_accuracy
from .reasoning_gym_score import reasoning_gym_score

__all__ = ["math_accuracy", "reasoning_gym_score"]
