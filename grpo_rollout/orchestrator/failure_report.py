"""What a run says about the episodes that failed outside the model (``rollout.on_error`` retry or drop): every failed
attempt's text with its prompt in the run folder (``failures.jsonl``, rank 0 writes), the first failure of each kind
on the console each step, and the prompts each epoch lost.

A *kind* is the exception type that made the attempt count as a failure (``EpisodeFailure``, ``ConnectionError``,
``httpx.ReadTimeout``, ...): a sandbox that fails the same way for every group gives one console line a step (at most
:data:`MOST_KINDS` kinds a step, then a count), however many groups failed; the file keeps them all.
"""

from __future__ import annotations

import builtins
import sys
from dataclasses import asdict, dataclass
from typing import Any, Dict, List, Optional, Tuple

from ..runs import names as rn

#: kinds of failure named on the console per step; the rest are counted (every one is in failures.jsonl)
MOST_KINDS = 3


@dataclass
class FailureRecord:
    """One failed attempt at rolling out a group (a line of ``failures.jsonl``).

    Attributes:
        step: the 1-based training step that reports it (the step whose metrics count it; a streamed group may
            belong to a later step's prompts). rank: the training process that played it. row: the dataset row's
            index (``None``: a call of several groups, which was then played again one group at a time). prompt: the
            group's prompt as in the dataset (a call of several groups: the list of their prompts). attempt: 1-based.
        error: the exception type that made it count (module-qualified unless a builtin). message: the text of what
            was raised, as the run would have stopped with it (names the method and file:line of user code).
        outcome: ``played alone`` (a call of several groups: each played again by itself), ``retried`` or ``dropped``
            (left out of the step).
    """

    step: int
    rank: int
    row: Optional[int]
    prompt: Any
    attempt: int
    error: str
    message: str
    outcome: str

    def to_json(self) -> Dict[str, Any]:
        """The ``failures.jsonl`` line (its ``step`` first, as in the run's other .jsonl files)."""
        return {rn.STEP: self.step, **{k: v for k, v in asdict(self).items() if k != "step"}}


def type_name(exc: BaseException) -> str:
    """``ConnectionError`` for a builtin; ``package.Name`` for a class its top-level package exports
    (``httpx.ReadTimeout``, not ``httpx._exceptions.ReadTimeout``); else ``module.Name``."""
    cls = type(exc)
    if getattr(builtins, cls.__name__, None) is cls:
        return cls.__name__
    top = cls.__module__.split(".")[0]
    if getattr(sys.modules.get(top), cls.__name__, None) is cls:
        return f"{top}.{cls.__name__}"
    return f"{cls.__module__}.{cls.__qualname__}"


def _shown(prompt: Any) -> str:
    if isinstance(prompt, list) and prompt and isinstance(prompt[-1], dict):
        prompt = prompt[-1].get("content", prompt)
    return repr(str(prompt)[:60])


def failure_notes(records: List[FailureRecord], on_error: str, where: str) -> List[str]:
    """The console's lines for one step's ``records`` (every rank's): per kind, the first one's text and prompt, how
    many attempts failed so and how many groups were left out; at most :data:`MOST_KINDS` kinds, then a count of the
    rest; ``where``: the file holding every text."""
    kinds: Dict[str, List[FailureRecord]] = {}
    for record in records:
        kinds.setdefault(record.error, []).append(record)
    notes = []
    for kind, same in list(kinds.items())[:MOST_KINDS]:
        first = same[0]
        prompt = f"{len(first.prompt)} prompts in one call" if first.row is None and isinstance(first.prompt, list) \
            else f"prompt {_shown(first.prompt)}"
        dropped = sum(r.outcome == "dropped" for r in same)
        notes.append(f"{len(same)} attempt(s) failed outside the model with {kind} (rollout.on_error: {on_error}; "
                     f"{dropped} group(s) left out); the first, {prompt}, attempt {first.attempt}: "
                     f"{first.message[:300]}")
    if len(kinds) > MOST_KINDS:
        rest = sum(len(v) for v in list(kinds.values())[MOST_KINDS:])
        notes.append(f"… and {rest} more failed attempt(s) of {len(kinds) - MOST_KINDS} other kind(s)")
    if notes:
        notes[-1] += f"; every failure's text: {where}"
    return notes


class EpochLosses:
    """Prompts left out of each epoch (groups dropped after failing: ``episodes/dropped`` ÷ ``num_generations``),
    counted by the 1-based step that reported them; an epoch is ``num_rows / prompts_per_step`` steps, as the
    progress bar counts them (a resumed run counts from its resumed step)."""

    def __init__(self, num_rows: int, prompts_per_step: int):
        self.num_rows, self.per_step = max(num_rows, 1), prompts_per_step
        self.in_epoch = 0

    def epoch_of(self, done: int) -> int:
        """The 1-based epoch that step ``done`` (1-based) ends in."""
        return (done * self.per_step - 1) // self.num_rows + 1

    def add(self, done: int, prompts: int) -> Tuple[int, Optional[str]]:
        """Count step ``done``'s (1-based) left-out ``prompts``. Returns the epoch's count so far, and at its last step
        the line that says how many it lost (``None`` when it lost none, or the epoch goes on)."""
        self.in_epoch += prompts
        lost = self.in_epoch
        if self.epoch_of(done + 1) == self.epoch_of(done):
            return lost, None
        self.in_epoch = 0
        if not lost:
            return lost, None
        return lost, (f"Epoch {self.epoch_of(done)} ended: {lost} of its prompts were left out after their episodes "
                      "failed outside the model (rollout.on_error); they were not trained in it")
