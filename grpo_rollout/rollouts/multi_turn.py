"""The multi-turn API in one import: a sample's token-level record and the chat-template helpers
(:mod:`.conversation`), and the episode drivers (:mod:`.episodes`). Build your own multi-turn rollout from these
(docs/multi_turn.md, "Your own multi-turn rollout"); the built-in tool-calling and environment rollouts do.

Only re-exports: :mod:`.episodes` imports :mod:`.conversation`, and this module imports both, so there is no cycle.
"""

from .conversation import (MAX_CONTINUATIONS, SENTINEL, Conversation, TurnHandler, as_messages, encode_plain,
                           encode_text, eos_ids_of, is_message, render, special_strings)
from .episodes import (BUDGET_REASONS, END_REASONS, Sampling, contract_dict, run_coroutine, run_episode, run_episodes,
                       run_multi_turn)

__all__ = ["BUDGET_REASONS", "END_REASONS", "MAX_CONTINUATIONS", "SENTINEL", "Conversation", "Sampling",
           "TurnHandler", "as_messages", "contract_dict", "encode_plain", "encode_text", "eos_ids_of", "is_message",
           "render", "run_coroutine", "run_episode", "run_episodes", "run_multi_turn", "special_strings"]
