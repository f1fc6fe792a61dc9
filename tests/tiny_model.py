"""A tiny random Llama with the embedded model's real tokenizer (fast enough for training tests, servable by vLLM:
head_dim 32)."""

from __future__ import annotations

from pathlib import Path


def make_tiny_model(folder: Path, seed: int = 0) -> Path:
    """Write a 2-layer, hidden-64 LlamaForCausalLM (vocab 49152, tied embeddings) plus tokenizer into ``folder``."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from grpo_rollout.models.builtin import resolve_model_path

    if (folder / "config.json").is_file():
        return folder
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path("builtin:smollm2-135m-instruct"))
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=512,
                         tie_word_embeddings=True, bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
