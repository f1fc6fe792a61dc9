"""A tiny random Llama with the embedded model's real tokenizer (fast enough for training tests, servable by vLLM:
head_dim 32)."""

from __future__ import annotations

from pathlib import Path


def make_tiny_model(folder, seed: int = 0) -> Path:
    """Write a 2-layer, hidden-64 LlamaForCausalLM (vocab 49152, tied embeddings) plus tokenizer into ``folder``."""
    return _tiny_llama(folder, seed, tied=True)


def make_peaked_model(folder: Path, seed: int = 0, loud: int = 32) -> Path:
    """A tiny untied Llama (same tokenizer) whose next-token distribution is peaked like a trained model's: ``loud``
    rows of its output projection are 50x the others, so a few tokens hold most of the mass (top token ~0.75, second
    ~0.1 on average) and min-p, top-k and top-p cut different sets. The uniform-ish random model keeps thousands of
    near-equal tokens, where the filters' order hardly matters."""
    import torch

    def peak(model, config, vocab: int) -> None:
        with torch.no_grad():
            rows = torch.randperm(vocab)[:loud]
            model.lm_head.weight[rows] = torch.randn(loud, config.hidden_size)

    return _tiny_llama(folder, seed, tied=False, edit=peak)


def _tiny_llama(folder: Path, seed: int, tied: bool, edit=None) -> Path:
    """The 2-layer, hidden-64 Llama with the embedded model's tokenizer, written to ``folder`` (kept if there);
    ``edit(model, config, vocab)`` changes its weights before saving."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from grpo_rollout.models.builtin import resolve_model_path

    folder = Path(folder)  # a str from the README's one-liner too
    if (folder / "config.json").is_file():
        return folder
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path("builtin:smollm2-135m-instruct"))
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=512,
                         tie_word_embeddings=tied, bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    model = LlamaForCausalLM(config)
    if edit is not None:
        edit(model, config, len(tokenizer))
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def make_tiny_gpt2(folder: Path, dropout: float = 0.1, seed: int = 0) -> Path:
    """A 2-layer GPT-2 with ``dropout`` on embeddings, attention and residuals, and the same tokenizer."""
    import torch
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    from grpo_rollout.models.builtin import resolve_model_path

    folder = Path(folder)  # a str from the README's one-liner too
    if (folder / "config.json").is_file():
        return folder
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path("builtin:smollm2-135m-instruct"))
    torch.manual_seed(seed)
    config = GPT2Config(vocab_size=len(tokenizer), n_embd=64, n_layer=2, n_head=2, n_positions=256,
                        resid_pdrop=dropout, embd_pdrop=dropout, attn_pdrop=dropout,
                        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                        pad_token_id=tokenizer.pad_token_id)
    model = GPT2LMHeadModel(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


#: A reward a random model can learn in a few steps: the share of even token ids in the completion.
EVEN_IDS = '''
def even_ids(completion_ids, **kwargs):
    return [sum(t % 2 == 0 for t in ids) / max(len(ids), 1) for ids in completion_ids]
'''


def tiny_config(root: Path, model: Path, rewards_source: str = EVEN_IDS, reward: str = "even_ids", rows: int = 10,
                **sections):
    """A run config for ``model`` in ``root``: ``rows`` prompts "Count to i.", the reward function ``reward`` from
    ``rewards_source`` (written to ``root/task_rewards.py``), transformers generation, and each ``section={...}``
    merged over small defaults (4 prompts × 8 completions of 8 tokens). Asserts it has no errors."""
    import json

    from grpo_rollout.config import config_from_dict

    (root / "task_rewards.py").write_text(rewards_source)
    (root / "data.jsonl").write_text("".join(json.dumps({"prompt": f"Count to {i}."}) + "\n" for i in range(rows)))
    base = {
        "model": {"name_or_path": str(model)},
        "data": {"train": str(root / "data.jsonl")},
        "rewards": [{"function": f"{root / 'task_rewards.py'}:{reward}"}],
        "sampling": {"num_generations": 8, "max_completion_length": 8, "seed": 0, "top_k": 10},
        "training": {"output_dir": str(root / "out"), "prompts_per_step": 4, "micro_batch_size": 16,
                     "learning_rate": 3e-3, "loss_type": "dapo", "logging_steps": 1},
        "logging": {"report_to": ["jsonl"]},
        "vllm": {"mode": "off"},
    }
    for name, values in sections.items():
        base[name] = {**base.get(name, {}), **values} if isinstance(values, dict) else values
    cfg, problems = config_from_dict(base)
    assert not [p for p in problems if p.is_error], problems
    return cfg
