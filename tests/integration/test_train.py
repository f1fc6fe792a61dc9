"""End-to-end training on a tiny random model (transformers generation): reward goes up, outputs, resume."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from rich.console import Console
from transformers import AutoModelForCausalLM

from grpo_rollout.trainer import train
from grpo_rollout.trainer.reporting.progress import RichReporter
from tiny_model import tiny_config

pytestmark = pytest.mark.model

def _config(root: Path, model: Path, **training):
    return tiny_config(root, model, training=training)


def _quiet() -> RichReporter:
    return RichReporter(quiet=True)


def test_reward_rises_on_trivial_task(tmp_path, tiny_model):
    cfg = _config(tmp_path, tiny_model, max_steps=12)
    result = train(cfg, base_dir=tmp_path, reporter=_quiet())
    rewards = [m["reward"] for m in result.history]
    assert len(rewards) == 12
    first, last = sum(rewards[:3]) / 3, sum(rewards[-3:]) / 3
    assert last > first + 0.1, rewards
    # outputs: one metrics line per step with the logged numbers, all completions, a loadable final model
    lines = [json.loads(x) for x in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines] == list(range(1, 13))
    for key in ("reward", "reward_std", "rewards/even_ids/mean", "kl", "clip_ratio/region", "grad_norm",
                "learning_rate", "completions/mean_length", "completions/truncated_fraction", "time/generation"):
        assert key in lines[0], key
    completions = (tmp_path / "out" / "completions.jsonl").read_text().splitlines()
    assert len(completions) == 12 * 4 * 8
    assert result.checkpoint == tmp_path / "out" / "checkpoint-12"
    model = AutoModelForCausalLM.from_pretrained(result.checkpoint)
    assert model.config.vocab_size == 49152
    # docs/outputs.md's checkpoint size: 4 bytes a parameter of float32 weights + 8 of AdamW's two float32 moments
    params = sum(p.numel() for p in model.parameters())
    assert (result.checkpoint / "model.safetensors").stat().st_size == pytest.approx(4 * params, rel=0.01)
    assert (result.checkpoint / "trainer_state.pt").stat().st_size == pytest.approx(8 * params, rel=0.02)


def test_beta_gives_zero_kl_at_first_step(tmp_path, tiny_model):
    cfg = _config(tmp_path, tiny_model, max_steps=2, beta=0.1)
    result = train(cfg, base_dir=tmp_path, reporter=_quiet())
    assert result.history[0]["kl"] == 0.0
    assert result.history[1]["kl"] > 0.0  # the policy moved away from the reference after one update


def test_resume_matches_uninterrupted_run(tmp_path, tiny_model):
    full_dir, part_dir = tmp_path / "full", tmp_path / "part"
    full_dir.mkdir(), part_dir.mkdir()
    full = train(_config(full_dir, tiny_model, max_steps=4, save_steps=2), base_dir=full_dir, reporter=_quiet())
    first = train(_config(part_dir, tiny_model, max_steps=2), base_dir=part_dir, reporter=_quiet())
    assert first.steps == 2
    console = Console(record=True, width=400)  # wide enough that a long TMPDIR path in the panel does not wrap
    resumed = train(_config(part_dir, tiny_model, max_steps=4), base_dir=part_dir, resume="latest",
                    reporter=RichReporter(console))
    assert resumed.steps == 4 and len(resumed.history) == 2
    # issue 28: each history row names its step, so a resumed run's rows match the uninterrupted run's
    assert [m["step"] for m in full.history] == [1, 2, 3, 4] and [m["step"] for m in resumed.history] == [3, 4]
    # ... and train() prints the final panel and returns its text
    assert resumed.summary.startswith("Training finished\nsteps: 4\nreward (mean of first step of this session, "
                                      "from step 3): ")
    printed = console.export_text()
    assert all(line in printed for line in resumed.summary.splitlines()[1:])
    assert printed.index("Training finished") > printed.index("Resuming from")

    def prompts_by_step(folder: Path):
        rows = [json.loads(x) for x in (folder / "out" / "completions.jsonl").read_text().splitlines()]
        return [[r["prompt"] for r in rows if r["step"] == s] for s in range(1, 5)]

    assert prompts_by_step(part_dir) == prompts_by_step(full_dir)
    steps = [json.loads(x)["step"] for x in (part_dir / "out" / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4]
    full_rewards = [m["reward"] for m in full.history[2:]]
    assert [m["reward"] for m in resumed.history] == pytest.approx(full_rewards, abs=1e-6)
    a = AutoModelForCausalLM.from_pretrained(full_dir / "out" / "checkpoint-4").state_dict()
    b = AutoModelForCausalLM.from_pretrained(part_dir / "out" / "checkpoint-4").state_dict()
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)


USER_ROLLOUT = '''
def rollout(prompts, client, **sampling_kwargs):
    """A user rollout that drives the backend itself and adds an extra key."""
    result = client.generate(client.encode_prompts(prompts), n=sampling_kwargs["n"],
                             temperature=sampling_kwargs["temperature"], top_k=sampling_kwargs["top_k"],
                             max_tokens=sampling_kwargs["max_completion_length"], seed=sampling_kwargs["seed"])
    return {"prompt_ids": result.prompt_ids, "completion_ids": result.completion_ids, "logprobs": result.logprobs,
            "first_token": [ids[0] for ids in result.completion_ids]}

SEEN = []

def first_token_even(completions, first_token, **kwargs):
    SEEN.append(list(first_token))
    return [float(t % 2 == 0) for t in first_token]
'''


def test_user_rollout_with_extras_trains(tmp_path, tiny_model):
    import sys

    (tmp_path / "user_rollout.py").write_text(USER_ROLLOUT)
    cfg = _config(tmp_path, tiny_model, max_steps=2)
    cfg.rollout.function = f"{tmp_path / 'user_rollout.py'}:rollout"
    cfg.rewards[0].function = f"{tmp_path / 'user_rollout.py'}:first_token_even"
    result = train(cfg, base_dir=tmp_path, reporter=_quiet())
    assert result.steps == 2
    # the module was imported by file path; find it among the loaded modules
    module = next(m for name, m in sys.modules.items() if name.startswith("grpo_rollout_user_") and
                  hasattr(m, "SEEN") and getattr(m, "__file__", "") == str(tmp_path / "user_rollout.py"))
    assert len(module.SEEN) == 2 and all(len(x) == 4 * 8 for x in module.SEEN)  # the extra reached the reward
    assert result.history[0]["rewards/first_token_even/mean"] == pytest.approx(
        sum(t % 2 == 0 for t in module.SEEN[0]) / 32)
    assert result.history[0]["sampler/logprob_abs_diff"] < 1e-4


def test_padding_free_trains_like_padding(tmp_path, tiny_model):
    # the same two steps with sequences packed into shared rows and with one padded row per sequence
    runs = {}
    for padding_free in (True, False):
        root = tmp_path / str(padding_free)
        root.mkdir()
        cfg = _config(root, tiny_model, max_steps=2, padding_free=padding_free, micro_batch_size=32, save_steps=1)
        # short and long prompts (about 30 and 120 tokens with the chat template): short sequences share a row
        (root / "data.jsonl").write_text("".join(json.dumps({"prompt": "Hi." if i % 2 else "Go on." * 30}) + "\n"
                                                 for i in range(10)))
        runs[padding_free] = train(cfg, base_dir=root, reporter=_quiet())
    packed, padded = runs[True].history, runs[False].history
    for a, b in zip(packed, padded):
        assert a["reward"] == pytest.approx(b["reward"], abs=1e-9)
        assert a["loss"] == pytest.approx(b["loss"], abs=1e-6)
        assert a["tokens/forward"] == b["tokens/forward"]
    assert sum(a["tokens/padded"] for a in packed) < 0.8 * sum(b["tokens/padded"] for b in padded)
    # the weights after one update (later, Adam divides the float-order noise of an embedding row whose gradient is
    # ~0 by that row's tiny second moment: 1.4e-4 apart after two steps with the per-prompt seeds of issue 28.4)
    a = AutoModelForCausalLM.from_pretrained(runs[True].output_dir / "checkpoint-1").state_dict()
    b = AutoModelForCausalLM.from_pretrained(runs[False].output_dir / "checkpoint-1").state_dict()
    assert all(torch.allclose(a[k], b[k], atol=1e-5) for k in a)


def test_compiled_layers_train_like_eager(tmp_path, tiny_model):
    # training.compile: each decoder layer through torch.compile; same update, same checkpoint names
    runs = {}
    for compiled in (True, False):
        root = tmp_path / str(compiled)
        root.mkdir()
        runs[compiled] = train(_config(root, tiny_model, max_steps=1, compile=compiled), base_dir=root,
                               reporter=_quiet())
    compiled, eager = runs[True].history[0], runs[False].history[0]
    assert compiled["loss"] == pytest.approx(eager["loss"], abs=1e-6)
    assert compiled["grad_norm"] == pytest.approx(eager["grad_norm"], rel=1e-4)
    a = AutoModelForCausalLM.from_pretrained(runs[True].checkpoint).state_dict()
    b = AutoModelForCausalLM.from_pretrained(runs[False].checkpoint).state_dict()
    assert a.keys() == b.keys()
    # AdamW's first step moves every weight by about ±lr, so a gradient of ~0 whose sign differs in the last bits
    # moves a weight the other way: all but a few weights agree
    same = sum(int(torch.isclose(a[k], b[k], atol=1e-5, rtol=0).sum()) for k in a)
    assert same / sum(v.numel() for v in a.values()) > 0.999


def test_sequence_importance_level_trains(tmp_path, tiny_model):
    # GSPO (arXiv:2507.18071): the paper's clip range and aggregation; two updates per batch, so that the second
    # one sees sequence ratios != 1 (the first is on-policy: every s_i is 1)
    cfg = _config(tmp_path, tiny_model, max_steps=2, importance_level="sequence", loss_type="grpo", epsilon=3e-4,
                  epsilon_high=4e-4, num_iterations=2)
    result = train(cfg, base_dir=tmp_path, reporter=_quiet())
    assert result.steps == 2
    for m in result.history:
        assert math.isfinite(m["loss"]) and math.isfinite(m["grad_norm"]) and m["nonfinite_skipped"] == 0
        assert m["ratio/max"] > 1.0  # the second update's s_i moved off 1
        assert 0 < m["clip_ratio/region"] <= 0.5  # a range of 4e-4 clips some sequences, never the first update
    before = AutoModelForCausalLM.from_pretrained(tiny_model).state_dict()
    after = AutoModelForCausalLM.from_pretrained(result.checkpoint).state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)


def test_steps_log_the_trainers_memory(tmp_path, tiny_model):
    """memory/* (GiB, issue 23): the resident set after each step and the process's peak, which never falls."""
    import resource

    result = train(_config(tmp_path, tiny_model, max_steps=2), base_dir=tmp_path, reporter=_quiet())
    first, second = result.history
    for m in result.history:
        assert 0.1 < m["memory/rss_gib"] <= m["memory/peak_rss_gib"] < 64
        assert "memory/cuda_peak_gib" not in m  # CPU only here
    assert first["memory/peak_rss_gib"] <= second["memory/peak_rss_gib"]
    assert second["memory/peak_rss_gib"] <= resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 ** 2 + 1e-9
