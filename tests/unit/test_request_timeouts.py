"""A request that runs out of time says which limit it hit and what sets it (issue 28.9: a loaded machine can reach a
timeout, and the error read ``ReadTimeout: timed out``). A loopback server that reads every request and never
answers stands for a server too busy to answer."""

from __future__ import annotations

import asyncio
import http.server
import threading

import pytest

from grpo_rollout.generation import vllm_client
from grpo_rollout.generation.vllm_client import ServerError, VllmClient


@pytest.fixture
def silent():
    release = threading.Event()

    class Handler(http.server.BaseHTTPRequestHandler):
        def _hang(self):
            self.rfile.read(int(self.headers.get("content-length", 0)))
            release.wait(30)

        do_GET = do_POST = _hang  # noqa: N815 - http.server's naming

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    release.set()
    httpd.shutdown()
    httpd.server_close()


def test_each_timeout_is_named(silent, monkeypatch):
    monkeypatch.setattr(vllm_client, "HEALTH_TIMEOUT_S", 0.3)
    client = VllmClient(silent, tokenizer=None, timeout=0.3, sync_timeout=0.4)
    cases = [
        (client.health, "failed GET /health/: no answer within 0.3 s (the health check's limit)"),
        (lambda: client.generate([[1, 2]]), "failed POST /generate/: no answer within 0.3 s (VllmClient's request "
                                            "timeout)"),
        (lambda: asyncio.run(client.agenerate([[1, 2]])), "no answer within 0.3 s (VllmClient's request timeout)"),
        (client.sleep, "failed POST /sleep/: no answer within 0.4 s (vllm.sync_timeout_s)"),
        (client.wake_up, "failed POST /wake_up/: no answer within 0.4 s (vllm.sync_timeout_s)"),
    ]
    for call, expected in cases:
        with pytest.raises(ServerError) as caught:
            call()
        assert expected in str(caught.value)
        assert "overloaded" in str(caught.value)
    client.close()
