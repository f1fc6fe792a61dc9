"""reasoning-gym's procedural tasks as a data source: ``data.train: reasoning_gym:<task>`` (e.g. ``basic_arithmetic``;
``python -c "import reasoning_gym; print(sorted(reasoning_gym.factory.DATASETS))"`` lists them), made offline by
``reasoning_gym.create_dataset(task, **data.task_kwargs)``.

The held-out rows (``data.eval`` naming the same task) come from ``seed + size`` (reasoning-gym seeds item ``i`` with
``seed + i``, so these are the items after the training ones), with every question the training rows hold (and every
repeat) taken out, so the two never overlap. Each row has ``prompt`` (the question as a user message), ``answer``,
and ``task_entry`` (the whole reasoning-gym entry as JSON), which
:func:`grpo_rollout.rewards.tasks.reasoning_gym_score` hands to the task's own scorer.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Mapping

PREFIX = "reasoning_gym:"
DEFAULT_SIZE = 500


def task_rows(task: str, task_kwargs: Mapping[str, Any], held_out: bool = False,
              instruction: str = "") -> List[Dict[str, Any]]:
    """The rows of reasoning-gym task ``task`` (``task_kwargs``: ``create_dataset``'s size, seed and the task's own
    settings; ``held_out``: from ``seed + size``, without the training rows' questions; ``instruction``: text put
    after each question in the prompt, e.g. "Reply with only the number.").

    Raises:
        ValueError: reasoning-gym does not know ``task`` or its settings (its own message).
    """
    import reasoning_gym

    kwargs = {"size": DEFAULT_SIZE, "seed": 0, **task_kwargs}
    train = reasoning_gym.create_dataset(task, **kwargs)
    if not held_out:
        return [_row(task, entry, instruction) for entry in train]
    seen = {entry["question"] for entry in train}
    rows = []
    for entry in reasoning_gym.create_dataset(task, **{**kwargs, "seed": kwargs["seed"] + kwargs["size"]}):
        if entry["question"] not in seen:  # neither a training question nor one already held out
            seen.add(entry["question"])
            rows.append(_row(task, entry, instruction))
    return rows


def _row(task: str, entry: Mapping[str, Any], instruction: str) -> Dict[str, Any]:
    text = f"{entry['question']} {instruction}".strip()
    return {"prompt": [{"role": "user", "content": text}], "answer": str(entry["answer"]), "task": task,
            "task_entry": json.dumps(entry, default=str)}
