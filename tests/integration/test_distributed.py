"""Several training processes (torchrun, gloo on CPU, FSDP2) train exactly as one process on the same batch.

The rollout is deterministic (completions are a function of the prompt and the sample index, no sampling), so one
process and two processes see the same step; their parameters after the update must agree within 1e-5 for every
``loss_type``, and so must the logged metrics. Two checks, because AdamW's first update, ``lr · g / (|g| + eps)``, is
blind to the gradient's scale: the parameters catch a wrong direction (which sequence gets which advantage, a missing
token), the logged ``loss`` and ``grad_norm`` a wrong normaliser. (The learning rate is 1e-4: gradients near
``eps`` turn float sums taken in another order into differences of order ``lr`` in the first update.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file


pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]

TASK = '''
def fixed_rollout(prompts, n, step, **kwargs):
    """Deterministic completions: a function of the prompt and the sample index (no sampling)."""
    if any("FAIL" in p for p in prompts):
        raise ValueError("this rank's prompts hold FAIL")
    prompt_ids, completion_ids = [], []
    for p in prompts:
        base = sum(map(ord, p)) + 13 * step
        prompt_ids.append([1 + base % 50, 2 + base % 40, 3])
        for j in range(n):
            completion_ids.append([(base * (j + 1) + k * 7) % 1000 + 4 for k in range(3 + (base + j) % 5)])
    return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": None}

def score(completion_ids, **kwargs):
    return [sum(t % 3 == 0 for t in ids) / len(ids) for ids in completion_ids]
'''

# each: a name and the training settings that differ; all use 8 prompts × 4 completions, micro-batches of 4
VARIANTS = {
    "grpo": {"loss_type": "grpo"},
    "dr_grpo": {"loss_type": "dr_grpo"},
    "dapo": {"loss_type": "dapo"},
    "bnpo": {"loss_type": "bnpo"},
    "kl_iterations_batch": {"loss_type": "dapo", "beta": 0.1, "num_iterations": 2, "scale_rewards": "batch",
                            "max_grad_norm": 0.5},
    "reinforce_pp": {"loss_type": "dapo", "advantage": "reinforce_pp"},  # the baseline is every rank's rewards' mean
    # every group has reward variance here, so dynamic sampling keeps the first round on every rank
    "dynamic_sampling_rollouts": {"loss_type": "dapo", "save_rollouts": "every",
                                  "dynamic_sampling": {"enabled": True, "max_rounds": 2}},
    # every completion counts as solved: step 1's 12 prompts sit out their next turn, so step 2 draws rows 12-15,
    # skips rows 0-11 of epoch 1 and passes over 12-15 (drawn already), then 0-7: every rank must hold every rank's
    # record to draw that
    "curriculum": {"prompts_per_step": 12, "data": {"curriculum": "pass_rate", "curriculum_patience": 1,
                                                     "curriculum_success_reward": -1.0}},
}

DRIVER = '''
import sys
import torch.distributed as dist
from grpo_rollout.config import load_config
from grpo_rollout.trainer import train
from grpo_rollout.trainer.reporting.progress import RichReporter

dist.init_process_group("gloo")  # train() joins it and leaves it open: every variant runs in this one launch
for path in sys.argv[1:]:
    loaded = load_config(path)
    train(loaded.config, base_dir=loaded.base_dir, reporter=RichReporter(quiet=True))
dist.destroy_process_group()
'''


def _project(root: Path, model: Path, name: str, prompts=("Count to {i}.",), **training) -> Path:
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "task.py").write_text(TASK)
    rows = [{"prompt": prompts[i % len(prompts)].format(i=i)} for i in range(16)]
    data = training.pop("data", {})
    (folder / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = {"model": {"name_or_path": str(model)}, "data": {"train": "data.jsonl", "shuffle": False, **data},
           "rollout": {"function": "task.py:fixed_rollout"}, "rewards": ["task.py:score"],
           "sampling": {"num_generations": 4, "max_completion_length": 8, "max_prompt_length": 16},
           "training": {"output_dir": str(folder / "out"), "max_steps": 2, "prompts_per_step": 8,
                        "micro_batch_size": 4, "learning_rate": 1e-4, **training},
           "vllm": {"mode": "off"}}
    (folder / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    return folder / "config.yaml"


def _torchrun(args, cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    paths = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))  # tests/conftest.py adds one
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": paths}
    # --standalone: torchrun picks a free port for the rendezvous (tests may run side by side)
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _with_evaluation(config: Path) -> Path:
    """``config`` with 7 held-out prompts, evaluated before the first and after the last step."""
    cfg = yaml.safe_load(config.read_text())
    (config.parent / "held_out.jsonl").write_text("".join(json.dumps({"prompt": f"Count to {i}."}) + "\n"
                                                          for i in range(50, 57)))
    cfg["data"]["eval"] = "held_out.jsonl"
    cfg["evaluation"] = {"at_start": True, "at_end": True, "num_generations": 2, "temperature": 1.0,
                         "success_threshold": 0.3}
    config.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return config


def _metrics(config: Path):
    return [json.loads(line) for line in (config.parent / "out" / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.multiproc
@pytest.mark.model
def test_two_processes_update_like_one(tmp_path, tiny_model):
    from grpo_rollout.config import load_config
    from grpo_rollout.trainer import train
    from grpo_rollout.trainer.reporting.progress import RichReporter

    two = [_project(tmp_path / "two", tiny_model, name, save_steps=1, **settings) for name, settings in VARIANTS.items()]
    one = [_project(tmp_path / "one", tiny_model, name, save_steps=1, **settings) for name, settings in VARIANTS.items()]
    two.append(_with_evaluation(_project(tmp_path / "two", tiny_model, "evaluated")))  # after the variants: the
    one.append(_with_evaluation(_project(tmp_path / "one", tiny_model, "evaluated")))  # loop below skips it
    (tmp_path / "driver.py").write_text(DRIVER)
    proc = _torchrun([str(tmp_path / "driver.py"), *map(str, two)], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for path in one:
        loaded = load_config(path)
        train(loaded.config, base_dir=loaded.base_dir, reporter=RichReporter(quiet=True))
    for name, a, b in zip(VARIANTS, two, one):
        # after one update (Adam divides by tiny gradients' magnitudes: float sums in another order drift later)
        wa = load_file(a.parent / "out" / "checkpoint-1" / "model.safetensors")
        wb = load_file(b.parent / "out" / "checkpoint-1" / "model.safetensors")
        assert set(wa) == set(wb), name
        worst = max((wa[k] - wb[k]).abs().max().item() for k in wb)
        assert worst < 1e-5, (name, worst)
        ma, mb = _metrics(a), _metrics(b)
        assert [m["step"] for m in ma] == [1, 2]  # one line per step: rank 1 wrote nothing
        for x, y in zip(ma, mb):
            for key in ("reward", "reward_std", "rewards/score/mean", "loss", "grad_norm", "kl", "entropy", "num_tokens",
                        "clip_ratio/region", "ratio/max", "completions/mean_length", "frac_reward_zero_std"):
                assert x[key] == pytest.approx(y[key], rel=1e-4, abs=1e-6), (name, key)
        lines = (a.parent / "out" / "completions.jsonl").read_text().splitlines()
        per_step = VARIANTS[name].get("prompts_per_step", 8)
        assert len(lines) == 2 * per_step * 4  # every completion of both ranks, written once
        if name == "curriculum":
            assert [m["curriculum/skipped"] for m in ma] == [m["curriculum/skipped"] for m in mb] == [0, 16]
            step_2 = [json.loads(x)["prompt"] for x in lines[per_step * 4:]][::4]
            assert step_2 == [f"Count to {i}." for i in (12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7)]
        if "save_rollouts" in VARIANTS[name]:  # the token-level records of both ranks, written once, in order
            rows_a = [json.loads(x) for x in (a.parent / "out" / "rollouts" / "step_2.jsonl").read_text().splitlines()]
            rows_b = [json.loads(x) for x in (b.parent / "out" / "rollouts" / "step_2.jsonl").read_text().splitlines()]
            assert [r["completion_ids"] for r in rows_a] == [r["completion_ids"] for r in rows_b]
            assert [r["advantage"] for r in rows_a] == pytest.approx([r["advantage"] for r in rows_b], abs=2e-4)
            assert all(abs(x - y) < 1e-3 for ra, rb in zip(rows_a, rows_b)
                       for x, y in zip(ra["trainer_logprobs"], rb["trainer_logprobs"]))
            assert ma[1]["dynamic_sampling/groups_trained"] == 8 and ma[1]["dynamic_sampling/rounds"] == 1
    assert any(m["kl"] > 0 for m in _metrics(two[list(VARIANTS).index("kl_iterations_batch")]))  # the variant with a reference model really used it
    # held-out evaluation (issue 22): 7 prompts split 4 + 3 over the ranks, gathered: the same numbers and records as
    # one process (the rollout is deterministic), logged once, and training as without it
    ea, eb = _metrics(two[-1]), _metrics(one[-1])
    assert [m["step"] for m in ea] == [0, 1, 2] and ea[0]["eval/prompts"] == 7
    for x, y in zip(ea, eb):
        assert {k: v for k, v in x.items() if k.startswith("eval/")} == pytest.approx(
            {k: v for k, v in y.items() if k.startswith("eval/")}, rel=1e-6), x["step"]
    records = [(two[-1].parent / "out" / "eval" / f"step_{k}.jsonl").read_text() for k in (0, 2)]
    assert records == [(one[-1].parent / "out" / "eval" / f"step_{k}.jsonl").read_text() for k in (0, 2)]
    assert [json.loads(x)["index"] for x in records[0].splitlines()] == list(range(7))


@pytest.mark.multiproc
@pytest.mark.model
def test_cli_resume_under_another_world_size_and_a_failing_rank(tmp_path, tiny_model):
    config = _project(tmp_path, tiny_model, "run", save_steps=1)
    proc = _torchrun(["-m", "grpo_rollout", "train", str(config)], cwd=config.parent)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert proc.stdout.count("Training finished") == 1  # only rank 0 prints
    out = config.parent / "out"
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-2"]
    assert (out / "checkpoint-2" / "config.json").is_file()  # a plain save_pretrained folder

    # two processes continue with two processes ...
    proc = _torchrun(["-m", "grpo_rollout", "train", str(config), "training.max_steps=3", "--resume", "latest"],
                     cwd=config.parent)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [m["step"] for m in _metrics(config)] == [1, 2, 3]
    # ... and one process continues what two saved (optimizer state and schedule carry over; RNG is re-seeded)
    proc = subprocess.run([sys.executable, "-m", "grpo_rollout", "train", str(config), "training.max_steps=4",
                           "--resume", "latest"], cwd=config.parent, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "saved by 2 process(es), this run has 1" in proc.stdout
    assert [m["step"] for m in _metrics(config)] == [1, 2, 3, 4]

    # a rollout that raises on rank 1 only (its second step's prompts) stops both, naming rank 1
    failing = _project(tmp_path, tiny_model, "fail", prompts=("Count to {i}.",) * 12 + ("FAIL {i}",) * 4)
    proc = _torchrun(["-m", "grpo_rollout", "train", str(failing)], cwd=failing.parent)
    assert proc.returncode != 0
    assert "rank 1: RolloutError: the rollout function" in proc.stdout and "FAIL" in proc.stdout
    assert (failing.parent / "out" / "checkpoint-1" / "trainer_state.pt").is_file()  # the finished step is kept
    assert not (failing.parent / "out" / "checkpoint-2").exists()


def test_prompts_per_step_must_divide_by_the_processes(tmp_path, monkeypatch):
    from grpo_rollout.preflight import check_config

    config = _project(tmp_path, tmp_path / "model", "check", prompts_per_step=6)
    (tmp_path / "model").mkdir(exist_ok=True)
    _, problems = check_config(config, processes=4)  # what `validate-config --nproc 4` checks
    [p] = [p for p in problems if p.key == "training.prompts_per_step"]
    assert "not divisible by the 4 training processes" in p.message and p.fix.startswith(
        "set training.prompts_per_step to 4 or 8")
    monkeypatch.setenv("WORLD_SIZE", "2")
    _, problems = check_config(config, ["training.micro_batch_size=8"])
    [p] = [p for p in problems if p.key == "training.micro_batch_size"]
    assert "each of the 2 processes has 3 × 4 = 12 sequences" in p.message  # torchrun's WORLD_SIZE, read by train
    from typer.testing import CliRunner

    from grpo_rollout.cli.main import app

    result = CliRunner().invoke(app, ["validate-config", str(config), "--nproc", "4", "--quiet"])
    assert result.exit_code == 1 and "not divisible by the 4 training processes" in result.output


def test_server_settings_that_do_not_fit_together(tmp_path):
    from grpo_rollout.preflight import check_config

    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    config = _project(tmp_path, tmp_path / "model", "servers")
    _, problems = check_config(config, ["vllm.mode=spawn", "vllm.num_servers=2", "vllm.server_devices=[\"1\"]"])
    [p] = [p for p in problems if p.key == "vllm.server_devices"]
    assert "names devices for 1 server(s) but vllm.num_servers is 2" in p.message
    _, problems = check_config(config, ["vllm.mode=attach", "vllm.urls=[http://127.0.0.1:9]"])
    assert not [p for p in problems if p.key.startswith("vllm") and p.is_error]  # urls alone are enough
    _, problems = check_config(config, ["vllm.weight_transfer=nccl"])
    [p] = [p for p in problems if p.key == "vllm.weight_transfer"]
    assert "needs CUDA" in p.message


UNEVEN = '''
def uneven_rollout(prompts, n, client, tokenizer, temperature, top_k, max_completion_length, **kwargs):
    """Samples through the trainer's in-process client, calling it once per prompt plus once per "extra" word:
    ranks holding other prompts call generate() a different number of times (as multi-turn episodes do)."""
    prompt_ids, completion_ids, logprobs = [], [], []
    for p in prompts:
        ids = tokenizer(p)["input_ids"]
        for _ in range(p.count("extra")):  # thrown away: only there to make this rank generate more often
            client.generate([ids], n=1, temperature=temperature, top_k=top_k, max_tokens=3)
        out = client.generate([ids], n=n, temperature=temperature, top_k=top_k, max_tokens=max_completion_length)
        prompt_ids.append(ids)
        completion_ids += out.completion_ids
        logprobs += out.logprobs
    return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": logprobs}
'''


@pytest.mark.multiproc
@pytest.mark.model
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_in_process_generation_under_two_processes(tmp_path, tiny_model, dtype):
    """Issue 18.1: ``torchrun --nproc-per-node 2 -m grpo_rollout train`` with ``vllm.mode: off`` crashed at the first
    log-prob pass ("FSDP requires running forward through the root module first"). Now both ranks generate from the
    whole current weights (sampler and trainer log-probs agree), even when one rank calls generate() more often.
    In bfloat16 (issue 18.2) FSDP2 gathers bfloat16 weights over float32 shards: the checkpoint stays float32 and
    every non-embedding weight moves."""
    config = _project(tmp_path, tiny_model, "inproc", prompts=("Name a colour {i}.", "Name a colour {i} extra extra."),
                      max_steps=2, prompts_per_step=4, save_rollouts="every")
    cfg = yaml.safe_load(config.read_text())
    (config.parent / "task.py").write_text(TASK + UNEVEN)
    cfg["rollout"]["function"] = "task.py:uneven_rollout"
    cfg["data"]["shuffle"] = False  # rank 0 gets rows 0-1 (one "extra" row), rank 1 rows 2-3 of each step
    cfg["sampling"].update(temperature=1.0, top_k=20)
    cfg["model"]["dtype"] = dtype
    config.write_text(yaml.safe_dump(cfg, sort_keys=False))
    proc = _torchrun(["-m", "grpo_rollout", "train", str(config)], cwd=config.parent, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    rows = _metrics(config)
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:  # sampled from exactly the weights the trainer scores with (the step's, gathered whole)
        assert row["sampler/logprob_abs_diff"] < (1e-4 if dtype == "float32" else 0.05), row
    records = [json.loads(line) for line in
               (config.parent / "out" / "rollouts" / "step_2.jsonl").read_text().splitlines()]
    assert len(records) == 16  # both ranks' 2 prompts × 4 completions
    after = load_file(config.parent / "out" / "checkpoint-2" / "model.safetensors")
    before = load_file(tiny_model / "model.safetensors")
    assert {t.dtype for t in after.values()} == {torch.float32}
    assert all(not torch.equal(after[k], before[k]) for k in before if "embed_tokens" not in k)
