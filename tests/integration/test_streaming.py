"""Streaming rollouts (training.max_staleness, issue 30) through the real trainer on the tiny Llama, generation by the
simulated server (benchmarks/simulated_server.py: sleeping requests, version stamps, in-flight syncs). Checked: k = 0
is today's synchronous step exactly; every trained group is at most k versions behind; no prompt twice in an epoch,
across a resume too; dynamic sampling drops groups as they arrive; a rollout that raises mid-stream stops the run
naming it, after the finished steps were logged; an async rollout streams too."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from grpo_rollout.rollouts.contract import RolloutError
from grpo_rollout.trainer import train
from grpo_rollout.trainer.reporting.progress import RichReporter
from tiny_model import tiny_config

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from simulated_server import SimulatedServer, lognormal_latency, use_simulated_server  # noqa: E402

pytestmark = pytest.mark.model

TIMES = ("time/", "memory/")


def _streaming(tmp_path, tiny_model, monkeypatch, k, rows=40, median_s=0.05, **training):
    use_simulated_server(monkeypatch.setattr,
                         lambda loaded: SimulatedServer(loaded.tokenizer, lognormal_latency(median_s, seed=3), 49152))
    return tiny_config(tmp_path, tiny_model, rows=rows, training={"max_staleness": k, **training},
                       vllm={"mode": "attach", "url": "http://simulated", "max_logprob_mismatch": None})


def _trained_prompts(run_dir: Path):
    """The prompt of each trained group, step by step (completions.jsonl: num_generations lines per group)."""
    by_step = {}
    for line in (run_dir / "completions.jsonl").read_text().splitlines():
        row = json.loads(line)
        by_step.setdefault(row["step"], []).append(row["prompt"])
    return {step: prompts[::8] for step, prompts in by_step.items()}


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

    cfg = _streaming(tmp_path, tiny_model, monkeypatch, k, max_steps=6, save_rollouts="every")
    console = Console(record=True, width=300, force_terminal=False)
    result = train(cfg, base_dir=tmp_path, reporter=RichReporter(console=console))
    text = console.export_text()
    assert "staleness=" in text and "dropped stale=" in text and "waited=" in text
    for panel in (p for p in DEFAULT_PANELS if p.only_when):  # the streaming panels draw what a streaming run logs
        assert panel.choose(list(result.history[-1])) == list(panel.choose.wanted), panel.title
    assert result.steps == 6
    for m in result.history:
        assert 0 <= m["async/staleness_mean"] <= m["async/staleness_max"] <= k
        assert m["sampler/weight_version_lag"] == m["async/staleness_max"]
        assert m["async/groups_in_flight"] >= 0 and m["async/buffer_groups"] >= 0
        assert m["time/waiting_for_rollouts"] >= 0
    assert max(m["async/staleness_max"] for m in result.history) >= 1  # it did run ahead
    trained = [p for prompts in _trained_prompts(tmp_path / "out").values() for p in prompts]
    assert len(trained) == 24 == len(set(trained))  # 6 steps × 4 groups, none twice (40 prompts in the epoch)
    lines = (tmp_path / "out" / "rollouts" / "step_6.jsonl").read_text().splitlines()
    assert len(lines) == 32 and all(json.loads(x)["sampler_logprobs"] for x in lines)


def test_a_resume_trains_no_prompt_twice_and_skips_none(tmp_path, tiny_model, monkeypatch):
    cfg = _streaming(tmp_path, tiny_model, monkeypatch, 2, rows=24, max_steps=3, save_steps=2)
    train(cfg, base_dir=tmp_path, reporter=RichReporter(quiet=True))
    first = _trained_prompts(tmp_path / "out")
    resumed = _streaming(tmp_path, tiny_model, monkeypatch, 2, rows=24, max_steps=6, save_steps=2)
    train(resumed, base_dir=tmp_path, resume=str(tmp_path / "out" / "checkpoint-2"), reporter=RichReporter(quiet=True))
    after = _trained_prompts(tmp_path / "out")  # steps 3.. were logged again by the resumed run
    assert [after[s] for s in (1, 2)] == [first[s] for s in (1, 2)]
    trained = [p for s in sorted(after) for p in after[s]]
    assert len(trained) == 24 == len(set(trained))  # the whole epoch (24 prompts) once, across the resume


def test_dynamic_sampling_drops_groups_without_variance_as_they_arrive(tmp_path, tiny_model, monkeypatch):
    cfg = _streaming(tmp_path, tiny_model, monkeypatch, 2, max_steps=4, save_rollouts="every",
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


FAILING = '''
from grpo_rollout.rollouts import builtin_rollout

def rollout(prompts, client, **kw):
    if prompts[0] == "Count to 17.":
        raise KeyError("no tool for 17")
    return builtin_rollout()(prompts, client=client, **kw)
'''

ASYNC = '''
import asyncio
import time

LOOPS = set()

async def rollout(prompts, client, n, max_completion_length, seed, **kw):
    # two turns; groups of odd prompts wait between them until a weight sync lands (the even ones let steps go on)
    LOOPS.add(id(asyncio.get_running_loop()))
    ids = client.encode_prompts(prompts)
    first = await client.agenerate(ids, n=n, max_tokens=2, seed=seed)
    seen, deadline = client.weight_version, time.monotonic() + 10
    while int(prompts[0].split()[-1].rstrip(".")) % 2 and client.weight_version == seen and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    second = await client.agenerate([p + c for p, c in zip(ids * n, first.completion_ids)], n=1,
                                    max_tokens=max_completion_length - 2, seed=seed)
    return {"prompt_ids": ids, "completion_ids": [a + b for a, b in zip(first.completion_ids,
                                                                        second.completion_ids)],
            "logprobs": [a + b for a, b in zip(first.logprobs, second.logprobs)]}
'''


def test_a_rollout_that_raises_mid_stream_stops_the_run_naming_it(tmp_path, tiny_model, monkeypatch):
    (tmp_path / "user_rollout.py").write_text(FAILING)
    cfg = _streaming(tmp_path, tiny_model, monkeypatch, 1, rows=24, max_steps=6)
    cfg.data.shuffle = False  # "Count to 17." is the 18th prompt: step 5's, started once steps 1-3 have trained
    cfg.rollout.function = f"{tmp_path / 'user_rollout.py'}:rollout"
    with pytest.raises(RolloutError, match=r"rollout raised KeyError: 'no tool for 17' \(at .*user_rollout\.py:6\)"):
        train(cfg, base_dir=tmp_path, reporter=RichReporter(quiet=True))
    steps = [json.loads(x)["step"] for x in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert len(steps) >= 2 and steps == list(range(1, len(steps) + 1))
    assert (tmp_path / "out" / f"checkpoint-{steps[-1]}").is_dir()  # the finished steps were kept


def test_an_async_rollout_streams_on_one_loop_and_its_turns_span_weight_syncs(tmp_path, tiny_model, monkeypatch):
    """The groups of an async def rollout share one event loop; a group's second turn, sampled after a weight sync,
    carries the newer version: the group's oldest and newest versions are saved, the staleness counts the oldest."""
    (tmp_path / "user_rollout.py").write_text(ASYNC)
    cfg = _streaming(tmp_path, tiny_model, monkeypatch, 2, max_steps=4, save_rollouts="every")
    cfg.rollout.function = f"{tmp_path / 'user_rollout.py'}:rollout"
    result = train(cfg, base_dir=tmp_path, reporter=RichReporter(quiet=True))
    assert result.steps == 4 and all(m["async/staleness_max"] <= 2 for m in result.history)
    module = next(m for name, m in sys.modules.items() if name.startswith("grpo_rollout_user_") and
                  getattr(m, "__file__", "") == str(tmp_path / "user_rollout.py"))
    assert len(module.LOOPS) == 1
    by_step = {step: [json.loads(x)["weight_versions"] for x in
                      (tmp_path / "out" / "rollouts" / f"step_{step}.jsonl").read_text().splitlines()]
               for step in range(1, 5)}
    assert all(1 <= old <= new for versions in by_step.values() for old, new in versions)
    assert any(new > old for versions in by_step.values() for old, new in versions)  # a sync between turns
    # the trainer holds version k at step k (a sync before step 1, one after each step): the age is the oldest's
    assert [m["async/staleness_max"] for m in result.history] == \
        [step - min(old for old, _ in by_step[step]) for step in range(1, 5)]


TWO_RANKS = '''
import sys, time
sys.path.insert(0, sys.argv[2])
import torch.distributed as dist
from simulated_server import SimulatedServer, use_simulated_server
from grpo_rollout.config import load_config
from grpo_rollout.trainer import train
from grpo_rollout.trainer.reporting.progress import RichReporter

use_simulated_server(setattr, lambda loaded: SimulatedServer(loaded.tokenizer, lambda: 0.02, 49152))
dist.init_process_group("gloo")
loaded = load_config(sys.argv[1])
train(loaded.config, base_dir=loaded.base_dir, reporter=RichReporter(quiet=True))
dist.destroy_process_group()
'''

SLOW_SEVENS = '''
import time
from grpo_rollout.rollouts import builtin_rollout

def rollout(prompts, client, **kw):
    time.sleep(0.4 if "7" in prompts[0] else 0.01)  # a long tail: prompts with a 7
    return builtin_rollout()(prompts, client=client, **kw)
'''


@pytest.mark.multiproc
@pytest.mark.slow
def test_two_processes_stream_their_own_groups_and_train_each_prompt_once(tmp_path, tiny_model, monkeypatch):
    import yaml

    from test_distributed import ROOT, _torchrun

    cfg = _streaming(tmp_path, tiny_model, monkeypatch, 2, rows=40, max_steps=4, prompts_per_step=8)
    (tmp_path / "user_rollout.py").write_text(SLOW_SEVENS)
    cfg.rollout.function = f"{tmp_path / 'user_rollout.py'}:rollout"
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg.model_dump(), sort_keys=False))
    (tmp_path / "driver.py").write_text(TWO_RANKS)
    proc = _torchrun([str(tmp_path / "driver.py"), str(tmp_path / "config.yaml"), str(ROOT / "benchmarks")],
                     cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = [json.loads(x) for x in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2, 3, 4]
    assert all(m["async/staleness_max"] <= 2 for m in metrics)
    trained = [p for prompts in _trained_prompts(tmp_path / "out").values() for p in prompts]
    assert len(trained) == 32 == len(set(trained))  # 4 steps × 8 groups (4 per process), none twice


ONE_RANK = '''
import sys
sys.path.insert(0, sys.argv[2])
from simulated_server import SimulatedServer, use_simulated_server
from grpo_rollout.config import load_config
from grpo_rollout.trainer import train
from grpo_rollout.trainer.reporting.progress import RichReporter

use_simulated_server(setattr, lambda loaded: SimulatedServer(loaded.tokenizer, lambda: 0.02, 49152))
loaded = load_config(sys.argv[1])
try:
    train(loaded.config, base_dir=loaded.base_dir, reporter=RichReporter(quiet=True))
except KeyboardInterrupt:
    sys.exit(130)
'''

STUCK_SEVENS = SLOW_SEVENS.replace("0.4 if", "600 if")  # an episode that would run for ten minutes


def test_ctrl_c_with_groups_in_flight_saves_the_finished_steps_within_seconds(tmp_path, tiny_model, monkeypatch):
    import signal
    import subprocess
    import time

    import yaml

    from test_distributed import ROOT

    cfg = _streaming(tmp_path, tiny_model, monkeypatch, 2, rows=40, max_steps=20)
    (tmp_path / "user_rollout.py").write_text(STUCK_SEVENS)
    cfg.rollout.function = f"{tmp_path / 'user_rollout.py'}:rollout"
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg.model_dump(), sort_keys=False))
    (tmp_path / "driver.py").write_text(ONE_RANK)
    proc = subprocess.Popen([sys.executable, str(tmp_path / "driver.py"), str(tmp_path / "config.yaml"),
                             str(ROOT / "benchmarks")], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    metrics = tmp_path / "out" / "metrics.jsonl"
    deadline = time.monotonic() + 300
    while not (metrics.exists() and len(metrics.read_text().splitlines()) >= 2) and time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read()
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    sent = time.monotonic()
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, out
    assert time.monotonic() - sent < 20  # not waiting for the stuck episodes
    logged = len(metrics.read_text().splitlines())
    saved = [int(p.parent.name.split("-")[1]) for p in (tmp_path / "out").glob("checkpoint-*/trainer_state.pt")]
    assert saved and max(saved) in (logged, logged + 1), (saved, logged, out)


@pytest.mark.parametrize("model", [{"lora": {"r": 4}}, {"dtype": "bfloat16"}], ids=["lora", "bf16"])
def test_streaming_with_lora_and_with_bf16(tmp_path, tiny_model, monkeypatch, model):
    cfg = _streaming(tmp_path, tiny_model, monkeypatch, 2, max_steps=4)
    for key, value in model.items():
        if key == "lora":
            cfg.model.lora.r = value["r"]
        else:
            setattr(cfg.model, key, value)
    result = train(cfg, base_dir=tmp_path, reporter=RichReporter(quiet=True))
    assert result.steps == 4
    assert all(m["async/staleness_max"] <= 2 and math.isfinite(m["loss"]) for m in result.history)
    assert max(m["async/staleness_max"] for m in result.history) >= 1


def test_a_server_that_dies_mid_stream_is_named(tmp_path, tiny_model, monkeypatch):
    from grpo_rollout.generation.vllm_client import ServerError

    class Dying(SimulatedServer):
        def generate(self, prompt_ids, **kw):
            if self.requests >= 20:  # after a few steps' groups
                raise ServerError("POST http://10.0.0.7:8000/generate/ failed: connection refused (the server died?)")
            return super().generate(prompt_ids, **kw)

    use_simulated_server(monkeypatch.setattr, lambda loaded: Dying(loaded.tokenizer, lambda: 0.02, 49152))
    cfg = tiny_config(tmp_path, tiny_model, rows=40, training={"max_staleness": 2, "max_steps": 10},
                      vllm={"mode": "attach", "url": "http://simulated", "max_logprob_mismatch": None})
    with pytest.raises(ServerError, match=r"http://10\.0\.0\.7:8000/generate/ failed"):
        train(cfg, base_dir=tmp_path, reporter=RichReporter(quiet=True))
    assert (tmp_path / "out" / "metrics.jsonl").read_text().count("\n") >= 1  # the steps before it were logged
