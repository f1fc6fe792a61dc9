"""The recording endpoint's rollouts (an agent that owns its loop, a verifiers 0.4 taskset) against the features they
meet (issue 41): LoRA, bf16 and a resumed run on the tiny GPT-2; two processes under torchrun on the tiny Llama, each
with its own endpoint (streaming on a vLLM server: tests/integration/test_vllm_server.py). Every trained token is
a sampled one (the sampler's log-probs agree with the trainer's), each call of an episode is recorded, and an agent's
context edit is trained as its own sequence."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent_helpers import write_agents

pytestmark = [pytest.mark.model, pytest.mark.slow]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "verifiers_sums" / "sums_taskset.py"
# a reward with variance on a random model, so each step updates and compares the sampler's log-probs with the trainer's
PARITY = "def first_token_parity(completion_ids, **kwargs):\n    return [float(ids[0] % 2) for ids in completion_ids]\n"
ROLLOUTS = {
    "agent": {"rollout": {"function": "grpo_rollout.rollouts.agent:agent_rollout",
                          "kwargs": {"agent": "agent.py:scored"}}},  # the openai example: a tool, then a checker
    "verifiers": {"rollout": {"function": "grpo_rollout.integrations.verifiers.verifiers:verifiers_rollout"},
                  "data": {"train": f"verifiers:{EXAMPLE}", "task_kwargs": {"num_tasks": 4}}},
}


def _config(root: Path, model: Path, how: str, model_settings=None, **training):
    from tiny_model import tiny_config

    from grpo_rollout.config import config_from_dict

    write_agents(root)
    cfg = tiny_config(root, model, rewards_source=PARITY, reward="first_token_parity",
                      sampling={"num_generations": 2, "max_completion_length": 24, "temperature": 1.0},
                      training={"prompts_per_step": 2, "micro_batch_size": 4, "save_rollouts": "every", **training},
                      **ROLLOUTS[how])
    if not model_settings:
        return cfg
    values = cfg.model_dump()
    values["model"].update(model_settings)  # tiny_config's own `model` is the folder
    cfg, problems = config_from_dict(values)
    assert not [p for p in problems if p.is_error], problems
    return cfg


def _records(out: Path, steps):
    return [json.loads(x) for step in steps for x in (out / "rollouts" / f"step_{step}.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("how", ["agent", "verifiers"])
def test_lora_bf16_and_a_resume_on_gpt2(tmp_path, tiny_gpt2, how):
    from grpo_rollout.trainer import train
    from grpo_rollout.trainer.reporting.progress import RichReporter

    quiet = RichReporter(quiet=True)
    lora_bf16 = {"dtype": "bfloat16", "lora": {"r": 4}}
    first = train(_config(tmp_path, tiny_gpt2, how, lora_bf16, max_steps=2, save_steps=2),
                  base_dir=tmp_path, reporter=quiet)
    resumed = train(_config(tmp_path, tiny_gpt2, how, lora_bf16, max_steps=3, save_steps=2),
                    base_dir=tmp_path, resume="latest", reporter=quiet)
    assert first.steps == 2 and resumed.steps == 3 and len(resumed.history) == 1
    history = first.history + resumed.history
    assert any(not m["no_signal_skipped"] for m in history)
    assert all(m["no_signal_skipped"] or m["sampler/logprob_abs_diff"] < 0.05 for m in history), history
    records = _records(tmp_path / "out", (1, 2, 3))
    assert len(records) == 3 * 2 * 2  # (weight versions need a server: with vllm.mode off they are null)
    assert all(len(r["extras"]["call_weight_versions"]) == r["extras"]["num_turns"] >= 1 for r in records)
    if how == "agent":  # the checker's call: an earlier sequence, trained
        assert all(len(r["segments"]) == 1 for r in records if r["extras"]["agent_result"] is not None)
    else:
        assert all(r["rewards"]["verifiers"] == r["extras"]["agent_result"]["reward"] for r in records)


@pytest.mark.multiproc
def test_two_processes_each_record_their_own_episodes(tmp_path, tiny_model):
    """A verifiers taskset under torchrun (its episodes are agent_rollout's, so this covers both: the suite's time)."""
    import yaml

    from test_distributed import _torchrun

    cfg = _config(tmp_path, tiny_model, "verifiers", max_steps=2, micro_batch_size=2)
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg.model_dump(), sort_keys=False))
    proc = _torchrun(["-m", "grpo_rollout", "train", str(tmp_path / "config.yaml")], cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    metrics = [json.loads(x) for x in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2]
    assert all(m["no_signal_skipped"] or m["sampler/logprob_abs_diff"] <= 1e-4 for m in metrics), metrics
    records = _records(tmp_path / "out", (1, 2))
    assert len(records) == 2 * 2 * 2 and {r["group"] for r in records} == {0, 1}
