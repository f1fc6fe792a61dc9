"""A generation client that answers from a script instead of a model: for tests of multi-turn rollouts whose point is
what the rollout does with the answers (tools, environments), not the sampling."""

from __future__ import annotations

from typing import Callable, Tuple

from grpo_rollout.generation.base import GenerationResult


class ScriptedClient:
    """Answers each request with ``reply(prompt_text)``: ``(text, ends)``, the text's token ids (the real tokenizer's)
    followed by the end-of-turn token when ``ends``; every sample of a prompt gets the same answer, log-prob -0.5 per
    token."""

    max_prompt_length = None

    def __init__(self, tokenizer, reply: Callable[[str], Tuple[str, bool]]):
        self.tokenizer, self.reply, self.eos_ids = tokenizer, reply, {tokenizer.eos_token_id}

    async def agenerate(self, prompt_ids, n=1, **kwargs):
        completions = []
        for ids in prompt_ids:
            text, ends = self.reply(self.tokenizer.decode(ids))
            tokens = self.tokenizer.encode(text, add_special_tokens=False)
            completions += [tokens + ([self.tokenizer.eos_token_id] if ends else [])] * n
        return GenerationResult([list(p) for p in prompt_ids], completions, [[-0.5] * len(c) for c in completions],
                                ["stop"] * len(completions))
