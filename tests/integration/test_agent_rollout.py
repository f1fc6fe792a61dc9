"""Agents as they are (issue 41): agents written with the official ``openai`` client, a plain ``httpx`` loop and the
OpenAI Agents SDK play through the recording endpoint (``grpo_rollout.rollouts.agent:agent_rollout``) on a tiny
model: calls that continue each other become one token sequence, a context edit starts another, sampled tokens are
trained with the sampler's log-probs, the return value is the reward's input; limits and refusals name the agent."""

from __future__ import annotations

import json
import re

import pytest

from agent_helpers import EXAMPLE, REWARD, load_policy, play as _play, write_agents
from grpo_rollout.rollouts.contract import RolloutError

pytestmark = [pytest.mark.model]


@pytest.fixture(scope="module")
def policy(tiny_model):
    return load_policy(tiny_model)


@pytest.mark.parametrize("function, stream", [("again", False), ("again", True), ("again_httpx", False)])
def test_calls_that_continue_each_other_become_one_sequence(policy, tmp_path, function, stream):
    rows = [{"prompt": "Count to 3.", "stream": stream}, {"prompt": "Hi", "stream": stream}]
    out = _play(policy, tmp_path, function, rows=rows)
    _, tokenizer = policy
    assert len(out["completion_ids"]) == 4 and out["num_turns"] == [2] * 4 and out["end_reason"] == ["done"] * 4
    assert out["segments"] == [[]] * 4
    for ids, mask, logprobs, starts in zip(out["completion_ids"], out["completion_mask"], out["logprobs"],
                                           out["turn_starts"]):
        second = starts[1]
        # 6 sampled tokens, the template's glue and the user's "Again." inserted (mask 0), 6 sampled again
        assert mask[:6] == [1] * 6 and mask[second:] == [1] * 6 and set(mask[6:second]) == {0}
        assert "Again." in tokenizer.decode(ids[6:second]) and all(lp <= 0 for lp in logprobs)
    # what the agent read (streamed or not) is what was recorded
    assert [r["text"] for r in out["agent_result"]] == out["final_response"]
    # a seed per episode: the two episodes of a prompt differ
    assert out["completion_ids"][0][:6] != out["completion_ids"][1][:6]


@pytest.mark.parametrize("function", ["run", "in_own_pool"])
def test_a_context_edit_starts_a_second_sequence(policy, tmp_path, function):
    out = _play(policy, tmp_path, function)
    _, tokenizer = policy
    assert out["num_turns"] == [2] * 4 and [r["calls"] for r in out["agent_result"]] == [2] * 4
    for ids, prompt, mask, segments, result in zip(out["completion_ids"], out["prompt_ids"], out["completion_mask"],
                                                   out["segments"], out["agent_result"]):
        [first] = segments  # the answer (the random model calls no tool), then the check on an edited context
        assert first["completion_mask"] == [1] * len(first["completion_ids"]) and 1 <= len(first["completion_ids"]) <= 12
        assert "Is that right?" in tokenizer.decode(prompt) and "Is that right?" not in tokenizer.decode(first["prompt_ids"])
        assert mask == [1] * len(ids) and len(ids) <= 6
        assert tokenizer.decode(ids, skip_special_tokens=True).strip() == (result["check"] or "").strip()


def test_an_agents_sdk_agent_plays_on_a_model(policy, tmp_path):
    out = _play(policy, tmp_path, "sdk_run")
    # the SDK asks for no max_tokens: on a random model a call may take the rest of the episode's budget
    assert all(1 <= t <= 3 for t in out["num_turns"]) and set(out["end_reason"]) <= {"done", "budget_turn"}
    assert [r["answer"].strip() for r in out["agent_result"]] == [t.strip() for t in out["final_response"]]


def test_a_deliberate_repeat_is_a_new_call(policy, tmp_path):
    """The same request sent twice on purpose, both answers read (issue 51: it was taken for a retry, and the answer
    the agent used was dropped while the one it discarded was trained): each is a call of its own, with a seed of
    its own; the first is a sequence of its own (the second request does not continue it), the third request
    continues the second answer."""
    out = _play(policy, tmp_path, "twice")
    assert out["num_turns"] == [3] * 4 and out["retried_calls"] == [0] * 4
    _, tokenizer = policy
    for result, [first], ids, mask in zip(out["agent_result"], out["segments"], out["completion_ids"],
                                          out["completion_mask"]):
        assert tokenizer.decode(first["completion_ids"], skip_special_tokens=True).strip() == result[0]["content"].strip()
        sampled = tokenizer.decode([t for t, m in zip(ids, mask) if m], skip_special_tokens=True)
        assert sampled.strip().startswith(result[1]["content"].strip()[:3])


def test_the_agents_sdks_provider_keeps_its_client_between_steps(policy, tmp_path):
    """The SDK's OpenAIProvider keeps one client for the process: on a fresh event loop per step its pooled
    connections were on the closed one, every later call was retried, and the lost answer trained as a context edit.
    The episodes run on one loop for the process's life."""
    from grpo_rollout.rollouts.agent import agent_rollout
    from grpo_rollout.rollouts.run_end import end_run

    write_agents(tmp_path)
    client, tokenizer = policy
    try:  # two steps of one run: the endpoint (its port, the SDK's pooled connection to it) stays between them
        for step in range(2):
            out = agent_rollout(["How many letters are in 'kiwi'?", "Hi"], client=client, tokenizer=tokenizer, n=2,
                                seed=step, agent="agent.py:sdk_provider", base_dir=str(tmp_path),
                                max_completion_length=64)
            assert out["segments"] == [[]] * 4, step
            assert out["retried_calls"] == [0] * 4, step
    finally:
        end_run()


def test_an_async_agent_and_the_budget_ending_an_endless_one(policy, tmp_path):
    out = _play(policy, tmp_path, "run_async")
    assert out["num_turns"] == [1] * 4 and [r["text"] for r in out["agent_result"]] == out["final_response"]
    out = _play(policy, tmp_path, "endless", max_completion_length=40)
    assert all(len(ids) <= 40 for ids in out["completion_ids"]) and out["truncated"] == [True] * 4
    assert set(out["end_reason"]) <= {"budget_turn", "budget_reply"} and out["agent_result"] == [None] * 4


def test_an_episode_past_its_time_fails_naming_the_agent(policy, tmp_path):
    from grpo_rollout.rollouts.env_timeouts import EnvTimeout

    with pytest.raises(EnvTimeout, match=r"the agent slow \(defined at .*agent\.py:\d+\) did not return within "
                                         r"rollout.env_timeout_s = 1 s"):
        _play(policy, tmp_path, "slow", env_timeout_s=1.0)


@pytest.mark.parametrize("how, fragment", [
    ("model", "model 'gpt-5' is not this run's policy: send model='policy'"),
    ("n", "n=2: one completion per request"),
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
                               "kwargs": {"agent": "agent.py:scored"}})
    write_agents(tmp_path)
    result = train(cfg, base_dir=tmp_path, reporter=RichReporter(quiet=True))
    assert result.steps == 2
    # the trainer's log-probs of the sampled tokens equal the sampler's
    assert all(m["sampler/logprob_abs_diff"] <= 1e-4 for m in result.history), result.history
    records = [json.loads(x) for step in (1, 2)
               for x in (tmp_path / "out" / "rollouts" / f"step_{step}.jsonl").read_text().splitlines()]
    assert len(records) == 2 * 2 * 2 and all(r["reward"] == r["extras"]["agent_result"]["score"] for r in records), records[0]
    # each episode: the answer, then the checker's call on an edited context; both sequences trained
    assert all(len(r["segments"]) == 1 for r in records)
    trained = [r["completion_mask"].count("1") + r["segments"][0]["completion_mask"].count("1") for r in records]
    assert [m["num_tokens"] for m in result.history] == [sum(trained[:4]), sum(trained[4:])]
    for sequence in [r for r in records] + [r["segments"][0] for r in records]:
        assert all(abs(a - b) <= 1e-3 for a, b in zip(sequence["sampler_logprobs"], sequence["trainer_logprobs"])
                   if a is not None)
    # grpo-rollout inspect shows the earlier sequence too (--segment)
    from grpo_rollout.views.inspect import load_sample, summary_line

    last, earlier = load_sample(tmp_path / "out", 2, 0), load_sample(tmp_path / "out", 2, 0, segment=0)
    assert "the last of 2 sequences (a context edit): --segment 0-0" in summary_line(last)
    assert [t.id for t in earlier.tokens] == records[4]["segments"][0]["completion_ids"]
    assert "earlier sequence 0 of 1" in summary_line(earlier) and "Is that right?" not in earlier.prompt_text
    with pytest.raises(IndexError, match="has 1 earlier sequences: --segment must be 0-0"):
        load_sample(tmp_path / "out", 2, 0, segment=1)


def test_the_dry_run_shows_an_episodes_earlier_sequences(tmp_path, tiny_model):
    """validate-config --dry-run on an agent with a context edit: the panel says the episode had an earlier sequence
    and what of it is trained."""
    from rich.console import Console
    from tiny_model import tiny_config

    from grpo_rollout.cli.dry_run_cmd import run_dry_run

    cfg = tiny_config(tmp_path, tiny_model, rewards_source=REWARD, reward="agent_score",
                      sampling={"num_generations": 2, "max_completion_length": 40},
                      rollout={"function": "grpo_rollout.rollouts.agent:agent_rollout",
                               "kwargs": {"agent": "agent.py:scored"}})
    write_agents(tmp_path)
    console = Console(record=True, width=200)
    assert run_dry_run(console, cfg, tmp_path) == 0
    shown = console.export_text()
    assert "earlier sequences of this episode (a context edit; trained too): " in shown
    assert re.search(r"trained too\): \d+ tokens \([1-9]\d* trained\)", shown), shown


def test_validate_config_checks_the_agent(tmp_path):
    from grpo_rollout.rollouts.agent.agent_rollout import validate_kwargs

    assert validate_kwargs({"agent": f"{EXAMPLE}:run"}) == []
    [(key, message, fix)] = validate_kwargs({"agent": "openai_agent.py:walk"}, base_dir=EXAMPLE.parent)
    assert key == "rollout.kwargs.agent" and "walk" in message and fix.startswith("agent: my_agent.py:run")
    assert validate_kwargs({})[0][:2] == ("rollout.kwargs.agent", "no agent function configured")
    assert [p[0] for p in validate_kwargs({"agent": f"{EXAMPLE}:run", "max_turns": 3})] == ["rollout.kwargs.max_turns"]
    assert [p[0] for p in validate_kwargs({"agent": f"{EXAMPLE}:run", "tool_prompt": "xml"})] == [
        "rollout.kwargs.tool_prompt"]
