"""LoRA training through PEFT (issue 13): only the adapters train, the reference is the base model (adapters off),
checkpoints hold the adapter (and on request a merged model), resume restores it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from peft import PeftModel
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from grpo_rollout.config.schema import LoraConfig
from grpo_rollout.models.lora import ADAPTER_CONFIG, ADAPTER_WEIGHTS, MERGED_DIR
from grpo_rollout.trainer import recipe, train
from grpo_rollout.trainer.reporting.progress import RichReporter
from tiny_model import tiny_config
from lora_helpers import ALPHA, R, _batch, _logprobs, expected_lora_parameters


def _quiet() -> RichReporter:
    return RichReporter(quiet=True)


def _lora_config(root: Path, model: Path, **training):
    """:func:`tiny_config` with LoRA (r 4, alpha 8, all linear layers) and a learning rate for adapters."""
    cfg = tiny_config(root, model, training={"learning_rate": 1e-2, **training})
    cfg.model.lora = LoraConfig(r=R, alpha=ALPHA)
    return cfg


# --- training -------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def lora_run(tiny_model, tmp_path_factory):
    """Two LoRA steps with a KL term and ``save_merged``; returns (result, the finished GRPORecipe, the run folder)."""
    root = tmp_path_factory.mktemp("lora_run")
    runs = []
    real_close = recipe.GRPORecipe.cleanup

    def close(self):
        runs.append(self)
        real_close(self)

    mp = pytest.MonkeyPatch()
    mp.setattr(recipe.GRPORecipe, "cleanup", close)
    try:
        result = train(_lora_config(root, tiny_model, max_steps=2, beta=0.1, save_merged=True), base_dir=root,
                       reporter=_quiet())
    finally:
        mp.undo()
    return result, runs[0], root


@pytest.mark.model
def test_only_adapters_train_and_base_weights_stay(lora_run, tiny_model):
    result, run, _ = lora_run
    model = run.policy.lm
    assert isinstance(model, PeftModel)
    in_optimizer = [p for group in run.optimizer.param_groups for p in group["params"]]
    name_of = {id(p): n for n, p in model.named_parameters()}
    assert all(".lora_A." in name_of[id(p)] or ".lora_B." in name_of[id(p)] for p in in_optimizer)
    assert sum(p.numel() for p in in_optimizer) == expected_lora_parameters(model.config, R) == 8704
    original = AutoModelForCausalLM.from_pretrained(tiny_model).state_dict()
    frozen = {n.replace("base_model.model.", "").replace(".base_layer.", "."): p
              for n, p in model.named_parameters() if ".lora_" not in n}
    assert set(frozen) | {"lm_head.weight"} == set(original)
    assert all(torch.equal(p, original[n]) for n, p in frozen.items())  # bit for bit, after 2 AdamW steps
    lora_b = [p for n, p in model.named_parameters() if ".lora_B." in n]
    assert all(p.abs().max() > 1e-4 for p in lora_b)  # B starts at 0: every adapter moved


@pytest.mark.model
def test_reference_is_the_base_model_with_adapters_off(lora_run):
    result, run, _ = lora_run
    assert run.ref is None  # no second copy of the weights
    rewards = [m["reward"] for m in result.history]
    assert len(rewards) == 2 and all(0.0 <= r <= 1.0 for r in rewards)
    assert result.history[0]["kl"] == 0.0  # B = 0 at step 1: policy == base
    assert result.history[1]["kl"] > 0.0


@pytest.mark.model
def test_saved_adapter_and_merged_model_reload_with_the_same_logprobs(lora_run, tiny_model):
    result, run, _ = lora_run
    ckpt = result.checkpoint
    assert ckpt.name == "checkpoint-2"
    assert (ckpt / ADAPTER_CONFIG).is_file() and (ckpt / ADAPTER_WEIGHTS).is_file()
    assert not (ckpt / "model.safetensors").exists()  # the frozen base is not copied into every checkpoint
    adapter_config = json.loads((ckpt / ADAPTER_CONFIG).read_text())
    assert adapter_config["r"] == R and adapter_config["lora_alpha"] == ALPHA
    batch = _batch(seed=3)
    live = _logprobs(run.policy, batch)
    reloaded = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model), ckpt)
    assert torch.equal(_logprobs(reloaded, batch), live)
    merged = AutoModelForCausalLM.from_pretrained(ckpt / MERGED_DIR)
    assert type(merged).__name__ == "LlamaForCausalLM" and not isinstance(merged, PeftModel)
    assert torch.allclose(_logprobs(merged, batch), live, atol=2e-5)
    with run.policy.lm.disable_adapter():
        base = _logprobs(run.policy, batch)
    assert (live - base).abs().max() > 1e-4  # the trained adapter is really in there


@pytest.mark.model
def test_resume_restores_the_adapter_like_an_uninterrupted_run(tmp_path, tiny_model):
    full_dir, part_dir = tmp_path / "full", tmp_path / "part"
    full_dir.mkdir(), part_dir.mkdir()
    full = train(_lora_config(full_dir, tiny_model, max_steps=4, save_steps=2), base_dir=full_dir, reporter=_quiet())
    first = train(_lora_config(part_dir, tiny_model, max_steps=2), base_dir=part_dir, reporter=_quiet())
    assert first.steps == 2
    resumed = train(_lora_config(part_dir, tiny_model, max_steps=4), base_dir=part_dir, resume="latest",
                    reporter=_quiet())
    assert resumed.steps == 4 and len(resumed.history) == 2
    assert [m["reward"] for m in resumed.history] == pytest.approx([m["reward"] for m in full.history[2:]], abs=1e-6)
    a = load_file(full_dir / "out" / "checkpoint-4" / ADAPTER_WEIGHTS)
    b = load_file(part_dir / "out" / "checkpoint-4" / ADAPTER_WEIGHTS)
    mid = load_file(part_dir / "out" / "checkpoint-2" / ADAPTER_WEIGHTS)
    assert set(a) == set(b) and len(a) == 2 * 7 * 2
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
    assert not all(torch.allclose(a[k], mid[k], atol=1e-6) for k in a)  # steps 3-4 trained the restored adapter

    # a LoRA checkpoint cannot be resumed as a full model (nor the other way round): said before anything trains
    other = tmp_path / "other"
    (other / "out").mkdir(parents=True)
    shutil.copytree(part_dir / "out" / "checkpoint-2", other / "out" / "checkpoint-2")
    cfg = tiny_config(other, tiny_model, training={"max_steps": 4})
    with pytest.raises(ValueError, match=r"LoRA adapter checkpoint but model.lora.r is 0"):
        train(cfg, base_dir=other, resume="latest", reporter=_quiet())
