"""One GPU shared by the trainer and a spawned vLLM server (issue 23): the server's memory share, from the model and
the batch, on fake CUDA devices (no GPU here: `benchmarks/gpu.sh` runs it for real)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from grpo_rollout.config import config_from_dict
from grpo_rollout.generation.server.gpu_share import GIB, OVERHEAD_GIB, shared_gpu_share

# Qwen2.5-0.5B-Instruct's shape: 494 M parameters, 24 layers, 14 heads of 64, 2 KV heads
QWEN = SimpleNamespace(num_attention_heads=14, hidden_size=896, num_key_value_heads=2, num_hidden_layers=24)


def fake_model(device: str, params: int = 494_032_768, config=QWEN):
    param = SimpleNamespace(numel=lambda: params, device=torch.device(device))
    return SimpleNamespace(parameters=lambda: iter([param]), config=config)


def config(**vllm):
    cfg, problems = config_from_dict({"model": {"dtype": "bfloat16"}, "sampling": {"num_generations": 8},
                                      "training": {"prompts_per_step": 8}, "vllm": {"mode": "spawn", **vllm}})
    assert not problems
    return cfg


def test_the_share_is_what_the_server_needs():
    # weights 494 M × 2 B; KV cache 2 × 24 layers × 2 heads × 64 × 2 B × 768 tokens × 64 sequences; + 1 GiB
    weights, kv = 494_032_768 * 2, 2 * 24 * 2 * 64 * 2 * 768 * 64
    plan = shared_gpu_share(config(), fake_model("cuda:0"), 768, None, total_bytes=24 * GIB)
    assert plan.weights_gib == pytest.approx(weights / GIB) and plan.kv_cache_gib == pytest.approx(kv / GIB)
    assert plan.share == pytest.approx(0.11)  # (0.92 + 0.56 + 1) / 24 = 0.103, rounded up to a hundredth
    assert "gets gpu_memory_utilization 0.11" in plan.text() and "vllm.gpu_memory_utilization" in plan.text()
    assert (weights + kv + OVERHEAD_GIB * GIB) / (24 * GIB) <= plan.share < 0.9  # the trainer keeps ~89%, not 10%


@pytest.mark.parametrize("total_gib, share", [(80, 0.05), (4, 0.5)])  # a big GPU: the floor; a small one: the cap
def test_the_share_stays_within_its_bounds(total_gib, share):
    assert shared_gpu_share(config(), fake_model("cuda:0"), 768, None, total_bytes=total_gib * GIB).share == share


@pytest.mark.parametrize("cfg, device, server_devices", [
    (config(), "cpu", None),                                  # a CPU trainer: no GPU to share
    (config(), "cuda:0", "1"),                                # the server has its own device
    (config(gpu_memory_utilization=0.6), "cuda:0", None),     # the user chose the share
    (config(mode="attach", url="http://h:1"), "cuda:0", None),  # not spawned
])
def test_no_share_is_chosen_when_the_gpu_is_not_shared_or_the_user_chose(cfg, device, server_devices):
    assert shared_gpu_share(cfg, fake_model(device), 768, server_devices, total_bytes=24 * GIB) is None


def test_two_servers_on_the_trainers_gpu_split_the_cap():
    cfg = config(num_servers=2)
    plan = shared_gpu_share(cfg, fake_model("cuda:0"), 768, None, total_bytes=24 * GIB)
    assert plan.kv_cache_gib == pytest.approx(2 * 24 * 2 * 64 * 2 * 768 * 32 / GIB)  # half the sequences each
    assert plan.share == pytest.approx(0.10) and "2 vLLM servers share" in plan.text()  # (0.92 + 0.28 + 1) / 24
    small = shared_gpu_share(cfg, fake_model("cuda:0"), 768, None, total_bytes=4 * GIB)
    assert small.share == 0.25 and "Warning: the server needs" in small.text()  # 2 × 0.25: the trainer keeps half


def test_a_config_without_the_attention_shape_gets_the_cap_and_says_so():
    plan = shared_gpu_share(config(), fake_model("cuda:0", config=SimpleNamespace()), 768, None, total_bytes=24 * GIB)
    assert plan.share == 0.5 and plan.kv_cache_gib is None and "KV cache unknown" in plan.text()
