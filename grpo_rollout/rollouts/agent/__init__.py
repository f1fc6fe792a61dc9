"""Agents as they are: any program that speaks the OpenAI chat API trains through a recording endpoint.

``rollout.function: grpo_rollout.rollouts.agent:agent_rollout`` (:func:`.agent_rollout.agent_rollout`); the endpoint
(:mod:`.endpoint`) answers each episode's chat calls (:mod:`.sessions`) from the run's generation client.
"""

from .agent_rollout import agent_rollout

__all__ = ["agent_rollout"]
