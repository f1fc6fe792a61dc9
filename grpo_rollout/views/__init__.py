"""Reading a run folder back: ``grpo-rollout plot`` and ``grpo-rollout inspect``."""
