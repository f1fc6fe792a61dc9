"""A scripted stand-in for the vLLM server's ``/v1/chat/completions`` route, for verifiers environments played without
one: :class:`ScriptedServer` renders chat messages to token ids (a role id, one id per character, an end id) and
answers every turn with ``answer_len`` tokens (``x`` … then the end id) or fewer when ``max_tokens`` is smaller, with
the token ids and log-probs vLLM returns for ``return_token_ids`` and ``logprobs``."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Dict, List

ROLES = {"system": 1, "user": 2, "assistant": 3, "tool": 4}
END, X = 9, 120  # the end-of-turn id; the id of "x"


def render(messages: List[Dict[str, Any]]) -> List[int]:
    """Chat messages as the scripted server's template renders them, with the generation prompt."""
    ids: List[int] = []
    for m in messages:
        ids += [ROLES[m["role"]]] + [ord(c) for c in (m.get("content") or "")] + [END]
    return ids + [ROLES["assistant"]]


class ScriptedServer:
    """Answers each request with ``answer_len`` tokens at most (its own ``max_tokens`` cuts it, finish ``length``);
    ``requests`` keeps each request's ``max_tokens`` and prompt length."""

    def __init__(self, answer_len: int):
        self.answer_len, self.requests = answer_len, []

    def install(self, monkeypatch: Any) -> SimpleNamespace:
        """Answer through every verifiers chat client; the run's generation client and served model stubbed: the
        client :func:`~grpo_rollout.integrations.verifiers.verifiers.verifiers_rollout` takes."""
        from openai.types.chat import ChatCompletion
        from verifiers.clients import OpenAIChatCompletionsClient

        from grpo_rollout.integrations.verifiers import verifiers as adapter

        server = self

        async def answer(client, prompt, model, sampling_args, tools=None, **kwargs):
            limit = int(sampling_args["max_tokens"])
            prompt_ids = render(prompt)
            server.requests.append((limit, len(prompt_ids)))
            whole = [X] * (server.answer_len - 1) + [END]
            ids = whole[:limit]
            return ChatCompletion.model_validate({
                "id": "x", "object": "chat.completion", "created": 0, "model": model, "prompt_token_ids": prompt_ids,
                "choices": [{"index": 0, "finish_reason": "stop" if ids == whole else "length", "token_ids": ids,
                             "message": {"role": "assistant", "content": "x" * ids.count(X)},
                             "logprobs": {"content": [{"token": "x", "logprob": -0.5, "bytes": None,
                                                       "top_logprobs": []} for _ in ids]}}]})

        monkeypatch.setattr(OpenAIChatCompletionsClient, "get_native_response", answer)
        monkeypatch.setattr(adapter, "served_model", lambda url, key: "scripted")
        return SimpleNamespace(url="http://127.0.0.1:9")


#: An environment module (``project.module(ENV_SOURCE)``): ``turns`` turns, the environment answering ``more`` after
#: each; the rubric's ``answered`` pays 1.0 for the first turn and 0.75 for each later one (2.5 for three), and
#: ``broken`` divides by zero when ``broken=True``.
ENV_SOURCE = '''
import verifiers as vf
from datasets import Dataset


class Turns(vf.MultiTurnEnv):
    async def env_response(self, messages, state, **kwargs):
        return [vf.UserMessage(content="more")]


def answered(state):
    return 1.0 + 0.75 * (len(state["trajectory"]) - 1)


def broken(state):
    return len(state["trajectory"]) / 0.0


async def judged(answer):
    if answer == "judge-down":
        raise vf.InfraError("the judge's server is gone")
    return 1.0


def load_environment(turns=3, rubric="answered"):
    funcs = [globals()[name] for name in rubric.split(",")]
    return Turns(dataset=Dataset.from_list([{"question": "q", "answer": "a"}]), rubric=vf.Rubric(funcs=funcs),
                 max_turns=turns)
'''


def rows(*answers: str) -> List[Dict[str, Any]]:
    """One dataset row per answer, each with the prompt ``go``."""
    return [{"prompt": [{"role": "user", "content": "go"}], "answer": a} for a in answers]
