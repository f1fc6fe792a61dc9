"""verifiers environments (Environments Hub) played against the vLLM server's OpenAI routes, their rubric as the
reward: ``rollout.function: grpo_rollout.integrations.verifiers.verifiers:verifiers_rollout``."""
