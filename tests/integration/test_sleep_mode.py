"""``vllm.sleep_during_training`` (issue 23): the server sleeps while the trainer computes and wakes before the sync.

No GPU here and vLLM's CPU build has no sleep mode, so the server is the real grpo-rollout routes over a scripted
engine (it records what it is asked, in order, and refuses to generate asleep); ``benchmarks/gpu.sh`` runs it for real.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import socket
import threading
import time
from types import SimpleNamespace
from typing import Any, List

import httpx
import pytest
from fastapi import FastAPI

from grpo_rollout.generation.multi_server import MultiServerClient
from grpo_rollout.generation.server.plugin import GrpoRolloutPlugin
from grpo_rollout.generation.server.state import _State
from grpo_rollout.generation.vllm_client import ServerError, VllmClient


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

    def __init__(self, vocab: int = 64, sleep_mode: bool = True, tokenizer: Any = None, api_keys=(),
                 trusted: bool = True):
        from unittest import mock

        import uvicorn
        from vllm import SamplingParams  # noqa: F401 - /generate/ imports it: the first import, inside a request,
        # took over the client's 10 s on a loaded machine

        from grpo_rollout.generation.server.access import TRUSTED_ENV

        self.engine = ScriptedEngine(vocab)
        app = FastAPI()
        app.state.args = SimpleNamespace(api_key=list(api_keys) or None)  # as vLLM sets it before the plugins
        with mock.patch.dict(os.environ, {TRUSTED_ENV: "1" if trusted else "0"}):  # what the launcher sets
            GrpoRolloutPlugin().attach_router(app)
        app.state.grpo_rollout = _State(self.engine, tokenizer, "scripted", 4096, vocab, list(api_keys),
                                        sleep_mode=sleep_mode, trusted=trusted)
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
