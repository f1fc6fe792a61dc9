"""Agents as they are (issue 41): an agent written with the official ``openai`` client trains through the recording
endpoint (``grpo_rollout.rollouts.agent:agent_rollout``): its calls become one token sequence, sampled tokens
trained with the sampler's log-probs, its return value the reward's input; refusals name the reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grpo_rollout.rollouts.contract import RolloutError

pytestmark = [pytest.mark.model]
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "agent" / "openai_agent.py"

AGENT = '''
from concurrent.futures import ThreadPoolExecutor
from openai import OpenAI


def _as_messages(prompt):
    return [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)


from openai_agent import run  # examples/agent/openai_agent.py: the documented example


def in_own_pool(base_url, api_key, model, prompt, **row):
    """The same agent, its calls made from a thread pool of its own."""
    with ThreadPoolExecutor(2) as pool:
        return pool.submit(run, base_url, api_key, model, prompt).result()


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


def bad(base_url, api_key, model, prompt, how, **row):
    client = OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    messages = _as_messages(prompt)
    if how == "model":
        return client.chat.completions.create(model="gpt-5", messages=messages)
    if how == "n":
        return client.chat.completions.create(model=model, messages=messages, n=2)
    if how == "stream":
        return client.chat.completions.create(model=model, messages=messages, stream=True)
    client.chat.completions.create(model=model, messages=messages, max_tokens=4)
    return client.chat.completions.create(model=model, messages=[{"role": "user", "content": "edited"}])


def silent(base_url, api_key, model, prompt, **row):
    return 0
'''

REWARD = '''
def agent_score(completions, agent_result, **kwargs):
    return [r["score"] for r in agent_result]
'''


@pytest.fixture(scope="module")
def policy(tiny_model):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from grpo_rollout.generation.transformers_client import TransformersClient

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    return TransformersClient(AutoModelForCausalLM.from_pretrained(tiny_model), tokenizer), tokenizer


def _play(policy, tmp_path: Path, function: str, rows=None, **kwargs):
    from grpo_rollout.rollouts.agent import agent_rollout
    from grpo_rollout.rollouts.run_end import end_run

    (tmp_path / "agent.py").write_text(AGENT)
    (tmp_path / "openai_agent.py").write_text(EXAMPLE.read_text())
    client, tokenizer = policy
    try:
        return agent_rollout(["Count to 3.", [{"role": "user", "content": "Hi"}]], client=client, tokenizer=tokenizer,
                             n=2, agent=f"agent.py:{function}", base_dir=str(tmp_path), rows=rows, seed=5,
                             **{"max_completion_length": 64, **kwargs})
    finally:
        end_run()


@pytest.mark.parametrize("function", ["run", "in_own_pool"])
def test_two_calls_become_one_sequence_of_sampled_and_inserted_tokens(policy, tmp_path, function):
    out = _play(policy, tmp_path, function)
    _, tokenizer = policy
    assert len(out["completion_ids"]) == 4 and out["num_turns"] == [2] * 4 and out["end_reason"] == ["done"] * 4
    for ids, mask, logprobs, starts in zip(out["completion_ids"], out["completion_mask"], out["logprobs"],
                                           out["turn_starts"]):
        second = starts[1]
        # 6 sampled tokens, the template's glue and the user's "Again." inserted (mask 0), 6 sampled again
        assert mask[:6] == [1] * 6 and mask[second:] == [1] * 6 and set(mask[6:second]) == {0}
        assert "Again." in tokenizer.decode(ids[6:second]) and all(lp <= 0 for lp in logprobs)
    assert [r["calls"] for r in out["agent_result"]] == [2] * 4
    # a seed per episode: the two episodes of a prompt differ
    assert out["completion_ids"][0][:6] != out["completion_ids"][1][:6]


def test_an_async_agent_and_the_budget_ending_an_endless_one(policy, tmp_path):
    out = _play(policy, tmp_path, "run_async")
    assert out["num_turns"] == [1] * 4 and [r["text"] for r in out["agent_result"]] == out["final_response"]
    out = _play(policy, tmp_path, "endless", max_completion_length=40)
    assert all(len(ids) <= 40 for ids in out["completion_ids"]) and out["truncated"] == [True] * 4
    assert set(out["end_reason"]) <= {"budget_turn", "budget_reply"} and out["agent_result"] == [None] * 4


@pytest.mark.parametrize("how, fragment", [
    ("model", "model 'gpt-5' is not this run's policy: send model='policy'"),
    ("n", "n=2: one completion per request"),
    ("stream", "stream=true is not supported yet"),
    ("edit", "message 0 differs from what was sent before"),
])
def test_requests_it_cannot_record_are_refused_naming_the_agent(policy, tmp_path, how, fragment):
    rows = [{"prompt": "Count to 3.", "how": how}, {"prompt": "Hi", "how": how}]
    with pytest.raises(RolloutError, match=r"the agent bad \(defined at .*agent\.py:\d+\) raised") as err:
        _play(policy, tmp_path, "bad", rows=rows)
    assert fragment in str(err.value)


def test_an_agent_that_never_calls_the_model_is_named(policy, tmp_path):
    with pytest.raises(RolloutError, match="the agent silent .* made no chat call in episode 0"):
        _play(policy, tmp_path, "silent")


@pytest.mark.slow
def test_an_openai_client_agent_trains_two_steps_on_what_it_sampled(tmp_path, tiny_model):
    from tiny_model import tiny_config

    from grpo_rollout.trainer import train
    from grpo_rollout.trainer.reporting.progress import RichReporter

    cfg = tiny_config(tmp_path, tiny_model, rewards_source=REWARD, reward="agent_score",
                      sampling={"num_generations": 2, "max_completion_length": 40, "temperature": 1.0},
                      training={"max_steps": 2, "prompts_per_step": 2, "micro_batch_size": 4, "save_rollouts": "every"},
                      rollout={"function": "grpo_rollout.rollouts.agent:agent_rollout",
                               "kwargs": {"agent": f"{EXAMPLE}:run"}})
    result = train(cfg, base_dir=tmp_path, reporter=RichReporter(quiet=True))
    assert result.steps == 2
    # the trainer's log-probs of the sampled tokens equal the sampler's
    assert all(m["sampler/logprob_abs_diff"] <= 1e-4 for m in result.history), result.history
    records = [json.loads(x) for step in (1, 2)
               for x in (tmp_path / "out" / "rollouts" / f"step_{step}.jsonl").read_text().splitlines()]
    assert len(records) == 2 * 2 * 2 and all(r["reward"] == r["extras"]["agent_result"]["score"] for r in records), records[0]


def test_validate_config_checks_the_agent(tmp_path):
    from grpo_rollout.rollouts.agent.agent_rollout import validate_kwargs

    assert validate_kwargs({"agent": f"{EXAMPLE}:run"}) == []
    [(key, message, fix)] = validate_kwargs({"agent": "openai_agent.py:walk"}, base_dir=EXAMPLE.parent)
    assert key == "rollout.kwargs.agent" and "walk" in message and fix.startswith("agent: my_agent.py:run")
    assert validate_kwargs({})[0][:2] == ("rollout.kwargs.agent", "no agent function configured")
    assert [p[0] for p in validate_kwargs({"agent": f"{EXAMPLE}:run", "max_turns": 3})] == ["rollout.kwargs.max_turns"]
