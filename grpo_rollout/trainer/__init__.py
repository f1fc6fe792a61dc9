"""Training: advantages, log-probs, losses, the step loop, checkpoints, metrics."""

from .loop import TrainResult, train

__all__ = ["TrainResult", "train"]
