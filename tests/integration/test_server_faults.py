"""Fault injection on the generation server (issue 9): transient HTTP failures are retried with backoff; a server
that dies mid-run stops the run with the finished steps saved and a message naming the server and its log."""

from __future__ import annotations

import asyncio
import http.server
import io
import json
import threading
from pathlib import Path
from typing import List

import httpx
import pytest
from rich.console import Console

from grpo_rollout.generation.vllm_client import ServerError, VllmClient
from helpers import send_json

OK_BODY = {"prompt_ids": [[1]], "completion_ids": [[5, 6]], "logprobs": [[-0.5, -0.25]], "finish_reasons": ["stop"]}


class FlakyServer:
    """A loopback HTTP server that answers POSTs from a script: an int is that status code (with a small JSON
    body), ``"reset"`` closes the connection without answering, ``"ok"`` answers :data:`OK_BODY`."""

    def __init__(self, script: List):
        self.script, self.seen = list(script), 0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's naming
                self.rfile.read(int(self.headers.get("content-length", 0)))
                step = outer.script[min(outer.seen, len(outer.script) - 1)]
                outer.seen += 1
                if step == "reset":
                    self.close_connection = True
                    self.connection.close()
                    return
                status, body = (200, OK_BODY) if step == "ok" else (step, {"detail": f"status {step}"})
                send_json(self, status, body)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def flaky():
    servers = []

    def make(script):
        servers.append(FlakyServer(script))
        return servers[-1]

    yield make
    for s in servers:
        s.close()


def _client(url: str, retries: int = 3) -> VllmClient:
    return VllmClient(url, tokenizer=None, retries=retries, retry_backoff_s=0.01)


@pytest.mark.parametrize("script, requests", [
    ([503, 503, "ok"], 3),
    (["reset", "ok"], 2),
    ([502, "reset", 504, "ok"], 4),
])
def test_transient_failures_are_retried(flaky, script, requests):
    server = flaky(script)
    result = _client(server.url).generate([[1]], max_tokens=2)
    assert result.completion_ids == [[5, 6]] and server.seen == requests
    server.seen = 0  # the async form retries the same way
    result = asyncio.run(_client(server.url).agenerate([[1]], max_tokens=2))
    assert result.completion_ids == [[5, 6]] and server.seen == requests


def test_retries_give_up_with_the_server_and_request_named(flaky):
    server = flaky([503])
    with pytest.raises(ServerError, match=r"the vLLM server at http://127\.0\.0\.1:\d+ failed POST /generate/ after 4 "
                                          r"attempts: HTTP 503; check that the server is running"):
        _client(server.url).generate([[1]])
    assert server.seen == 4


def test_refusals_are_not_retried(flaky):
    server = flaky([400])
    with pytest.raises(ServerError, match=r"POST /generate/ to http://.*: HTTP 400: status 400"):
        _client(server.url).generate([[1]])
    assert server.seen == 1


def test_nothing_listening_is_a_named_error_after_retries(flaky):
    server = flaky(["ok"])
    url = server.url
    server.close()
    with pytest.raises(ServerError, match=r"failed POST /update_weights/ after 3 attempts: ConnectError"):
        _client(url, retries=2)._request("POST", "/update_weights/", json={})


# --- a real server that dies mid-run --------------------------------------------------------------------------------

KILLING_ROLLOUT = '''
import os, signal, threading
from grpo_rollout.rollouts.single_turn import single_turn

def rollout(prompts, client, step, **sampling):
    """At step 2 (index 1) kill the spawned server while its generation request is in flight. The tiny model may
    answer in under 0.15 s (then step 2 trained and step 3's request failed): a second request once the server has
    died keeps the failure in step 2 either way."""
    if step == 1:
        pid = client.server.process.pid
        threading.Timer(0.15, lambda: os.killpg(pid, signal.SIGKILL)).start()
        single_turn(prompts, client=client, **sampling)
        client.server.process.wait(timeout=60)
    return single_turn(prompts, client=client, **sampling)
'''

KILLING_REWARD = '''
import os, signal

def kill_before_sync(completions, step, **kwargs):
    """At step 2 (index 1) kill the attached server between generation and the weight sync."""
    if step == 1:
        os.killpg(PID, signal.SIGKILL)
    return [float(len(c) % 2) for c in completions]
'''


def _config(root: Path, model: Path, **vllm):
    from grpo_rollout.config import config_from_dict

    (root / "data.jsonl").write_text("".join(json.dumps({"prompt": f"Say {i}"}) + "\n" for i in range(8)))
    cfg, problems = config_from_dict({
        "model": {"name_or_path": str(model)},
        "data": {"train": str(root / "data.jsonl")},
        "rewards": [{"function": "grpo_rollout.rewards.library:length_penalty"}],
        "sampling": {"num_generations": 4, "max_completion_length": 120, "max_prompt_length": 32, "seed": 0},
        "training": {"output_dir": str(root / "out"), "max_steps": 4, "prompts_per_step": 2, "micro_batch_size": 8,
                     "learning_rate": 1e-3},
        "vllm": {"kv_cache_space_gib": 1, **vllm},
    })
    assert not [p for p in problems if p.is_error], problems
    return cfg


@pytest.mark.vllm
@pytest.mark.model
def test_spawned_server_killed_during_generation(tmp_path, tiny_model):
    from grpo_rollout.trainer import train
    from grpo_rollout.trainer.reporting.progress import RichReporter

    (tmp_path / "killing_rollout.py").write_text(KILLING_ROLLOUT)
    cfg = _config(tmp_path, tiny_model, mode="spawn")
    cfg.rollout.function = f"{tmp_path / 'killing_rollout.py'}:rollout"
    buffer = io.StringIO()
    with pytest.raises(ServerError) as info:
        train(cfg, base_dir=tmp_path, reporter=RichReporter(Console(file=buffer, width=300)))
    message = str(info.value)
    assert "the vLLM server at http://127.0.0.1:" in message and "failed POST /generate/" in message
    assert "the server process exited with code -9" in message and str(tmp_path / "out" / "vllm.log") in message
    out = tmp_path / "out"
    assert (out / "checkpoint-1" / "trainer_state.pt").is_file() and not (out / "checkpoint-2").exists()
    assert "Stopped after 1 step(s); saved" in buffer.getvalue() and "--resume latest" in buffer.getvalue()


@pytest.mark.vllm
@pytest.mark.model
def test_attached_server_killed_before_the_weight_sync(tmp_path, tiny_model):
    from grpo_rollout.generation.server.launch import ServerSettings
    from grpo_rollout.generation.spawn import ManagedServer
    from grpo_rollout.trainer import train
    from grpo_rollout.trainer.reporting.progress import RichReporter

    server = ManagedServer(ServerSettings(model=str(tiny_model), port=0, max_model_len=152, kv_cache_space_gib=1,
                                          api_key="key-51"), tmp_path / "server.log")
    server.start(timeout_s=600)
    try:
        # issue 51.14: the key guards vLLM's routes outside /v1 too; only GET /health answers without it
        for method, path in [("POST", "/invocations"), ("POST", "/scale_elastic_ep"), ("POST", "/tokenize"),
                             ("POST", "/detokenize"), ("GET", "/metrics"), ("GET", "/v1/models"),
                             ("POST", "/update_weights/"), ("POST", "/set_weight_version/"), ("GET", "/health/")]:
            assert httpx.request(method, server.url + path, json={}, timeout=30).status_code == 401, path
        assert httpx.get(server.url + "/health", timeout=30).status_code == 200
        keyed = httpx.post(server.url + "/tokenize", json={"prompt": "hi"}, timeout=30,
                           headers={"Authorization": "Bearer key-51"})
        assert keyed.status_code == 200 and keyed.json()["tokens"]
        (tmp_path / "killing_reward.py").write_text(KILLING_REWARD.replace("PID", str(server.process.pid)))
        cfg = _config(tmp_path, tiny_model, mode="attach", url=server.url, api_key="key-51")  # sent on every request
        cfg.rewards[0].function = f"{tmp_path / 'killing_reward.py'}:kill_before_sync"
        with pytest.raises(ServerError, match=r"the vLLM server at http://127\.0\.0\.1:\d+ failed POST "
                                              r"/update_weights/ after 4 attempts: ConnectError"):
            train(cfg, base_dir=tmp_path, reporter=RichReporter(quiet=True))
    finally:
        server.stop()
    # step 2's update was applied before the sync failed: it is kept, so a resume does not redo it
    assert (tmp_path / "out" / "checkpoint-2" / "trainer_state.pt").is_file()


@pytest.mark.parametrize("host, api_key, trusted, warned", [
    ("0.0.0.0", None, False, "can generate."), ("192.0.2.7", None, True, "can generate and replace the weights."),
    ("0.0.0.0", None, True, "can generate and replace the weights."), ("127.0.0.1", None, True, None),
    ("0.0.0.0", "secret", False, None), ("0.0.0.0", "secret", True, None),
])
def test_serve_beyond_loopback_without_a_key_warns(monkeypatch, tmp_path, host, api_key, trusted, warned):
    """`grpo-rollout serve --host 0.0.0.0` without --api-key: anyone who can reach it can generate, and with
    --trusted-network replace the weights (issue 51.14: without it they are refused)."""
    import os

    from grpo_rollout.cli.serve_cmd import run_serve

    launched = []
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    monkeypatch.setattr(os, "execvpe", lambda prog, argv, env: launched.append(argv))
    buffer = io.StringIO()
    code = run_serve(Console(file=buffer, width=300), None, model=str(tmp_path), host=host, port=8011,
                     max_model_len=None, api_key=api_key, extra=[], trusted_network=trusted)
    assert code == 0 and launched and launched[0][launched[0].index("--host") + 1] == host
    text = buffer.getvalue()
    said = "Listening beyond this machine without --api-key: anyone who reaches the port "
    assert (said in text) is (warned is not None)
    if warned:
        assert said + warned in text
