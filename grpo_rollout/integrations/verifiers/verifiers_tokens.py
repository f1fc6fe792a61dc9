"""One verifiers episode as one trainable completion: the token ids and log-probs the server returned for each turn,
the tokens later prompts add (the environment's answers, the template's turn markers) masked, and turns whose prompt
re-rendered the earlier ones otherwise than they were sampled counted as *rebased* (:func:`episode_tokens`)."""

from __future__ import annotations

from typing import Any, Dict, List, NamedTuple

from ...rollouts.contract import RolloutError


class EpisodeTokens(NamedTuple):
    """One episode as one completion: ``prompt_ids``; ``completion_ids``, ``logprobs``, ``completion_mask`` (each
    ``(completion_len,)``); ``rebased``: turns whose prompt did not extend the turns before (see
    :func:`episode_tokens`)."""

    prompt_ids: List[int]
    completion_ids: List[int]
    logprobs: List[float]
    completion_mask: List[int]
    rebased: int


def episode_tokens(state: Dict[str, Any], where: str) -> EpisodeTokens:
    """One episode's tokens, from the token ids the server returned for each turn (``state["trajectory"]``).

    Turn ``k``'s completion is trained on (mask 1, or the turn's own ``completion_mask``; the sampler's log-probs);
    the tokens its prompt adds after turn ``k-1``'s prompt and completion (the environment's answer, the template's
    turn markers) are masked (0, log-prob 0.0 as a placeholder). A turn whose prompt does not extend the turns before
    it (the chat template re-rendered an earlier turn otherwise than it was sampled: trimmed, re-spaced tool-call JSON,
    another end-of-turn token) is *rebased*: the completion restarts from its prompt, the earlier turns kept only as
    masked context (their sampled tokens are not trained), and ``rebased`` counts it.

    Raises:
        RolloutError: the episode has no turn (the first prompt did not fit the server), a turn has no token ids (the
            server is not vLLM, or did not honour ``return_token_ids``), or a turn's prompt does not even start with
            the episode's first prompt.
    """
    steps = state.get("trajectory") or []
    if not steps:
        why = ("its first prompt is longer than the server takes (vllm.max_model_len; shorten the prompts or raise "
               "it)" if state.get("prompt_too_long") else "the environment ended it before the model's first turn")
        raise RolloutError(f"{where}: the episode sampled no turn: {why}")
    prompt_ids: List[int] = []
    ids: List[int] = []
    logprobs: List[float] = []
    mask: List[int] = []
    rebased = 0
    for k, step in enumerate(steps):
        tokens = step.get("tokens")
        if not tokens or tokens.get("completion_logprobs") is None:
            raise RolloutError(f"{where}, turn {k + 1}: the server's answer carried no token ids and log-probs; "
                               "the trained tokens must be the sampled ones: use a vLLM server (grpo-rollout serve "
                               "or vllm.mode: spawn), which returns them for return_token_ids and logprobs")
        turn_prompt, turn_ids = list(tokens["prompt_ids"]), list(tokens["completion_ids"])
        if k == 0:
            prompt_ids = turn_prompt
        else:
            so_far = prompt_ids + ids
            if turn_prompt[:len(so_far)] != so_far:
                if turn_prompt[:len(prompt_ids)] != prompt_ids:
                    raise RolloutError(f"{where}, turn {k + 1}: its prompt does not start with the episode's first "
                                       "prompt: the environment rewrote the conversation, which cannot be trained as "
                                       "one completion")
                rebased += 1
                so_far, ids, logprobs, mask = prompt_ids, [], [], []
            added = turn_prompt[len(so_far):]
            ids += added
            logprobs += [0.0] * len(added)
            mask += [0] * len(added)
        ids += turn_ids
        logprobs += [float(x) for x in tokens["completion_logprobs"]]
        turn_mask = tokens.get("completion_mask")
        mask += [int(bool(x)) for x in turn_mask] if turn_mask and len(turn_mask) == len(turn_ids) else \
            [1] * len(turn_ids)
    return EpisodeTokens(prompt_ids, ids, logprobs, mask, rebased)
