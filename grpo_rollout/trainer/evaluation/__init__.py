"""The held-out evaluation: sampling and scoring ``data.eval``, pass@k, ``grpo-rollout eval``."""
