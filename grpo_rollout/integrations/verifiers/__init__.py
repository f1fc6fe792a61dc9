"""verifiers tasksets (verifiers 0.4, ``verifiers.v1``) trained through the recording endpoint, their task's rewards
as the reward: ``data.train: verifiers:<taskset>`` with ``rollout.function:
grpo_rollout.integrations.verifiers.verifiers:verifiers_rollout``."""
