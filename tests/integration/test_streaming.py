"""Streaming rollouts (training.max_staleness, issue 30) through the real trainer on the tiny Llama, generation by the
simulated server (benchmarks/simulated_server.py: sleeping requests, version stamps, in-flight syncs). Checked: k = 0
is today's synchronous step exactly; every trained group is at most k versions behind; no prompt twice in an epoch,
across a resume too; dynamic sampling drops groups as they arrive; an async rollout's groups share one loop and its
turns span syncs; LoRA and bf16; evaluation on the weights of its step. Faults and several processes:
test_streaming_faults.py."""

from __future__ import annotations

import json
import math

import pytest

from grpo_rollout.trainer import train
from grpo_rollout.trainer.reporting.progress import RichReporter
from streaming_helpers import (ASYNC, RECORDING, SLOW_SEVENS, TIMES, SimulatedServer, streaming_config,
                               trained_prompts, use_simulated_server, user_module)
from tiny_model import tiny_config

pytestmark = pytest.mark.model


def test_max_staleness_0_is_the_synchronous_step_exactly(tmp_path, tiny_model):
    runs = []
    for name, k in (("default", None), ("zero", 0)):
        (tmp_path / name).mkdir()
        cfg = tiny_config(tmp_path / name, tiny_model, training={"max_steps": 3, "max_staleness": k})
        result = train(cfg, base_dir=tmp_path / name, reporter=RichReporter(quiet=True))
        runs.append([{key: v for key, v in m.items() if not key.startswith(TIMES)} for m in result.history])
    assert runs[0] == runs[1]
    assert not any(key.startswith("async/") for key in runs[1][0])


@pytest.mark.parametrize("k", [1, 2])
def test_every_group_is_at_most_k_versions_behind_and_no_prompt_trains_twice(tmp_path, tiny_model, monkeypatch, k):
    from rich.console import Console

    from grpo_rollout.views.plot_panels import DEFAULT_PANELS

    cfg = streaming_config(tmp_path, tiny_model, monkeypatch, k, max_steps=6, save_rollouts="every")
    console = Console(record=True, width=300, force_terminal=False)
    result = train(cfg, base_dir=tmp_path, reporter=RichReporter(console=console))
    text = console.export_text()
    assert f"Streaming rollouts: training.max_staleness {k}" in text and f"≤{k}  wait " in text  # issue 39.10
    assert "wait s" in text and "gen s" not in text and "trainer busy" in text and "servers idle" in text
    assert "verdict: " in text  # the final panel says which side is the bottleneck
    for panel in (p for p in DEFAULT_PANELS if p.only_when):  # the streaming panels draw what a streaming run logs
        assert panel.choose(list(result.history[-1])) == list(panel.choose.wanted), panel.title
    assert result.steps == 6
    for m in result.history:
        assert 0 <= m["async/staleness_mean"] <= m["async/staleness_max"] <= k
        assert m["sampler/weight_version_lag"] == m["async/staleness_max"]
        assert m["async/groups_in_flight"] >= 0 and m["async/buffer_groups"] >= 0
        assert m["time/waiting_for_rollouts"] >= 0 and 0 <= m["async/trainer_busy_share"] <= 1
        parts = [m[key] for key in ("sampler/logprob_abs_diff_fresh", "sampler/logprob_abs_diff_stale") if key in m]
        assert ("sampler/logprob_abs_diff_stale" in m) == (m["async/staleness_max"] > 0) and parts
        assert min(parts) * (1 - 1e-6) <= m["sampler/logprob_abs_diff"] <= max(parts) * (1 + 1e-6)  # their mean
    assert max(m["async/staleness_max"] for m in result.history) >= 1  # it did run ahead
    trained = [p for prompts in trained_prompts(tmp_path / "out").values() for p in prompts]
    assert len(trained) == 24 == len(set(trained))  # 6 steps × 4 groups, none twice (40 prompts in the epoch)
    lines = (tmp_path / "out" / "rollouts" / "step_6.jsonl").read_text().splitlines()
    assert len(lines) == 32 and all(json.loads(x)["sampler_logprobs"] for x in lines)
    from grpo_rollout.views.inspect import load_sample, summary_line  # `inspect` names the weights that sampled it

    oldest, newest = json.loads(lines[0])["weight_versions"]
    expected = f"sampled by weights v{oldest}" + (f"-v{newest}" if newest != oldest else "")
    assert summary_line(load_sample(tmp_path / "out", step=6, sample=0)).endswith(expected)


def test_a_resume_trains_no_prompt_twice_and_skips_none(tmp_path, tiny_model, monkeypatch):
    """The resumed run ends with the epoch, whose slow prompts (those with a 7) its last steps wait for (issue 39)."""
    (tmp_path / "user_rollout.py").write_text(SLOW_SEVENS.replace("0.4 if", "2.0 if"))
    runs = [streaming_config(tmp_path, tiny_model, monkeypatch, 2, rows=24, max_steps=steps, save_steps=2)
            for steps in (3, 6)]
    for cfg in runs:
        cfg.rollout.function = f"{tmp_path / 'user_rollout.py'}:rollout"
    train(runs[0], base_dir=tmp_path, reporter=RichReporter(quiet=True))
    first = trained_prompts(tmp_path / "out")
    train(runs[1], base_dir=tmp_path, resume=str(tmp_path / "out" / "checkpoint-2"), reporter=RichReporter(quiet=True))
    after = trained_prompts(tmp_path / "out")  # steps 3.. were logged again by the resumed run
    assert [after[s] for s in (1, 2)] == [first[s] for s in (1, 2)]
    trained = [p for s in sorted(after) for p in after[s]]
    assert len(trained) == 24 == len(set(trained))  # the whole epoch (24 prompts) once, across the resume


SLOW_TWO_AND_FIVE = '''
import time
from grpo_rollout.rollouts import builtin_rollout

def rollout(prompts, client, **kw):
    time.sleep(2.0 if prompts[0] in ("Count to 2.", "Count to 5.") else 0.01)  # two stragglers
    return builtin_rollout()(prompts, client=client, **kw)
'''


def test_the_last_steps_of_an_epoch_wait_for_its_slow_prompts(tmp_path, tiny_model, monkeypatch):
    """Issue 39: num_epochs 1 over 8 prompts, two of them slow, max_staleness 1: the stream started groups of the next
    epoch and the last steps took fast ones, so the two slow prompts were never trained and two fast ones twice."""
    (tmp_path / "user_rollout.py").write_text(SLOW_TWO_AND_FIVE)
    cfg = streaming_config(tmp_path, tiny_model, monkeypatch, 1, rows=8, num_epochs=1, prompts_per_step=2)
    cfg.rollout.function = f"{tmp_path / 'user_rollout.py'}:rollout"
    result = train(cfg, base_dir=tmp_path, reporter=RichReporter(quiet=True))
    assert result.steps == 4
    trained = [p for prompts in trained_prompts(tmp_path / "out").values() for p in prompts]
    assert sorted(trained) == sorted(f"Count to {i}." for i in range(8))  # each once, the slow ones too


def test_dynamic_sampling_drops_groups_without_variance_as_they_arrive(tmp_path, tiny_model, monkeypatch):
    cfg = streaming_config(tmp_path, tiny_model, monkeypatch, 2, max_steps=4, save_rollouts="every",
                     dynamic_sampling={"enabled": True})
    cfg.sampling.max_completion_length = 1  # one token: the even-id reward is 0 or 1, so whole groups often agree
    cfg.sampling.num_generations, cfg.training.micro_batch_size = 2, 8
    result = train(cfg, base_dir=tmp_path, reporter=RichReporter(quiet=True))
    assert sum(m["dynamic_sampling/groups_dropped"] for m in result.history) >= 1
    for step in range(1, 5):
        rewards = [json.loads(x)["reward"] for x in
                   (tmp_path / "out" / "rollouts" / f"step_{step}.jsonl").read_text().splitlines()]
        assert all(rewards[i] != rewards[i + 1] for i in range(0, len(rewards), 2))  # every group has variance
    assert all("dynamic_sampling/rounds" not in m for m in result.history)  # no refill rounds


def test_an_async_rollout_streams_on_one_loop_and_its_turns_span_weight_syncs(tmp_path, tiny_model, monkeypatch):
    """The groups of an async def rollout share one event loop; a group's second turn, sampled after a weight sync,
    carries the newer version: the group's oldest and newest versions are saved, the staleness counts the oldest."""
    (tmp_path / "user_rollout.py").write_text(ASYNC)
    cfg = streaming_config(tmp_path, tiny_model, monkeypatch, 2, max_steps=4, save_rollouts="every")
    cfg.rollout.function = f"{tmp_path / 'user_rollout.py'}:rollout"
    result = train(cfg, base_dir=tmp_path, reporter=RichReporter(quiet=True))
    assert result.steps == 4 and all(m["async/staleness_max"] <= 2 for m in result.history)
    module = user_module(tmp_path / "user_rollout.py")
    assert len(module.LOOPS) == 1
    by_step = {step: [json.loads(x)["weight_versions"] for x in
                      (tmp_path / "out" / "rollouts" / f"step_{step}.jsonl").read_text().splitlines()]
               for step in range(1, 5)}
    assert all(1 <= old <= new for versions in by_step.values() for old, new in versions)
    assert any(new > old for versions in by_step.values() for old, new in versions)  # a sync between turns
    # the trainer holds version k at step k (a sync before step 1, one after each step): the age is the oldest's
    assert [m["async/staleness_max"] for m in result.history] == \
        [step - min(old for old, _ in by_step[step]) for step in range(1, 5)]


@pytest.mark.parametrize("model", [{"lora": {"r": 4}}, {"dtype": "bfloat16"}], ids=["lora", "bf16"])
def test_streaming_with_lora_and_with_bf16(tmp_path, tiny_model, monkeypatch, model):
    cfg = streaming_config(tmp_path, tiny_model, monkeypatch, 2, max_steps=4)
    for key, value in model.items():
        if key == "lora":
            cfg.model.lora.r = value["r"]
        else:
            setattr(cfg.model, key, value)
    result = train(cfg, base_dir=tmp_path, reporter=RichReporter(quiet=True))
    assert result.steps == 4
    assert all(m["async/staleness_max"] <= 2 and math.isfinite(m["loss"]) for m in result.history)
    assert max(m["async/staleness_max"] for m in result.history) >= 1


def test_evaluation_in_the_stream_uses_the_weights_of_its_step(tmp_path, tiny_model, monkeypatch):
    (tmp_path / "user_rollout.py").write_text(RECORDING)
    (tmp_path / "held_out.jsonl").write_text("".join(json.dumps({"prompt": f"Held {i}."}) + "\n" for i in range(3)))
    cfg = streaming_config(tmp_path, tiny_model, monkeypatch, 2, max_steps=4)
    cfg.rollout.function = f"{tmp_path / 'user_rollout.py'}:rollout"
    cfg.data.eval = str(tmp_path / "held_out.jsonl")
    cfg.evaluation.every_steps, cfg.evaluation.num_generations, cfg.evaluation.temperature = 2, 2, 1.0
    result = train(cfg, base_dir=tmp_path, reporter=RichReporter(quiet=True))
    assert [done for done, _ in result.evaluations] == [2, 4]
    module = user_module(tmp_path / "user_rollout.py")
    held = [version for prompt, version in module.CALLS if prompt.startswith("Held")]
    # one call per evaluation (its 3 prompts); a sync before step 1 (version 1) and one after each step: after 2 and
    # 4 steps the servers hold 3 and 5, while the stream's groups run on beside it
    assert held == [3, 5]


CONSTANT = '''
def flat(completions, **kwargs):
    return [1.0] * len(completions)
'''


@pytest.mark.parametrize("dynamic", [False, True], ids=["plain", "dynamic_sampling"])
def test_steps_without_signal_neither_stall_nor_loop(tmp_path, tiny_model, monkeypatch, dynamic):
    """New user's trial: with a constant reward no step updates (no sync, the version stays): after k + 1 such steps
    the stream started no group and the run hung; with dynamic sampling it refused every group forever."""
    use_simulated_server(monkeypatch.setattr, lambda loaded: SimulatedServer(loaded.tokenizer, lambda: 0.01, 49152))
    cfg = tiny_config(tmp_path, tiny_model, rows=60, rewards_source=CONSTANT, reward="flat",
                      training={"max_staleness": 1, "max_steps": 4, "dynamic_sampling": {"enabled": dynamic}},
                      vllm={"mode": "attach", "url": "http://simulated", "max_logprob_mismatch": None})
    result = train(cfg, base_dir=tmp_path, reporter=RichReporter(quiet=True))
    assert result.steps == 4 and all(m["frac_reward_zero_std"] == 1.0 for m in result.history)
    if dynamic:
        assert all(m["dynamic_sampling/filled"] == 0.0 for m in result.history)


def test_groups_of_the_same_prompt_text_get_their_own_samples(tmp_path, tiny_model, monkeypatch):
    """Each group is its own seeded call: two groups of a repeated dataset row drew the same samples (the seed came
    from the step and the prompt's tokens alone); the group's place in the prompt sequence is in the seed now."""
    cfg = streaming_config(tmp_path, tiny_model, monkeypatch, 1, max_steps=2)
    (tmp_path / "data.jsonl").write_text("".join(json.dumps({"prompt": "Count to 3."}) + "\n" for _ in range(40)))
    train(cfg, base_dir=tmp_path, reporter=RichReporter(quiet=True))
    rows = [json.loads(x) for x in (tmp_path / "out" / "completions.jsonl").read_text().splitlines()]
    groups = [tuple(r["completion"] for r in rows[i:i + 8]) for i in range(0, len(rows), 8)]
    assert len(groups) == 8 and len(set(groups)) == 8
