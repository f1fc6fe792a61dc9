"""Model resolution: built-in models and local/hub names."""

from grpo_rollout.models.builtin import BUILTIN_MODELS, cache_dir, resolve_model_path

__all__ = ["BUILTIN_MODELS", "cache_dir", "resolve_model_path"]
