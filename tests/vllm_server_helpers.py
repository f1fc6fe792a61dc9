"""What the real-server tests send: requests, a perturbed model, user rollouts that post to /generate/, configs."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import httpx
import torch
from transformers import AutoModelForCausalLM

from grpo_rollout.config import config_from_dict
from helpers import wait_until


def _generate(server, **body):
    return httpx.post(server.url + "/generate/", json={"max_tokens": 4, **body}, timeout=120)


def _perturbed(tiny_model: Path, scale: float = 0.5, seed: int = 1) -> torch.nn.Module:
    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():  # the (tied) embedding included: a sync test that skips it would miss a bug
            p.add_(torch.randn(p.shape, generator=gen) * scale * p.std().clamp(min=1e-3))
    return model


def requests_running(server) -> float:
    """vLLM's own gauge of the requests being generated."""
    lines = httpx.get(server.url + "/metrics", timeout=10).text.splitlines()
    return sum(float(x.rsplit(" ", 1)[1]) for x in lines if x.startswith("vllm:num_requests_running"))


def update_during_a_request(server, client, new_weights: torch.nn.Module, n: int):
    """Starts a request of ``n`` samples, has ``client`` update the weights to ``new_weights`` once it is being
    generated; returns its answer, the version before the update, and whether the server was still generating it when
    the update returned."""
    answer = {}
    thread = threading.Thread(target=lambda: answer.update(
        result=client.generate([[5, 6, 7]], n=n, temperature=1.0, max_tokens=240, seed=1)))
    thread.start()
    assert wait_until(lambda: requests_running(server) > 0, 60)  # until the request is being generated
    before = client.weight_version
    client.update_weights(new_weights)
    still_running = requests_running(server) > 0
    thread.join(timeout=300)
    result = answer["result"]
    assert len(result.completion_ids) == n and all(len(lp) == len(ids) for ids, lp in
                                                    zip(result.completion_ids, result.logprobs))
    assert result.weight_version == before and client.weight_version == before + 1
    return result, before, still_running


def _greedy(server, prompt=(5, 6, 7)) -> list:
    return _generate(server, prompts=[list(prompt)], n=1, temperature=0.0, max_tokens=6).json()["completion_ids"]


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


def _attach_config(root: Path, server, tiny_model: Path, rollout_source: str, reward: str, steps: int = 2):
    (root / "user_rollout.py").write_text(rollout_source.replace("URL", repr(server.url)).replace("MODEL",
                                                                                                   repr(str(tiny_model))))
    (root / "data.jsonl").write_text("".join(json.dumps({"prompt": f"Say {i}"}) + "\n" for i in range(6)))
    cfg, problems = config_from_dict({
        "model": {"name_or_path": str(tiny_model)},
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


VERSION_ROLLOUT = '''
from grpo_rollout.rollouts.single_turn import single_turn

SEEN = []

def rollout(prompts, client, step, **sampling):
    """Single-turn sampling that records which weight version the server held when the step's rollout began."""
    SEEN.append((step, client.health()["weight_version"]))
    return single_turn(prompts, client=client, **sampling)


def parity(completion_ids, **kwargs):
    """A reward with variance inside each group, so every update moves the weights."""
    return [float(sum(ids) % 2) for ids in completion_ids]
'''


#: Bodies ``/generate/`` must refuse: (body, status, a fragment of the reason).
BAD_GENERATE_BODIES = [
    ({"prompts": []}, 400, "prompts"),
    ({"prompts": ["x"], "n": 0}, 400, "n"),
    ({"prompts": [[10 ** 6]]}, 400, "outside"),
    ({"prompts": [{"bad": 1}]}, 400, "prompts"),
    ({"prompts": ["x"], "top_p": 2.0}, 400, "top_p"),
    ({"prompts": ["x"], "n": 2, "temperature": 0.0}, 400, "sampling"),
    # issue 9, server input: huge n / max_tokens, empty prompts, ids outside the vocabulary, wrong types
    ({"prompts": ["x"], "n": 10 ** 6}, 400, "less than or equal to 512"),
    ({"prompts": ["x"] * 100, "n": 200}, 400, "more than 16384 sequences"),
    ({"prompts": ["x"], "max_tokens": 10 ** 9}, 400, "together more than max_model_len 256; lower max_tokens to"),
    ({"prompts": [[1] * 250], "max_tokens": 10}, 400, "has 250 tokens and max_tokens is 10"),
    ({"prompts": [""]}, 400, "prompts[0] is empty"),
    ({"prompts": [[-1]]}, 400, "token id -1 is outside"),
    ({"prompts": [[True, 1]]}, 400, "prompts"),  # a boolean is not token id 1
    ({"prompts": [[{"role": "user"}]]}, 400, "message 0 has no string `content`"),
    ({"prompts": [[{"role": "robot", "content": "hi"}]]}, 400, "unknown role 'robot'"),
    ({"prompts": ["x"], "n": "two"}, 400, "n"),
    ({"prompts": ["x"], "max_new_tokens": 3}, 400, "max_new_tokens"),  # unknown keys are not ignored
    ({"prompts": ["x"], "stop": [""]}, 400, "stop strings must not be empty"),
]


def make_weight_folders(tiny_model: Path, root: Path) -> dict:
    """Weight folders a broken or malicious caller might send (in ``root``): wrong shapes, unknown and missing names,
    garbage, an empty folder."""
    from safetensors.torch import save_file

    good = {k: v.clone().contiguous() for k, v in AutoModelForCausalLM.from_pretrained(tiny_model).state_dict().items()}
    cases = {
        "shape": {**good, "model.layers.0.mlp.up_proj.weight": torch.zeros(3, 3)},
        "unknown": {**good, "model.layers.7.self_attn.extra.weight": torch.zeros(4)},
        "missing": {k: v for k, v in good.items() if k != "model.norm.weight"},
    }
    folders = {}
    for name, tensors in cases.items():
        (root / name).mkdir()
        save_file(tensors, str(root / name / "model.safetensors"))
        folders[name] = root / name
    (root / "garbage").mkdir()
    (root / "garbage" / "model.safetensors").write_bytes(b"\x00not a safetensors file")
    (root / "empty").mkdir()
    folders.update(garbage=root / "garbage", empty=root / "empty")
    return folders


def verifiers_config(root: Path, server, tiny_model: Path):
    """Issue 41.2 on the tiny model: the verifiers example taskset (examples/verifiers_sums/sums_taskset.py) trained
    two steps against ``server``. The random model rarely answers a sum, so the taskset's reward is mostly 0.2 or 0; a
    reward on the first sampled token's parity gives each step reward variance, so each step updates and measures the
    sampler/trainer gap (a step without signal measures none: issue 39.11)."""
    taskset = str(Path(__file__).resolve().parents[1] / "examples" / "verifiers_sums" / "sums_taskset.py")
    (root / "parity.py").write_text("def first_token_parity(completion_ids, **kwargs):\n"
                                    "    return [float(ids[0] % 2) for ids in completion_ids]\n")
    cfg, problems = config_from_dict({
        "model": {"name_or_path": str(tiny_model)},
        "data": {"train": f"verifiers:{taskset}", "task_kwargs": {"num_tasks": 8}},
        "rollout": {"function": "grpo_rollout.integrations.verifiers.verifiers:verifiers_rollout"},
        "rewards": [{"function": f"{root / 'parity.py'}:first_token_parity", "weight": 1.0}],
        "sampling": {"num_generations": 4, "max_completion_length": 16, "max_prompt_length": 96, "seed": 0},
        "training": {"output_dir": str(root / "out"), "max_steps": 2, "prompts_per_step": 2, "micro_batch_size": 8,
                     "learning_rate": 1e-3},
        "vllm": {"mode": "attach", "url": server.url},
    })
    assert not [p for p in problems if p.is_error], problems
    return cfg
