"""Training: the GRPO recipe and its stages (rollout, update, weight sync), advantages, log-probs, losses, checkpoints,
metrics."""

from .run import TrainResult, train

__all__ = ["TrainResult", "train"]
