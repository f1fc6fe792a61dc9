"""verifiers 0.4 tasksets (``verifiers.v1``, issue 41.2) through the recording endpoint: ``data.train:
verifiers:<taskset>`` rows, episodes played by verifiers with its interception layer forwarding to the endpoint, the
task's ``@vf.reward`` methods as the reward, a harness of the taskset's own (several calls, a context edit), errors
named, the legacy ``vf.Environment`` settings refused, and two training steps on a tiny model."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from grpo_rollout.rollouts.contract import EpisodeFailure, RolloutError

pytestmark = [pytest.mark.model]

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "verifiers_sums" / "sums_taskset.py"
ROLLOUT = "grpo_rollout.integrations.verifiers.verifiers:verifiers_rollout"

# A taskset of the test's own with its own harness: ask, then ask a checker on a fresh context (a context edit), and
# modes that misbehave (``how`` in the task data).
TASKSET = '''
import verifiers.v1 as vf
from openai import AsyncOpenAI
from verifiers.v1.types import content_text


class EchoData(vf.TaskData):
    how: str = "fine"


class EchoTask(vf.Task[EchoData]):
    @vf.reward(weight=2.0)
    async def said_yes(self, task, trace) -> float:
        if task.how == "reward_raises":
            raise ValueError("no score for you")
        return float("Yes" in (content_text(trace.last_message.content) or ""))


class EchoConfig(vf.TasksetConfig):
    hows: list = ["fine", "fine"]


class Echo(vf.Taskset[EchoTask, EchoConfig]):
    def load(self):
        for how in self.config.hows:
            yield EchoTask(EchoData(prompt="What is 2 + 3?", how=how), self.config.task)


class TwoCallsConfig(vf.HarnessConfig):
    pass


class TwoCalls(vf.Harness[TwoCallsConfig]):
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False

    async def launch(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data, **kw):
        if data.how == "harness_raises":
            raise KeyError("the harness broke")
        many = {"n": 2} if data.how == "two_answers" else {}
        async with AsyncOpenAI(base_url=endpoint, api_key=secret, max_retries=0) as client:
            first = await client.chat.completions.create(
                model=ctx.model, messages=[{"role": "user", "content": data.prompt}], **many)
            answer = first.choices[0].message.content
            if data.how == "raises_after_a_call":
                raise KeyError("after a call")
            for _ in range(1 if data.how != "endless" else 50):
                check = await client.chat.completions.create(model=ctx.model, messages=[
                    {"role": "system", "content": "You check answers."},
                    {"role": "user", "content": f"{data.prompt} {answer} Is that right?"}])
        return vf.ProgramResult(exit_code=0, stdout=check.choices[0].message.content or "", stderr="")


__all__ = ["Echo", "TwoCalls"]
'''


@pytest.fixture(scope="module")
def policy(tiny_model):
    from agent_helpers import load_policy

    return load_policy(tiny_model)


def _rows(spec, settings, base_dir=None):
    from grpo_rollout.data.verifiers_tasks import task_rows

    return task_rows(str(spec), settings, base_dir)


def _play(client, tokenizer, rows, n=2, **kwargs):
    from grpo_rollout.integrations.verifiers.verifiers import verifiers_rollout
    from grpo_rollout.rollouts.run_end import end_run

    try:
        return verifiers_rollout([r["prompt"] for r in rows], client=client, tokenizer=tokenizer, n=n, rows=rows,
                                 seed=3, **{"max_completion_length": 48, **kwargs})
    finally:
        end_run()


def _scripted(tokenizer):
    """A model that answers 5 to a sum, and Yes to a check."""
    from scripted_client import ScriptedClient

    return ScriptedClient(tokenizer, lambda prompt: ("Yes" if "Is that right?" in prompt else "5", True))


def test_an_installed_taskset_is_named_by_its_id(policy, tmp_path, monkeypatch):
    """A taskset installed as a package (``prime env install`` / ``vf-init``: the package my_env) is ``verifiers:my-env``."""
    _, tokenizer = policy
    (tmp_path / "my_env").mkdir()
    (tmp_path / "my_env" / "__init__.py").write_text(TASKSET)
    monkeypatch.syspath_prepend(str(tmp_path))
    from grpo_rollout.data import load_train_dataset

    rows = [dict(r) for r in load_train_dataset("verifiers:my-env", task_kwargs={"hows": ["fine"]})]
    assert [(r["verifiers_env"], r["verifiers_path"]) for r in rows] == [("my-env", "")]
    out = _play(_scripted(tokenizer), tokenizer, rows, n=1)
    assert out["agent_result"][0]["reward"] == 2.0 and out["verifiers/said_yes"] == [1.0]
    hub = [dict(r) for r in load_train_dataset("verifiers:someone/my-env@0.1", task_kwargs={"hows": ["fine"]})]
    assert hub[0]["verifiers_env"] == "someone/my-env@0.1"  # the Hub's owner/name@version: the package my_env
    assert _play(_scripted(tokenizer), tokenizer, hub, n=1)["agent_result"][0]["reward"] == 2.0


def test_the_example_taskset_as_rows_and_its_rewards(policy):
    _, tokenizer = policy
    rows = _rows(EXAMPLE.relative_to(REPO), {"num_tasks": 3}, REPO)
    assert len(rows) == 3 and {r["verifiers_env"] for r in rows} == {"sums_taskset"}
    assert rows[0]["prompt"][0] == {"role": "system", "content": "Answer with just the number."}
    assert json.loads(rows[0]["verifiers_taskset"]) == {"num_tasks": 3}
    answers = [json.loads(r["verifiers_task"])["answer"] for r in rows]
    out = _play(_scripted(tokenizer), tokenizer, rows)
    # the task's two rewards, weighted 1 and 0.2: "5" is short, and right where the sum is 5
    assert [r["reward"] for r in out["agent_result"]] == [1.2 if a == "5" else 0.2 for a in answers for _ in (0, 1)]
    assert out["agent_result"][0]["rewards"]["short_reply"] == 1.0 and out["verifiers/short_reply"] == [1.0] * 6
    five = tokenizer.encode("5", add_special_tokens=False)
    assert all(ids[:len(five)] == five and set(mask) == {1} for ids, mask in
               zip(out["completion_ids"], out["completion_mask"]))
    assert out["num_turns"] == [1] * 6 and out["segments"] == [[]] * 6 and out["end_reason"] == ["done"] * 6


def test_a_harness_of_the_tasksets_own_with_a_context_edit(policy, tmp_path):
    client, tokenizer = policy
    (tmp_path / "echo_taskset.py").write_text(TASKSET)
    rows = _rows(tmp_path / "echo_taskset.py", {})
    out = _play(_scripted(tokenizer), tokenizer, rows)
    # the checker's call does not continue the first: two sequences, the earlier one a segment
    assert out["num_turns"] == [2] * 4 and [len(s) for s in out["segments"]] == [1] * 4
    assert [r["reward"] for r in out["agent_result"]] == [2.0] * 4  # said_yes, weight 2
    assert tokenizer.decode(out["completion_ids"][0]).startswith("Yes")
    # on a real (tiny) model: sampled tokens with the sampler's log-probs, each call's weight version recorded
    out = _play(client, tokenizer, rows, n=1, max_turn_tokens=8)
    assert out["num_turns"] == [2, 2] and all(r is not None for r in out["agent_result"])
    assert all(len(ids) == len(lp) <= 8 for ids, lp in zip(out["completion_ids"], out["logprobs"]))
    assert [len(calls) for calls in out["call_weight_versions"]] == [2, 2]


def test_from_a_worker_thread_and_inside_a_running_event_loop(policy):
    """The rollout as the streaming trainer (a worker thread) and a notebook (a running event loop) call it: the same
    episodes; each sample its own seed."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    client, tokenizer = policy
    rows = _rows(EXAMPLE, {"num_tasks": 1})
    with ThreadPoolExecutor(1) as pool:
        threaded = pool.submit(_play, client, tokenizer, rows, 3, max_completion_length=8).result()

    async def in_a_loop():
        return _play(client, tokenizer, rows, 3, max_completion_length=8)

    assert asyncio.run(in_a_loop())["completion_ids"] == threaded["completion_ids"]
    assert len({tuple(ids) for ids in threaded["completion_ids"]}) == 3


@pytest.mark.parametrize("how, error, fragment", [
    ("harness_raises", RolloutError, r"HarnessError: harness 'echo_taskset': KeyError: 'the harness broke' \(at .*echo_taskset\.py:\d+ in launch\)"),
    ("two_answers", RolloutError, r"HarnessError: .*BadRequestError: .*chat completions require n=1.*in launch\)"),
    ("reward_raises", RolloutError, r"TaskError: .*ValueError: no score for you \(at .*echo_taskset\.py:\d+ in said_yes\)"),
])
def test_errors_in_the_users_code_are_named(policy, tmp_path, how, error, fragment):
    _, tokenizer = policy
    (tmp_path / "echo_taskset.py").write_text(TASKSET)
    with pytest.raises(error, match=fragment) as err:
        _play(_scripted(tokenizer), tokenizer, _rows(tmp_path / "echo_taskset.py", {"hows": [how]}), n=1)
    assert not isinstance(err.value, EpisodeFailure)  # a fault in the code: the run stops whatever rollout.on_error


def test_a_failed_episode_cancels_the_others_without_tracebacks(policy, tmp_path, caplog):
    """One episode's harness raises after a model call while the others are mid-episode: the run's error names it,
    and the others' cancelled interception servers print no traceback (a new user's --dry-run showed four)."""
    client, tokenizer = policy
    (tmp_path / "echo_taskset.py").write_text(TASKSET)
    with pytest.raises(RolloutError, match="KeyError: 'after a call'"):
        _play(client, tokenizer, _rows(tmp_path / "echo_taskset.py", {"hows": ["raises_after_a_call"] * 2}), n=3,
              max_turn_tokens=8)
    import gc
    import time

    gc.collect()
    time.sleep(0.5)  # the loop finalizes the closed generators
    said = [r for r in caplog.records if r.levelno >= logging.WARNING and r.name == "asyncio"]
    assert not said, [r.getMessage() for r in said]  # asyncio's handler would print them with their tracebacks


def test_a_model_server_error_is_a_failed_episode(policy, tmp_path):
    """The generation server failing (the endpoint answers 500, verifiers records a ProviderError) fails the episode:
    rollout.on_error decides."""
    _, tokenizer = policy

    class Broken:
        max_prompt_length, eos_ids = None, {tokenizer.eos_token_id}

        async def agenerate(self, prompt_ids, n=1, **kwargs):
            raise RuntimeError("the server went away")

    with pytest.raises(EpisodeFailure, match=r"verifiers episode of task 0 of taskset `sums_taskset` failed: ProviderError: upstream 500"):
        _play(Broken(), tokenizer, _rows(EXAMPLE, {"num_tasks": 1}), n=1)


def test_the_budget_ends_an_endless_harness(policy, tmp_path):
    client, tokenizer = policy
    (tmp_path / "echo_taskset.py").write_text(TASKSET)
    out = _play(client, tokenizer, _rows(tmp_path / "echo_taskset.py", {"hows": ["endless"]}), n=2,
                max_completion_length=30)
    total = [len(ids) + sum(len(s["completion_ids"]) for s in segs)
             for ids, segs in zip(out["completion_ids"], out["segments"])]
    assert all(t <= 30 for t in total) and out["truncated"] == [True, True]
    assert out["agent_result"] == [None, None]  # the budget ended it before verifiers scored


@pytest.mark.slow
def test_a_taskset_trains_two_steps_on_what_it_sampled(tmp_path, tiny_model):
    """Issue 41.2's acceptance on the tiny model: the example taskset trains 2 steps; the trained tokens are the
    sampled ones (|Δ log-prob| ≤ 1e-4), the reward is what verifiers scored."""
    from tiny_model import tiny_config

    from grpo_rollout.trainer import train
    from grpo_rollout.trainer.reporting.progress import RichReporter

    cfg = tiny_config(tmp_path, tiny_model, sampling={"num_generations": 2, "max_completion_length": 24,
                                                      "temperature": 1.0},
                      training={"max_steps": 2, "prompts_per_step": 2, "micro_batch_size": 4, "save_rollouts": "every"},
                      rollout={"function": ROLLOUT}, rewards=[],
                      data={"train": f"verifiers:{EXAMPLE}", "task_kwargs": {"num_tasks": 4}})
    result = train(cfg, base_dir=tmp_path, reporter=RichReporter(quiet=True))
    assert result.steps == 2
    records = [json.loads(x) for step in (1, 2)
               for x in (tmp_path / "out" / "rollouts" / f"step_{step}.jsonl").read_text().splitlines()]
    assert len(records) == 8 and all(r["rewards"]["verifiers"] == r["extras"]["agent_result"]["reward"]
                                      for r in records if r["extras"]["agent_result"] is not None)
    for m in result.history:
        assert m["no_signal_skipped"] or m["sampler/logprob_abs_diff"] <= 1e-4
        assert m["reward"] == pytest.approx(m["rewards/verifiers/mean"])
