"""Agents for the tests of the recording endpoint (issue 41): the agent functions a test plays (written to the test's
folder as agent.py beside the two documented examples), and playing them through ``agent_rollout``."""

from __future__ import annotations

from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "agent" / "openai_agent.py"
SDK_EXAMPLE = EXAMPLE.with_name("agents_sdk_agent.py")

AGENT = '''
import time
from concurrent.futures import ThreadPoolExecutor
from openai import OpenAI


def _as_messages(prompt):
    return [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)


from openai_agent import run  # examples/agent/openai_agent.py: the documented example
from agents_sdk_agent import run as sdk_run  # examples/agent/agents_sdk_agent.py: the OpenAI Agents SDK's


def again(base_url, api_key, model, prompt, stream=False, **row):
    """Answer, be asked again, answer again: one sequence (each request continues the one before)."""
    client = OpenAI(base_url=base_url, api_key=api_key)
    messages, texts = _as_messages(prompt), []
    for _ in range(2):
        if stream:
            chunks = list(client.chat.completions.create(model=model, messages=messages, max_tokens=6, stream=True,
                                                         stream_options={"include_usage": True}))
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            assert chunks[-1].usage.completion_tokens >= 1 and chunks[-2].choices[0].finish_reason
        else:
            text = client.chat.completions.create(model=model, messages=messages, max_tokens=6).choices[0].message.content
        texts.append(text)
        messages += [{"role": "assistant", "content": text}, {"role": "user", "content": "Again."}]
    return {"score": 1.0, "calls": 2, "text": texts[-1]}


def again_httpx(base_url, api_key, model, prompt, stream=False, **row):
    """The same with a plain httpx loop (no OpenAI client)."""
    import httpx
    messages, text = _as_messages(prompt), ""
    for _ in range(2):
        answer = httpx.post(f"{base_url}/chat/completions", timeout=60, headers={"Authorization": f"Bearer {api_key}"},
                            json={"model": model, "messages": messages, "max_tokens": 6}).json()
        text = answer["choices"][0]["message"]["content"]
        messages += [{"role": "assistant", "content": text}, {"role": "user", "content": "Again."}]
    return {"score": 1.0, "calls": 2, "text": text}


def in_own_pool(base_url, api_key, model, prompt, **row):
    """The example agent, its calls made from a thread pool of its own."""
    with ThreadPoolExecutor(2) as pool:
        return pool.submit(run, base_url, api_key, model, prompt).result()


def scored(**kwargs):
    """The example agent with a score that varies on a random model (so every step has a learning signal)."""
    result = run(**kwargs)
    return dict(result, score=(len(result["answer"]) % 5) / 4)


async def run_async(base_url, api_key, model, prompt, **row):
    from openai import AsyncOpenAI
    client = AsyncOpenAI(base_url=base_url, api_key=api_key)
    answer = await client.chat.completions.create(model=model, messages=_as_messages(prompt), max_tokens=4)
    return {"score": 1.0, "calls": 1, "text": answer.choices[0].message.content}


def endless(base_url, api_key, model, prompt, **row):
    client = OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    messages = _as_messages(prompt)
    while True:
        answer = client.chat.completions.create(model=model, messages=messages, max_tokens=6)
        messages += [answer.choices[0].message.model_dump(exclude_none=True), {"role": "user", "content": "More."}]


def slow(base_url, api_key, model, prompt, **row):
    OpenAI(base_url=base_url, api_key=api_key).chat.completions.create(model=model, messages=_as_messages(prompt),
                                                                       max_tokens=2)
    time.sleep(30)


def bad(base_url, api_key, model, prompt, how, **row):
    client = OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    messages = _as_messages(prompt)
    if how == "model":
        return client.chat.completions.create(model="gpt-5", messages=messages)
    return client.chat.completions.create(model=model, messages=messages, n=2)


def text_agent(base_url, api_key, model, prompt, **row):
    """The completions route: a prompt that extends the last one continues its sequence; another starts one."""
    client = OpenAI(base_url=base_url, api_key=api_key)
    text = f"Question: {prompt}\\nAnswer:"
    first = client.completions.create(model=model, prompt=text, max_tokens=5).choices[0].text
    text += first + "\\nQuestion: And again?\\nAnswer:"
    chunks = list(client.completions.create(model=model, prompt=text, max_tokens=5, stream=True))
    second = "".join(c.choices[0].text for c in chunks if c.choices)
    third = client.completions.create(model=model, prompt="Summary:", max_tokens=3).choices[0].text
    return {"score": 1.0, "texts": [first, second, third]}


def silent(base_url, api_key, model, prompt, **row):
    return 0


async def sdk_provider(base_url, api_key, model, prompt, **row):
    """The Agents SDK as its docs configure it: a RunConfig with an OpenAIProvider, whose client the SDK keeps
    between episodes (a new user's input: each later step's calls were retried and recorded twice)."""
    from agents import Agent, ModelSettings, RunConfig, Runner
    from agents.models.openai_provider import OpenAIProvider
    from agents_sdk_agent import add

    config = RunConfig(model=model, model_provider=OpenAIProvider(base_url=base_url, api_key=api_key))
    agent = Agent(name="solver", instructions="Use add for sums.", tools=[add], model_settings=ModelSettings(max_tokens=12))
    result = await Runner.run(agent, prompt, max_turns=3, run_config=config)
    return {"answer": str(result.final_output)}


def twice(base_url, api_key, model, prompt, **row):
    """The same request twice on purpose (both answers reach the agent), then a turn that continues the second
    answer; returns the three answers."""
    import httpx
    post = lambda body: httpx.post(f"{base_url}/chat/completions", json=body, timeout=60,
                                   headers={"Authorization": f"Bearer {api_key}"}).json()["choices"][0]["message"]
    body = {"model": model, "messages": _as_messages(prompt), "max_tokens": 4}
    first, answer = post(body), post(body)
    body["messages"] = body["messages"] + [answer, {"role": "user", "content": "Again."}]
    return [first, answer, post(body)]


def react(base_url, api_key, model, prompt, **row):
    """A ReAct loop as LangChain's classic agents write it: the model stops at "Observation:", the agent runs the
    action and writes the observation (what the model would have made up) as the next user turn."""
    client = OpenAI(base_url=base_url, api_key=api_key)
    messages, seen = _as_messages(prompt), []
    for _ in range(2):
        text = client.chat.completions.create(model=model, messages=messages, stop=["Observation:"]).choices[0].message.content
        seen.append(text)
        messages += [{"role": "assistant", "content": text}, {"role": "user", "content": "Observation: 5"}]
    return {"seen": seen}


async def sdk_responses(base_url, api_key, model, prompt, stream=False, **row):
    """The Agents SDK with its default model, the Responses API (streamed with ``stream``), and the example's tool."""
    from agents import Agent, OpenAIResponsesModel, Runner
    from openai import AsyncOpenAI
    from agents_sdk_agent import add

    async with AsyncOpenAI(base_url=base_url, api_key=api_key) as client:
        agent = Agent(name="solver", instructions="Use add for sums.", tools=[add],
                      model=OpenAIResponsesModel(model=model, openai_client=client))
        if stream:
            result = Runner.run_streamed(agent, prompt, max_turns=3)
            async for _ in result.stream_events():
                pass
        else:
            result = await Runner.run(agent, prompt, max_turns=3)
    return {"answer": str(result.final_output)}
'''

REWARD = '''
def agent_score(completions, agent_result, **kwargs):
    return [r["score"] for r in agent_result]
'''



def load_policy(tiny_model: Path):
    """A transformers client on the tiny model, and its tokenizer."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from grpo_rollout.generation.transformers_client import TransformersClient

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    return TransformersClient(AutoModelForCausalLM.from_pretrained(tiny_model), tokenizer), tokenizer


def write_agents(folder: Path) -> None:
    """``agent.py`` (:data:`AGENT`) and the two examples it imports, in ``folder``."""
    (folder / "agent.py").write_text(AGENT)
    (folder / "openai_agent.py").write_text(EXAMPLE.read_text())
    (folder / "agents_sdk_agent.py").write_text(SDK_EXAMPLE.read_text())


def play(policy, tmp_path: Path, function: str, rows=None, **kwargs):
    """``agent_rollout`` of ``agent.py:<function>`` with ``policy`` (client, tokenizer): by default 2 prompts × 2
    episodes, 64 tokens each; ``kwargs`` override (``prompts``, ``n``, sampling settings)."""
    from grpo_rollout.rollouts.agent import agent_rollout
    from grpo_rollout.rollouts.run_end import end_run

    write_agents(tmp_path)
    client, tokenizer = policy
    settings = {"prompts": ["Count to 3.", [{"role": "user", "content": "Hi"}]], "n": 2, "max_completion_length": 64,
                **kwargs}
    try:
        return agent_rollout(settings.pop("prompts"), client=client, tokenizer=tokenizer, agent=f"agent.py:{function}",
                             base_dir=str(tmp_path), rows=rows, seed=5, **settings)
    finally:
        end_run()


def scripted(tokenizer):
    """A model that calls add(2, 3), answers 5 once the tool has answered, and says Yes when asked to check."""
    from scripted_client import ScriptedClient

    def reply(prompt):
        if "Is that right?" in prompt:
            return "Yes", True
        if "5" in prompt.rsplit("assistant", 1)[0].rsplit("What is 2 + 3?", 1)[-1]:  # the tool has answered
            return "5", True
        return '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>', True

    return ScriptedClient(tokenizer, reply)
