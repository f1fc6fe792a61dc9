"""Rewards: calling reward functions (:mod:`.calling`) and a small library of reusable ones (:mod:`.library`)."""

from .calling import STANDARD_REWARD_ARGS, RewardError, RewardFunction, RewardResult, compute_rewards

__all__ = ["STANDARD_REWARD_ARGS", "RewardError", "RewardFunction", "RewardResult", "compute_rewards"]
