"""An agent written with the OpenAI Agents SDK (`pip install openai-agents`), trained as it is: the SDK's loop calls
the policy through `base_url` (chat completions) and runs the `add` tool when the model calls it.
`rollout.kwargs.agent: examples/agent/agents_sdk_agent.py:run` (docs/environments.md, "Agents as they are")."""

from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
from openai import AsyncOpenAI

set_tracing_disabled(True)  # the SDK would otherwise send its traces to OpenAI


@function_tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


async def run(base_url, api_key, model, prompt, answer=None, **row):
    """One episode: the SDK's agent loop, at most 3 model calls. Returns what the rewards get as `agent_result`."""
    async with AsyncOpenAI(base_url=base_url, api_key=api_key) as client:
        policy = OpenAIChatCompletionsModel(model=model, openai_client=client)
        agent = Agent(name="solver", instructions="Answer in a few words. Use add for sums.", tools=[add], model=policy)
        result = await Runner.run(agent, prompt, max_turns=3)
    text = str(result.final_output)
    return {"score": float(answer is not None and str(answer) in text), "answer": text}
