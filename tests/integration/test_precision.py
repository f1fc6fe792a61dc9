"""``model.dtype: bfloat16`` trains float32 master weights under bfloat16 compute (issue 18.2).

In pure bfloat16 one AdamW step at lr 1e-6 changed 0.9% of a tiny Llama's weights (the updates round away), against
50.8% in float32. Now the weights, the optimizer state and the checkpoints stay float32, so small updates land; the
servers get the weights in their own dtype.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from grpo_rollout.trainer import train
from grpo_rollout.trainer.parallel.precision import Precision
from grpo_rollout.trainer.reporting.progress import RichReporter
from tiny_model import tiny_config


def _changed_fraction(before: dict, after: dict) -> float:
    """Share of the weights that moved, the embedding left out (only the rows of tokens seen get a gradient)."""
    names = [k for k in before if "embed_tokens" not in k]
    changed = sum(int((after[k].float() != before[k].float()).sum()) for k in names)
    return changed / sum(before[k].numel() for k in names)


@pytest.mark.model
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_small_updates_land_in_bfloat16(tmp_path, tiny_model, dtype):
    """One step at the default learning rate 1e-6: about half the weights move in both dtypes, and the checkpoint
    holds float32 master weights."""
    config = tiny_config(tmp_path, tiny_model, training={"max_steps": 1, "learning_rate": 1e-6})
    config.model.dtype = dtype
    result = train(config, base_dir=tmp_path, reporter=RichReporter(quiet=True))
    before = load_file(tiny_model / "model.safetensors")
    after = load_file(result.checkpoint / "model.safetensors")
    assert {t.dtype for t in after.values()} == {torch.float32}
    fraction = _changed_fraction(before, after)
    assert fraction > 0.3, f"{dtype}: only {fraction:.1%} of the weights changed"  # pure bfloat16 gave 0.9%
    assert result.history[0]["sampler/logprob_abs_diff"] < (1e-4 if dtype == "float32" else 0.05)


@pytest.mark.model
def test_bfloat16_resume_matches_an_uninterrupted_run(tmp_path, tiny_model):
    """Float32 master weights and AdamW state in the checkpoint: 2 + resume + 2 steps equal 4 steps."""
    def config(root: Path, steps: int):
        cfg = tiny_config(root, tiny_model, training={"max_steps": steps, "save_steps": 2})
        cfg.model.dtype = "bfloat16"
        return cfg

    full, part = tmp_path / "full", tmp_path / "part"
    full.mkdir(), part.mkdir()
    quiet = RichReporter(quiet=True)
    train(config(full, 4), base_dir=full, reporter=quiet)
    train(config(part, 2), base_dir=part, reporter=quiet)
    train(config(part, 4), base_dir=part, resume="latest", reporter=quiet)
    a = load_file(full / "out" / "checkpoint-4" / "model.safetensors")
    b = load_file(part / "out" / "checkpoint-4" / "model.safetensors")
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)


def test_weights_reach_the_server_in_its_dtype():
    """Cast for the server, tied tensors still shared, integer buffers untouched; float32 is passed through."""
    embedding = torch.randn(8, 4)
    weights = {"model.embed_tokens.weight": embedding, "lm_head.weight": embedding, "steps": torch.arange(3)}
    cast = Precision(torch.bfloat16, "cpu").for_server(weights)
    assert cast["model.embed_tokens.weight"].dtype == torch.bfloat16
    assert torch.equal(cast["model.embed_tokens.weight"], embedding.to(torch.bfloat16))
    assert cast["lm_head.weight"] is cast["model.embed_tokens.weight"]
    assert cast["steps"] is weights["steps"]
    assert Precision(torch.float32, "cpu").for_server(weights) is weights
    assert weights["lm_head.weight"].dtype == torch.float32  # the master copy is not changed


def test_load_dtype_is_float32_except_for_a_lora_base():
    p = Precision.from_config("bfloat16", torch.device("cpu"))
    assert p.load_dtype(lora=False) == "float32" and p.load_dtype(lora=True) == "bfloat16"
    assert p.fsdp_policy().param_dtype == torch.bfloat16 and p.fsdp_policy().reduce_dtype == torch.float32
    assert Precision.from_config("float32", torch.device("cpu")).fsdp_policy() is None


@pytest.mark.model
def test_lora_adapters_stay_float32_over_a_bfloat16_base(tiny_model):
    """A LoRA policy loads its frozen base in ``model.dtype``; the trained adapters are float32 (PEFT's default)."""
    from transformers import AutoModelForCausalLM

    from grpo_rollout.models.lora import apply_lora

    base = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.bfloat16)
    lora = apply_lora(base, 4, 8)
    trained = {p.dtype for p in lora.parameters() if p.requires_grad}
    frozen = {p.dtype for p in lora.parameters() if not p.requires_grad}
    assert trained == {torch.float32} and frozen == {torch.bfloat16}
