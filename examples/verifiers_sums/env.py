"""A verifiers environment, written as for prime-rl (verifiers' classic ``vf.Environment`` API): add two numbers,
with a second try after a wrong answer. ``load_environment`` is what ``vf-install`` / the Environments Hub call;
``dataset`` hands the environment's own dataset to ``data.train`` (configs/verifiers_sums.yaml)."""

import random
import re

import verifiers as vf
from datasets import Dataset

SYSTEM_PROMPT = "Answer with just the number."


def _rows(num_examples: int, seed: int):
    rng = random.Random(seed)
    for _ in range(num_examples):
        a, b = rng.randint(1, 9), rng.randint(1, 9)
        yield {"question": f"What is {a} + {b}?", "answer": str(a + b)}


def _last_number(text: str):
    found = re.findall(r"-?\d+", text or "")
    return found[-1] if found else None


def _role(message):
    return message["role"] if isinstance(message, dict) else message.role


def _content(message):
    return (message["content"] if isinstance(message, dict) else message.content) or ""


class SecondTry(vf.MultiTurnEnv):
    """After a wrong answer the environment says so and the model answers again (``max_turns`` answers at most)."""

    async def env_response(self, messages, state, **kwargs):
        reply = _content(messages[-1]) if messages else ""
        if _last_number(reply) == state["answer"]:
            state["final_env_response"] = [vf.UserMessage(content="Correct.")]
            return state["final_env_response"]
        return [vf.UserMessage(content="That is not right. Try again: just the number.")]


def correct_answer(completion, answer, **kwargs) -> float:
    """1 when the model's last reply ends with the right number."""
    replies = [_content(m) for m in completion if _role(m) == "assistant"]
    return float(bool(replies) and _last_number(replies[-1]) == answer)


def short_reply(completion, **kwargs) -> float:
    """1 when every reply has at most 5 words."""
    replies = [_content(m) for m in completion if _role(m) == "assistant"]
    return float(bool(replies) and all(len(r.split()) <= 5 for r in replies))


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first number.
        b: the second number.
    """
    return a + b


def load_environment(num_examples: int = 64, max_turns: int = 2, seed: int = 0, tools: bool = False) -> vf.Environment:
    """The environment: ``max_turns`` 1 is single-turn, 2 (the default) gives a second try; ``tools`` offers the
    model an ``add`` tool instead (a ``vf.ToolEnv``: the server must parse tool calls, docs/environments.md)."""
    data = Dataset.from_list(list(_rows(num_examples, seed)))
    rubric = vf.Rubric(funcs=[correct_answer, short_reply], weights=[1.0, 0.2])
    if tools:
        return vf.ToolEnv(tools=[add], dataset=data, system_prompt=SYSTEM_PROMPT, rubric=rubric, max_turns=max_turns)
    if max_turns == 1:
        return vf.SingleTurnEnv(dataset=data, system_prompt=SYSTEM_PROMPT, rubric=rubric)
    return SecondTry(dataset=data, system_prompt=SYSTEM_PROMPT, rubric=rubric, max_turns=max_turns)


def dataset(num_examples: int = 64):
    """The environment's own dataset (columns prompt, answer, example_id, ...) as the training data."""
    return load_environment(num_examples).get_dataset()
