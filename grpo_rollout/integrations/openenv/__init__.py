"""OpenEnv environment servers (HTTP/WebSocket), one episode per sample:
``rollout.function: grpo_rollout.integrations.openenv.openenv:openenv_rollout``."""
