"""Rollouts: the contract (:mod:`.contract`), calling a rollout function (:mod:`.rollout_call`) and built-in rollouts."""

from .contract import CONTEXT_ARGS, SAMPLING_ARGS, RolloutError, RolloutOutput, check_rollout_output


def builtin_rollout():
    """The rollout used when ``rollout.function`` is empty (single-turn sampling)."""
    from .single_turn import single_turn

    return single_turn


__all__ = ["CONTEXT_ARGS", "SAMPLING_ARGS", "RolloutError", "RolloutOutput", "check_rollout_output", "builtin_rollout"]
