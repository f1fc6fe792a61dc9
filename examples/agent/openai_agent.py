"""An agent that owns its loop, written with the official `openai` client. It answers a question with a tool (`add`)
at hand, running every call the model makes; then a checker with a system prompt of its own (a context edit) sees
only the question and the answer and says whether it is right. Train it with `rollout.function: grpo_rollout.rollouts.agent:agent_rollout`
and `rollout.kwargs.agent: examples/agent/openai_agent.py:run` (docs/environments.md, "Agents as they are"): the
calls up to the answer become one training sequence, the check (which does not extend it) a second one."""

import json

from openai import OpenAI

TOOLS = [{"type": "function", "function": {
    "name": "add", "description": "Add two integers.",
    "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                   "required": ["a", "b"]}}}]


def add(a, b):
    return a + b


def run(base_url, api_key, model, prompt, answer=None, **row):
    """One episode. `prompt`, `answer` and the other keyword arguments are the dataset row's columns."""
    client = OpenAI(base_url=base_url, api_key=api_key)
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
    calls = 0
    for _ in range(3):  # the agent's own loop: the model answers or calls tools, whose results it reads
        reply = client.chat.completions.create(model=model, messages=messages, tools=TOOLS, max_tokens=12)
        calls += 1
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            break
        for call in message.tool_calls:
            try:
                result = add(**json.loads(call.function.arguments))
            except (TypeError, ValueError) as exc:
                result = f"Error: {exc}"
            messages.append({"role": "tool", "tool_call_id": call.id, "content": str(result)})
    text = message.content or ""
    # a context edit: a checker with a system prompt of its own sees the question and the answer, not the tool calls
    check = client.chat.completions.create(model=model, max_tokens=6, messages=[
        {"role": "system", "content": "You check answers."}, messages[0], {"role": "assistant", "content": text},
        {"role": "user", "content": "Is that right? Yes or no."}])
    calls += 1
    score = float(answer is not None and str(answer) in text)
    # what the reward functions get as `agent_result`
    return {"score": score, "answer": text, "check": check.choices[0].message.content, "calls": calls}
