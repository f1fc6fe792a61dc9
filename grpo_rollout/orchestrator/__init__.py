"""The orchestrator: a step's batch, made beside the trainer (prime-rl's orchestrator/trainer split). A step's prompts
(their order, the curriculum, dynamic sampling's refills), calling the rollout and the rewards, episodes that fail
outside the model, streaming with a staleness bound, the weight versions the samples came from, rollout statistics.
The trainer hands it the step and its weight version and gets a :class:`~.batch.ScoredBatch` back; nothing here
imports :mod:`grpo_rollout.trainer` (an import-linter contract)."""
