"""What was trained, token by token: ``output_dir/rollouts/step_<k>.jsonl`` (``training.save_rollouts``).

One JSON line per completion of the step, enough to see every number the update used for every token::

    {"step": 3, "index": 0, "group": 0,
     "prompt": <the dataset prompt>, "prompt_text": <the prompt ids decoded: what the model saw, chat template,
                                                     tool system prompt and environment opening included>,
     "prompt_ids": [...], "completion_ids": [...],
     "completion_mask": "1111000111",        # one character per completion token: 1 trained, 0 tool/env token
     "sampler_logprobs": [...] | null,       # nats; null where the rollout gave none or on an untrained placeholder
     "trainer_logprobs": [...] | null,       # nats, the policy before this step's update (first iteration);
                                             # null on a step without signal (no update, no forward pass)
     "importance_weights": [...] | null,     # sampler-correction weight of each token (training.sampler_correction)
     "advantage": 0.71, "reward": 1.0, "rewards": {"fn": 1.0}, "extras": {...},
     "weight_versions": [3, 4] | null,       # the oldest and newest weight version that sampled its turns
     "segments": [{"prompt_ids": ..., ...}]} # only when the episode has earlier sequences (a context edit):
                                             # each with the token-level keys above, trained with this advantage

Floats are rounded to 4 decimals to keep a step of 32 completions × 64 tokens near 60 KB. :class:`RolloutRecord` is
one line (written by the trainer, read back by ``grpo-rollout inspect``, :mod:`grpo_rollout.views.inspect`).
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence

from .completion import CompletionRecord
from .names import ROLLOUT_FILE_PREFIX, ROLLOUTS_DIR, rollout_file


def save_now(setting: str, step: int, last: bool) -> bool:
    """Whether step ``step`` (1-based) is saved under ``training.save_rollouts`` (``every``, ``off`` or ``N``: every
    N-th step and the last one)."""
    if setting == "off":
        return False
    if setting == "every":
        return True
    return step % int(setting) == 0 or last


def _round(values: Optional[Iterable[float]]) -> Optional[List[Optional[float]]]:
    if values is None:
        return None
    return [round(v, 4) if math.isfinite(v) else None for v in values]


def _finite(value: Any) -> Any:
    """``value`` with NaN/inf floats (anywhere in dicts and lists) as ``None``: JSON has no NaN."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def token_record(prompt_ids: Sequence[int], completion_ids: Sequence[int], mask: Sequence[int],
                 sampler_logprobs: Optional[Sequence[float]], trainer_logprobs: Optional[Sequence[float]],
                 importance_weights: Optional[Sequence[float]]) -> Dict[str, Any]:
    """The token-level part of one completion's line (the lists have one entry per completion token; untrained
    tokens' placeholders and non-finite values are written as ``null``)."""
    trained = [bool(m) for m in mask]
    return {"prompt_ids": list(prompt_ids), "completion_ids": list(completion_ids),
            "completion_mask": "".join("1" if m else "0" for m in trained),
            "sampler_logprobs": None if sampler_logprobs is None else
            _round(v if m else math.nan for v, m in zip(sampler_logprobs, trained)),
            "trainer_logprobs": _round(trainer_logprobs),
            "importance_weights": None if importance_weights is None else
            _round(v if m else math.nan for v, m in zip(importance_weights, trained))}


def fold_segments(records: List[Dict[str, Any]], owners: Sequence[int], num_completions: int) -> List[Dict[str, Any]]:
    """Per completion, its :func:`token_record` with ``segments``: the records of its episode's earlier sequences.
    ``records`` and ``owners`` are per training row: the ``num_completions`` completions first, then the earlier
    sequences, each owned by a completion (:class:`~grpo_rollout.orchestrator.batch.TrainingRows`)."""
    folded = [dict(r, segments=[]) for r in records[:num_completions]]
    for record, owner in zip(records[num_completions:], owners[num_completions:]):
        folded[owner]["segments"].append(record)
    return folded


@dataclass(kw_only=True)
class RolloutRecord:
    """One line of ``rollouts/step_<k>.jsonl``: one completion of step ``step`` (1-based), its tokens and the
    numbers the update used for them (the format in this module's docstring, keys in field order; the token-level
    fields are :func:`token_record`'s). Fields with defaults may be missing from a line."""

    step: int
    index: int
    group: int
    prompt: Any = None
    prompt_text: str = ""
    prompt_ids: List[int]
    completion_ids: List[int]
    completion_mask: str
    sampler_logprobs: Optional[List[Optional[float]]] = None
    trainer_logprobs: Optional[List[Optional[float]]] = None
    importance_weights: Optional[List[Optional[float]]] = None
    advantage: float
    reward: Optional[float] = None
    rewards: Dict[str, Any] = field(default_factory=dict)
    extras: Dict[str, Any] = field(default_factory=dict)
    weight_versions: Optional[List[int]] = None
    segments: List[Dict[str, Any]] = field(default_factory=list)

    @classmethod
    def of(cls, record: CompletionRecord, tokens: Dict[str, Any], *, step: int, index: int, group: int,
           prompt_text: str) -> "RolloutRecord":
        """The line of completion ``index`` (of ``group``) of step ``step``: ``record``'s prompt, reward, rewards,
        extras, weight versions and advantage (rounded to 4 decimals) with its :func:`token_record` ``tokens`` and
        ``prompt_text`` (the prompt ids decoded)."""
        advantage = None if record.advantage is None else round(record.advantage, 4)
        return cls(step=step, index=index, group=group, prompt=record.prompt, prompt_text=prompt_text, **tokens,
                   advantage=advantage, reward=record.reward, rewards=dict(record.rewards),
                   extras=dict(record.extras),
                   weight_versions=None if record.weight_versions is None else list(record.weight_versions))

    def to_json(self) -> str:
        """The JSON line (no newline): NaN/inf as ``null``, values JSON cannot hold as their ``str``; ``segments``
        only when the episode has earlier sequences."""
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                  if f.name != "segments" or self.segments}
        return json.dumps(_finite(values), default=str)

    @classmethod
    def from_json(cls, line: str) -> "RolloutRecord":
        """Read a line written by :meth:`to_json` (keys a line lacks get their defaults; unknown keys are
        ignored)."""
        raw = json.loads(line)
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in raw.items() if k in known})


def write_rollouts(output_dir: Path, step: int, records: List[RolloutRecord]) -> Path:
    """Write ``rollouts/step_<step>.jsonl`` (``step`` 1-based; replacing a file of a replayed step); return its
    path."""
    folder = Path(output_dir) / ROLLOUTS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / rollout_file(step)
    tmp = path.with_suffix(".jsonl.tmp")
    with tmp.open("w") as f:
        for record in records:
            f.write(record.to_json() + "\n")
    tmp.replace(path)
    return path


def saved_steps(run_dir: Path) -> List[int]:
    """Steps with a saved ``rollouts/step_<k>.jsonl`` in ``run_dir``, ascending."""
    folder = Path(run_dir) / ROLLOUTS_DIR
    steps = []
    for path in folder.glob(rollout_file("*")):
        suffix = path.stem[len(ROLLOUT_FILE_PREFIX):]
        if suffix.isdigit():
            steps.append(int(suffix))
    return sorted(steps)


def read_rollouts(run_dir: Path, step: int) -> List[RolloutRecord]:
    """The records of ``step`` (1-based) saved in ``run_dir``.

    Raises:
        FileNotFoundError: no file for that step (the message lists the saved steps).
    """
    path = Path(run_dir) / ROLLOUTS_DIR / rollout_file(step)
    if not path.is_file():
        steps = saved_steps(run_dir)
        have = f"saved steps: {_ranges(steps)}" if steps else \
            "no step was saved: train with training.save_rollouts=every (or N: every N-th step)"
        raise FileNotFoundError(f"{path} does not exist ({have})")
    return [RolloutRecord.from_json(line) for line in path.read_text().splitlines() if line.strip()]


def _ranges(steps: List[int]) -> str:
    """``[1, 2, 3, 5]`` → ``"1-3, 5"``."""
    parts: List[str] = []
    for s in steps:
        if parts and s == int(parts[-1].split("-")[-1]) + 1:
            parts[-1] = f"{parts[-1].split('-')[0]}-{s}"
        else:
            parts.append(str(s))
    return ", ".join(parts)
