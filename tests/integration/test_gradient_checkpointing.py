"""``training.gradient_checkpointing`` is on by default (issue 23: the trainer's peak memory, docs/benchmarks.md):
it changes what the backward pass keeps, never the update. Two steps with and without it give the same weights, on
the Llama-shaped model, the GPT-2 with dropout 0.1 (the recomputed forward must draw the same dropout masks), with
LoRA and in bfloat16."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from grpo_rollout.config import config_from_dict
from grpo_rollout.trainer import train
from grpo_rollout.trainer.reporting.progress import RichReporter
from tiny_model import tiny_config


def test_it_is_on_by_default():
    config, _ = config_from_dict({})
    assert config.training.gradient_checkpointing is True


def _weights(root: Path, model_dir: Path, checkpointing: bool, sections: dict) -> dict:
    root.mkdir()
    cfg = tiny_config(root, model_dir, training={"max_steps": 2, "gradient_checkpointing": checkpointing,
                                                 **sections.get("training", {})})
    m = sections.get("model", {})
    cfg.model.dtype = m.get("dtype", cfg.model.dtype)
    for key, value in m.get("lora", {}).items():
        setattr(cfg.model.lora, key, value)
    result = train(cfg, base_dir=root, reporter=RichReporter(quiet=True))
    assert result.steps == 2
    folder = result.checkpoint
    file = folder / "model.safetensors" if (folder / "model.safetensors").exists() else \
        folder / "adapter_model.safetensors"
    return load_file(file)


@pytest.mark.parametrize("model_name, sections", [
    ("tiny_model", {}),
    ("tiny_gpt2", {}),  # dropout 0.1 in every layer
    ("tiny_model", {"model": {"lora": {"r": 4, "alpha": 8}}, "training": {"learning_rate": 1e-2}}),
    ("tiny_model", {"model": {"dtype": "bfloat16"}}),
])
def test_checkpointing_changes_memory_not_the_update(tmp_path, request, monkeypatch, model_name, sections):
    from transformers import PreTrainedModel

    model = request.getfixturevalue(model_name)
    enabled = []
    real = PreTrainedModel.gradient_checkpointing_enable
    monkeypatch.setattr(PreTrainedModel, "gradient_checkpointing_enable",
                        lambda self, *a, **kw: (enabled.append(type(self).__name__), real(self, *a, **kw))[1])
    on = _weights(tmp_path / "on", model, True, sections)
    assert enabled, "the run did not turn checkpointing on"
    enabled.clear()
    off = _weights(tmp_path / "off", model, False, sections)
    assert not enabled
    before = load_file(model / "model.safetensors")
    assert on.keys() == off.keys()
    # trained: base weights moved, or (LoRA) the adapters' B matrices left their zero start
    moved = [k for k in on if (not torch.equal(on[k], before[k]) if k in before else
                               "lora_B" in k and bool(on[k].abs().max() > 0))]
    assert moved, "nothing was trained"
    for name in on:
        torch.testing.assert_close(on[name], off[name], rtol=0, atol=1e-6 if "dtype" not in sections.get(
            "model", {}) else 1e-5, msg=name)


def test_a_model_without_checkpointing_trains_without_it_and_says_so(tmp_path, tiny_model, monkeypatch):
    from transformers import LlamaForCausalLM

    monkeypatch.setattr(LlamaForCausalLM, "supports_gradient_checkpointing", False)
    said = []

    class Recording(RichReporter):
        def message(self, text: str) -> None:
            said.append(text)

    cfg = tiny_config(tmp_path, tiny_model, training={"max_steps": 1})  # the default: on
    assert train(cfg, base_dir=tmp_path, reporter=Recording(quiet=True)).steps == 1
    assert any("LlamaForCausalLM does not support it; training without it" in t and
               "training.gradient_checkpointing: false" in t for t in said), said
