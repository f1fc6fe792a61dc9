"""The ecosystems' environments, trained through the rollout contract: each sub-package adapts one (verifiers,
OpenEnv) and imports :mod:`grpo_rollout.rollouts`; nothing in the rollouts imports them (an import-linter contract)."""
