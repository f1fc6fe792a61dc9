"""How a step splits into micro-batches, and whether the lengths fit the server."""

from __future__ import annotations

import math
from typing import Any, List, Optional

from .problems import Problem, add_error as _err
from .schema import Config


_WINDOW = 10_000  # how far from the configured value check_batch looks for a value that would divide
# the keys the micro-batch split is computed from: with an error at one of them, a split error would be a follow-on
_SPLIT_KEYS = ("sampling.num_generations", "training.prompts_per_step", "training.micro_batch_size")


def steps_for_epochs(num_epochs: float, num_rows: int, prompts_per_step: int) -> int:
    """Steps that ``num_epochs`` passes over ``num_rows`` prompts take at ``prompts_per_step`` prompts a step
    (``ceil``: a last partial step is taken; the prompt order runs on into the next epoch's permutation)."""
    return max(1, math.ceil(num_epochs * num_rows / prompts_per_step - 1e-9))


def check_batch(config: Config, problems: List[Problem]) -> None:
    """``prompts_per_step × num_generations`` must split into whole micro-batches; lengths must fit the server."""
    s, t = config.sampling, config.training
    if min(s.num_generations, t.prompts_per_step, t.micro_batch_size) < 1:
        return
    seqs = t.prompts_per_step * s.num_generations
    if seqs % t.micro_batch_size:
        # search near the given values only (a window, not every number: the values may be huge)
        near = range(max(1, t.micro_batch_size - _WINDOW), min(seqs, t.micro_batch_size + _WINDOW) + 1)
        divisors = [d for d in near if seqs % d == 0] + [1, seqs]
        mbs = sorted(set(divisors), key=lambda d: (abs(d - t.micro_batch_size), -d))[:2]
        near = range(max(1, t.prompts_per_step - _WINDOW), t.prompts_per_step + _WINDOW + 1)
        pps = [p for p in near if (p * s.num_generations) % t.micro_batch_size == 0]
        pps = sorted(pps, key=lambda p: abs(p - t.prompts_per_step))[:2]
        fix = f"set training.micro_batch_size to {' or '.join(map(str, sorted(mbs)))}"
        if pps:
            fix += f", or training.prompts_per_step to {' or '.join(map(str, sorted(pps)))}"
        _err(problems, "training.micro_batch_size", t.micro_batch_size,
             f"prompts_per_step × num_generations = {t.prompts_per_step} × {s.num_generations} = {seqs} is not "
             f"divisible by micro_batch_size {t.micro_batch_size}", fix, depends_on=_SPLIT_KEYS)
    max_len = config.vllm.max_model_len
    if max_len and s.max_prompt_length and s.max_completion_length and \
            s.max_prompt_length + s.max_completion_length > max_len:
        _err(problems, "vllm.max_model_len", max_len,
             f"sampling.max_prompt_length + sampling.max_completion_length = {s.max_prompt_length} + "
             f"{s.max_completion_length} = {s.max_prompt_length + s.max_completion_length} exceeds it",
             f"raise vllm.max_model_len to {s.max_prompt_length + s.max_completion_length} or shorten the lengths",
             depends_on=("sampling.max_prompt_length", "sampling.max_completion_length", "vllm.max_model_len"))


def needed_model_len(sampling: Any) -> Optional[int]:
    """``max_prompt_length + max_completion_length`` of a config's ``sampling`` section (``None`` when prompts are
    not limited): the ``max_model_len`` a server must offer."""
    if not sampling.max_prompt_length:
        return None
    return sampling.max_prompt_length + sampling.max_completion_length
