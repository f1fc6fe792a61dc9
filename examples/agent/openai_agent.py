"""An agent that owns its loop, written with the official `openai` client: it answers, is asked again, answers
again, and returns a score. Train it with `rollout.function: grpo_rollout.rollouts.agent:agent_rollout` and
`rollout.kwargs.agent: examples/agent/openai_agent.py:run` (docs/environments.md, "Agents as they are")."""

from openai import OpenAI


def run(base_url, api_key, model, prompt, **row):
    """One episode. `prompt` and the other keyword arguments are the dataset row's columns."""
    client = OpenAI(base_url=base_url, api_key=api_key)
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
    first = client.chat.completions.create(model=model, messages=messages, max_tokens=6)
    messages.append(first.choices[0].message.model_dump(exclude_none=True))
    messages.append({"role": "user", "content": "Again."})
    second = client.chat.completions.create(model=model, messages=messages, max_tokens=6)
    text = second.choices[0].message.content or ""
    return {"score": (len(text) % 5) / 4, "calls": 2}  # what the reward function gets as `agent_result`
