"""Seeds per prompt and per sample, so that seeded sampling stays reproducible without tying samples together.

A request carries one ``seed`` for all its prompts. Handed as it is to vLLM, sample ``j`` of *every* prompt would be
seeded ``seed + j`` (vLLM seeds the ``n`` samples of a request ``seed``, ``seed + 1``, ...), so slot ``j`` of each
prompt draws the same random numbers and completions start alike across prompts. Instead each prompt gets its own
seed, a hash of the request's seed, the prompt's token ids and how many identical prompts came before it in the
request; its ``n`` samples then get that ``+ 0 .. n-1``.

Hashing the prompt's content rather than its position keeps a prompt's samples the same whichever batch, server or
training process it is sent with, and still distinct when a rollout calls ``generate`` once per prompt with the same
seed. The trainer hands the rollout ``sampling.seed + step``, so a (step, prompt, sample) triple has its own seed.
"""

from __future__ import annotations

import hashlib
from typing import Dict, List, Optional, Sequence, Tuple

#: Derived seeds lie in ``[0, SEED_RANGE)``; vLLM adds the sample's index (< 512) to them.
SEED_RANGE = 2 ** 31


def derive_seed(*parts: object) -> int:
    """A seed in ``[0, SEED_RANGE)`` from any picklable-as-text ``parts`` (BLAKE2b of their ``repr``): nearby inputs
    give unrelated seeds."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") % SEED_RANGE


def prompt_seeds(seed: Optional[int], prompt_ids: Sequence[Sequence[int]]) -> List[Optional[int]]:
    """The seed of each prompt of one request whose seed is ``seed`` (``None``: unseeded, all ``None``).

    Args:
        seed: the request's seed. prompt_ids: ``P`` prompts as token ids.

    Returns:
        ``P`` seeds: equal prompts get different seeds by their order in the request (the first, second, ...).
    """
    if seed is None:
        return [None] * len(prompt_ids)
    seen: Dict[Tuple[int, ...], int] = {}
    out = []
    for ids in prompt_ids:
        key = tuple(ids)
        seen[key] = seen.get(key, -1) + 1
        out.append(derive_seed(seed, seen[key], key))
    return out
