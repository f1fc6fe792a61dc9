"""Issue 51.8: one episode that failed outside the model (`rollout.on_error: retry`) made the trainer play every group
of the step again: a stuck agent timed out twice per step. Now the built-in multi-turn rollouts and agent_rollout keep
the groups that finished and only the failed episode's group is played again, in a rollout call of its own; a bug in
one episode still stops the run at once. Played through the trainer's rollout stage (a step of 3 prompts × 2
episodes, a scripted model), counting the rollout's calls and each prompt's episodes."""

from __future__ import annotations

import pytest

from grpo_rollout.rollouts.contract import EpisodeFailure, RolloutError
from grpo_rollout.runs.failure_records import read_failures
from scripted_client import ScriptedClient
from tiny_model import tiny_config

pytestmark = pytest.mark.model

PROMPTS = ["Count to 0.", "Count to 1.", "Count to 2."]
ROLLOUT = '''
import threading
import time

from openai import OpenAI

from grpo_rollout.rollouts.agent import agent_rollout
from grpo_rollout.rollouts.environment import environment_rollout

CALLS, EPISODES, FAILED, LOCK = [], [], [], threading.Lock()


def fail_once(prompt):
    """The first episode of "Count to 1." fails, as HOW says: hangs past env_timeout_s, loses its connection, or
    has a bug."""
    with LOCK:
        EPISODES.append(prompt)
        first = "Count to 1." in prompt and not FAILED
        FAILED.extend([prompt] if first else [])
    if first and HOW == "hang":
        time.sleep(3)
    if first and HOW == "lost":
        raise ConnectionError("the sandbox went away")
    if first and HOW == "bug":
        raise ValueError("a bug in the environment")


class CountEnv:
    def reset(self, row):
        self.prompt = row["prompt"]
        return row["prompt"]

    def step(self, text):
        fail_once(self.prompt)
        return None, 1.0, True


def agent(base_url, api_key, model, prompt, **row):
    client = OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    messages = [{"role": "user", "content": prompt}]
    text = client.chat.completions.create(model=model, messages=messages, max_tokens=4).choices[0].message.content
    fail_once(str(prompt))
    return {"text": text}


def rollout(prompts, client, tokenizer, rows, env_timeout_s, **sampling):
    CALLS.append(list(prompts))
    context = dict(client=client, tokenizer=tokenizer, rows=rows, env_timeout_s=env_timeout_s, **sampling)
    if WHO == "agent":
        return agent_rollout(prompts, agent=agent, **context)
    return environment_rollout(prompts, env=CountEnv, **context)
'''


class FakeDist:
    rank, world_size, is_main = 0, 1, True

    def min(self, values):
        return values

    def sum(self, values):
        return values

    def gather(self, obj):
        return [obj]


class Client(ScriptedClient):
    shares_weights = True


@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model)


def _step(tmp_path, tiny_model, tokenizer, who, how, on_error):
    """One step's batch (the stage's own synchronous source) with the rollout in ``who`` (``environment`` or
    ``agent``), its first episode of prompt 1 failing as ``how`` says; the rollout's module, the stage and the batch
    (or the exception)."""
    import sys

    from grpo_rollout.orchestrator.stage import RolloutStage
    from grpo_rollout.rollouts.run_end import end_run

    module = f"rollout_{who}_{how}_{on_error}"
    (tmp_path / f"{module}.py").write_text(f"WHO, HOW = {who!r}, {how!r}\n" + ROLLOUT)
    cfg = tiny_config(tmp_path, tiny_model, rows=3, sampling={"num_generations": 2, "max_completion_length": 16},
                      training={"prompts_per_step": 3},
                      rollout={"function": f"{tmp_path / module}.py:rollout", "on_error": on_error,
                               "env_timeout_s": 1.5 if how == "hang" else 60.0})
    cfg.data.shuffle = False
    stage = RolloutStage(cfg, tmp_path, FakeDist())
    stage.connect(Client(tokenizer, lambda prompt: ("Done.", True)), tokenizer, {tokenizer.eos_token_id},
                  len(tokenizer))
    try:
        batch = stage.source.next_batch(0, 0)
    except Exception as exc:  # noqa: BLE001 - the test looks at it
        batch = exc
    finally:
        end_run()
    return next(m for m in sys.modules.values() if getattr(m, "__file__", None) == str(tmp_path / f"{module}.py")), \
        stage, batch


@pytest.mark.parametrize("who, how, error", [("environment", "hang", "grpo_rollout.rollouts.env_timeouts.EnvTimeout"),
                                             ("agent", "lost", "ConnectionError")])
def test_only_the_failed_episodes_group_is_played_again(tmp_path, tiny_model, tokenizer, who, how, error):
    played, stage, batch = _step(tmp_path, tiny_model, tokenizer, who, how, "retry")
    assert played.CALLS == [PROMPTS, ["Count to 1."]]  # before: [PROMPTS, [0], [1], [2]]: every group again
    episodes = {p: sum(p in e for e in played.EPISODES) for p in PROMPTS}
    assert episodes == {"Count to 0.": 2, "Count to 1.": 2 + 2, "Count to 2.": 2} or \
        episodes == {"Count to 0.": 2, "Count to 1.": 1 + 2, "Count to 2.": 2}  # its twin may be cancelled first
    assert batch.num_groups == 3 and len(batch) == 6
    shown = [str(p) for p in batch.scores.prompts]
    assert [next(p for p in PROMPTS if p in s) for s in shown] == [p for p in PROMPTS for _ in range(2)]  # in order
    assert stage.failures.metrics(0) == {"episodes/failed": 2, "episodes/retried": 2, "episodes/dropped": 0,
                                         "episodes/prompts_dropped": 0, "episodes/epoch_prompts_dropped": 0}
    [record] = read_failures(tmp_path / "out" / "failures.jsonl")
    assert (record["row"], record["prompt"], record["attempt"], record["outcome"], record["error"]) == \
        (1, "Count to 1.", 1, "retried", error)


def test_drop_leaves_out_only_the_failed_group_and_a_bug_still_stops(tmp_path, tiny_model, tokenizer):
    played, stage, batch = _step(tmp_path, tiny_model, tokenizer, "environment", "hang", "drop")
    assert played.CALLS == [PROMPTS] and batch.num_groups == 2  # not played again: left out
    assert [p for p in PROMPTS if any(p in str(s) for s in batch.scores.prompts)] == ["Count to 0.", "Count to 2."]
    assert stage.failures.metrics()["episodes/dropped"] == 2
    for on_error in ("retry", "stop"):
        played, _, raised = _step(tmp_path, tiny_model, tokenizer, "environment", "bug", on_error)
        assert isinstance(raised, RolloutError) and not isinstance(raised, EpisodeFailure)
        assert "ValueError: a bug in the environment" in str(raised) and played.CALLS == [PROMPTS]
    played, _, raised = _step(tmp_path, tiny_model, tokenizer, "environment", "hang", "stop")
    assert isinstance(raised, EpisodeFailure) and "env_timeout_s" in str(raised) and played.CALLS == [PROMPTS]


