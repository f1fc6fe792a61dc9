"""reasoning-gym's procedural tasks as a data source: ``data.train: reasoning_gym:<task>`` (e.g. ``basic_arithmetic``;
``grpo-rollout tasks`` lists them, ``grpo-rollout tasks <task>`` shows a task's settings), made offline by
``reasoning_gym.create_dataset(task, **data.task_kwargs)``.

Each row's prompt is the question, then ``data.task_instruction`` (by default
:data:`~grpo_rollout.config.schema.REASONING_GYM_INSTRUCTION`, which asks for the answer inside ``<answer>`` tags), the
same for training and held-out rows. The held-out rows (``data.eval`` naming the same task) come from ``seed + size``
(reasoning-gym seeds item ``i`` with ``seed + i``, so these are the items after the training ones), with every
question the training rows hold (and every repeat) taken out, so the two never overlap. Each row has ``prompt`` (a
user message), ``answer``, ``task``, ``task_entry`` (the whole reasoning-gym entry as JSON) and ``task_kwargs`` (the
settings it was made with, as JSON), which :func:`grpo_rollout.rewards.tasks.reasoning_gym_score` uses to score with
the task's own scorer, configured as the rows were.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Dict, List, Mapping

from ..config.schema import REASONING_GYM_INSTRUCTION

PREFIX = "reasoning_gym:"
DEFAULT_SIZE = 500


def create(task: str, task_kwargs: Mapping[str, Any]):
    """``reasoning_gym.create_dataset(task, **task_kwargs)``; for ``composite``, the ``datasets`` entries may be
    mappings (``{name, weight, config}``, as YAML writes them) and become reasoning-gym's ``DatasetSpec``.

    Raises:
        ValueError, TypeError, AssertionError: reasoning-gym's own, for an unknown task or settings it refuses.
    """
    import reasoning_gym

    kwargs = dict(task_kwargs)
    if task == "composite" and isinstance(kwargs.get("datasets"), list):
        from reasoning_gym.composite import DatasetSpec

        kwargs["datasets"] = [DatasetSpec(**{"config": {}, **d}) if isinstance(d, Mapping) else d
                              for d in kwargs["datasets"]]
    return reasoning_gym.create_dataset(task, **kwargs)


def task_rows(task: str, task_kwargs: Mapping[str, Any], held_out: bool = False,
              instruction: str = REASONING_GYM_INSTRUCTION) -> List[Dict[str, Any]]:
    """The rows of reasoning-gym task ``task`` (``task_kwargs``: ``create_dataset``'s size, seed and the task's own
    settings; ``held_out``: from ``seed + size``, without the training rows' questions; ``instruction``: text put
    after each question in the prompt, ``""`` for none).

    Raises:
        ValueError, TypeError, AssertionError: reasoning-gym does not know ``task`` or refuses its settings (its own
            message; ``grpo_rollout.preflight`` says it better, naming the key).
    """
    kwargs = {"size": DEFAULT_SIZE, "seed": 0, **task_kwargs}
    train = create(task, kwargs)
    if not held_out:
        return [_row(task, entry, instruction, kwargs) for entry in train]
    seen = {entry["question"] for entry in train}
    rows = []
    held_kwargs = {**kwargs, "seed": kwargs["seed"] + kwargs["size"]}
    for entry in create(task, held_kwargs):
        if entry["question"] not in seen:  # neither a training question nor one already held out
            seen.add(entry["question"])
            rows.append(_row(task, entry, instruction, held_kwargs))
    return rows


def _row(task: str, entry: Mapping[str, Any], instruction: str, kwargs: Mapping[str, Any]) -> Dict[str, Any]:
    question = entry["question"].rstrip()
    sep = "\n" if "\n" in question else " "  # on its own line after a question of several lines
    text = f"{question}{sep}{instruction}".strip()
    answer = None if entry["answer"] is None else str(entry["answer"])  # None: the task checks a solution itself
    return {"prompt": [{"role": "user", "content": text}], "answer": answer, "task": task,
            "task_entry": json.dumps(entry, default=str), "task_kwargs": json.dumps(kwargs, default=str)}


def task_names() -> List[str]:
    """Every reasoning-gym task name, sorted (``reasoning_gym.factory.DATASETS``).

    Raises:
        ImportError: reasoning-gym is not installed (``pip install 'grpo-rollout[tasks]'``).
    """
    import reasoning_gym  # noqa: F401 - importing it registers the tasks
    from reasoning_gym.factory import DATASETS

    return sorted(DATASETS)


def task_category(task: str) -> str:
    """The task's group in reasoning-gym (``arithmetic``, ``games``, ...: the package its class lives in)."""
    from reasoning_gym.factory import DATASETS

    parts = DATASETS[task][0].__module__.split(".")
    return parts[1] if len(parts) > 2 else "other"


def task_settings(task: str) -> Dict[str, Any]:
    """The settings ``data.task_kwargs`` may give ``task`` (its config dataclass's fields), each with its default
    here (``size`` :data:`DEFAULT_SIZE` and ``seed`` 0, where the task has them; ``None`` when it has none)."""
    from reasoning_gym.factory import DATASETS

    out: Dict[str, Any] = {}
    for field in dataclasses.fields(DATASETS[task][1]):
        if field.default is not dataclasses.MISSING:
            out[field.name] = field.default
        elif field.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            out[field.name] = field.default_factory()  # type: ignore[misc]
        else:
            out[field.name] = None
    ours = {"size": DEFAULT_SIZE, "seed": 0}
    return {name: ours.get(name, default) for name, default in out.items()}
