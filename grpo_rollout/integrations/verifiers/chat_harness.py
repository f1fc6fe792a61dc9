"""The harness a verifiers taskset plays under when it ships none: one chat call, in this process.

verifiers' own chat loops (``null``, ``bash``) are PEP 723 scripts that ``uv`` installs and runs in a runtime box; this
one asks the interception endpoint once, from the training process, with the task's system prompt and prompt, and
the answer ends the episode (what a single-turn taskset wants). A taskset that needs tools or several turns names its
own harness (its package exports one) or ``rollout.kwargs.harness``. verifiers finds a harness by a top-level module
name (its id, ``-`` for ``_``), so this module is also registered as ``grpo_rollout_chat`` (id :data:`HARNESS_ID`).
"""

from __future__ import annotations

import sys
from typing import Any

import verifiers.v1 as vf

#: This harness's id for verifiers (``harness.id``); verifiers imports it as the module ``grpo_rollout_chat``.
HARNESS_ID = "grpo-rollout-chat"
sys.modules.setdefault("grpo_rollout_chat", sys.modules[__name__])


class ChatHarnessConfig(vf.HarnessConfig):
    """No settings: the run's sampling settings and token budget apply to the call."""


class ChatHarness(vf.Harness[ChatHarnessConfig]):
    """One ``chat/completions`` call through the episode's interception endpoint (verifiers records it on the trace,
    the training endpoint behind it records its tokens)."""

    APPENDS_SYSTEM_PROMPT = True
    SUPPORTS_RESUME = True
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False

    async def launch(self, ctx: Any, trace: Any, runtime: Any, endpoint: str, secret: str,
                     mcp_urls: dict, data: Any, **_: Any) -> vf.ProgramResult:
        from openai import AsyncOpenAI

        system, prompt = self.resolve_prompt(data)
        messages = [{"role": "system", "content": system}] if system else []
        if isinstance(prompt, str):
            messages.append({"role": "user", "content": prompt})
        elif prompt is not None:
            messages += [m.model_dump(exclude_none=True) for m in prompt]
        async with AsyncOpenAI(base_url=endpoint, api_key=secret, max_retries=0) as client:
            answer = await client.chat.completions.create(model=ctx.model, messages=messages)
        return vf.ProgramResult(exit_code=0, stdout=answer.choices[0].message.content or "", stderr="")


__all__ = ["ChatHarness"]
