"""An episode's earlier sequences: when an agent edits its context (drops or summarises history, starts a sub-agent),
a chat call's prompt no longer extends the tokens sampled before it, so the episode cannot be one sequence. The
episode's completion is then its last sequence, and the ones before it are its ``segments``: each trained on with the
episode's advantage, none seen by the reward functions (they score the episode), none counted as a completion of its
group. The same shape as AReaL's and rLLM's per-call records of an agent: one training row per sequence, one reward
per episode.

A rollout returns them under the key ``segments``: one entry per completion (``P × n``), each ``None`` or a list of
dicts with ``prompt_ids``, ``completion_ids``, ``logprobs`` (required when the rollout returns ``logprobs``) and
``completion_mask`` (optional, all 1), in the order the episode made them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Mapping, Optional

from .token_checks import RolloutError, as_list, check_trained_logprobs, int_lists, per_token

#: The rollout contract's key for them.
SEGMENTS_KEY = "segments"


@dataclass(frozen=True)
class Segment:
    """One earlier sequence of an episode.

    Attributes:
        prompt_ids: its prompt's token ids. completion_ids: what followed, sampled and inserted.
        logprobs: the sampler's log-prob per completion token (nats; placeholders where the mask is 0), or ``None``
            when the rollout returned no log-probs. completion_mask: 1 = trained on (sampled), 0 = inserted.
    """

    prompt_ids: List[int]
    completion_ids: List[int]
    logprobs: Optional[List[float]]
    completion_mask: List[int]

    def as_dict(self) -> dict:
        """The contract's form (what a rollout returns for it)."""
        return {"prompt_ids": self.prompt_ids, "completion_ids": self.completion_ids, "logprobs": self.logprobs,
                "completion_mask": self.completion_mask}


def _segment(where: str, value: Any, vocab_size: Optional[int], with_logprobs: bool) -> Segment:
    if not isinstance(value, Mapping) or "prompt_ids" not in value or "completion_ids" not in value:
        raise RolloutError(f"`{where}` must be a dict with prompt_ids, completion_ids, logprobs and completion_mask, "
                           f"got {type(value).__name__}{'' if not isinstance(value, Mapping) else sorted(value)}")
    [prompt] = int_lists(f"{where}.prompt_ids", [value["prompt_ids"]], (1,), vocab_size, allow_empty=False)
    completion = int_lists(f"{where}.completion_ids", [value["completion_ids"]], (1,), vocab_size, allow_empty=True)
    mask = value.get("completion_mask")
    [mask] = [[1] * len(completion[0])] if mask is None else per_token(f"{where}.completion_mask", [mask], completion,
                                                                       int)
    logprobs = None
    if with_logprobs:
        if value.get("logprobs") is None:
            raise RolloutError(f"`{where}` has no logprobs but the rollout returned logprobs: give each segment the "
                               "sampler's log-prob of each of its tokens")
        [logprobs] = per_token(f"{where}.logprobs", [value["logprobs"]], completion, float)
        check_trained_logprobs(f"{where}.logprobs", [logprobs], [mask])
    return Segment(prompt, completion[0], logprobs, mask)


def check_segments(value: Any, total: int, vocab_size: Optional[int],
                   with_logprobs: bool) -> Optional[List[List[Segment]]]:
    """The ``segments`` key checked: ``total`` (``P × n``) lists of :class:`Segment` (empty where a completion has
    none), or ``None`` when ``value`` is ``None`` or holds none at all.

    Raises:
        RolloutError: not one entry per completion, or a segment that is not a dict of valid token lists (naming
            ``segments[i][k]`` and the key).
    """
    value = as_list(value)
    if value is None:
        return None
    if not isinstance(value, (list, tuple)) or len(value) != total:
        got = len(value) if isinstance(value, (list, tuple)) else type(value).__name__
        raise RolloutError(f"`{SEGMENTS_KEY}` must have one entry per completion ({total}), got {got}")
    out = []
    for i, entry in enumerate(value):
        if entry is not None and not isinstance(entry, (list, tuple)):
            raise RolloutError(f"`{SEGMENTS_KEY}[{i}]` must be a list of segments or None, got {type(entry).__name__}")
        out.append([_segment(f"{SEGMENTS_KEY}[{i}][{k}]", s, vocab_size, with_logprobs)
                    for k, s in enumerate(entry or [])])
    return out if any(out) else None
