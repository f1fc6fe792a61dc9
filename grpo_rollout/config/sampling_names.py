"""The names under which rollouts and rewards meet the ``sampling.*`` settings (re-exported by
:mod:`grpo_rollout.rollouts.contract`, the rollout contract they belong to; defined here so the config checks need
nothing above config)."""

from __future__ import annotations

from typing import Dict

#: Sampling settings every rollout receives as keyword arguments, mapped to their ``sampling.*`` key.
SAMPLING_ARGS: Dict[str, str] = {
    "n": "num_generations",
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "min_p": "min_p",
    "repetition_penalty": "repetition_penalty",
    "max_completion_length": "max_completion_length",
    "seed": "seed",
}
#: Names under which a sampling setting may appear in rollout/reward kwargs, mapped to the ``sampling.*`` key.
SAMPLING_ALIASES: Dict[str, str] = {
    **SAMPLING_ARGS,
    "num_generations": "num_generations",
    "num_return_sequences": "num_generations",
    "max_tokens": "max_completion_length",
    "max_new_tokens": "max_completion_length",
    "max_prompt_length": "max_prompt_length",
}
