"""A reasoning-gym task's own scorer (``reasoning_gym.get_score_answer_fn``) as a reward, for rows from a
``reasoning_gym:<task>`` source (:mod:`grpo_rollout.data.reasoning_gym`).

Use it by dotted path: ``rewards: [{function: grpo_rollout.rewards.tasks:reasoning_gym_score}]``.
"""

from __future__ import annotations

import json
from typing import Any, List, Sequence

from .library import completion_text


def reasoning_gym_score(completions: Sequence[Any], task_entry: Sequence[str], **kwargs: Any) -> List[float]:
    """The task's own score (0.0 to 1.0) of each completion's answer: the text inside ``<answer>...</answer>``
    when there is one (reasoning-gym's convention), else what follows the last ``=`` (``5 - 3 = 2``), else the
    whole completion; stripped, and one candidate only (scoring several and keeping the best would reward a list of
    guesses).

    Args:
        completions: ``N`` completions. task_entry: ``N`` reasoning-gym entries as JSON (the ``task_entry`` column
            a ``reasoning_gym:<task>`` source makes).
    """
    import reasoning_gym
    from reasoning_gym.utils import extract_answer

    scores = []
    for completion, raw in zip(completions, task_entry):
        entry = json.loads(raw)
        text = completion_text(completion)
        answer = extract_answer(text) if "<answer>" in text else text.rsplit("=", 1)[-1].strip()
        score = reasoning_gym.get_score_answer_fn(entry["metadata"]["source_dataset"])(answer or "", entry)
        scores.append(float(score))
    return scores
