"""The recording endpoint as a hostile neighbour and a huge request meet it (issue 51): it listens on 127.0.0.1, so
any local process could post into an episode's session (named ``s0, s1, ...``, no key checked) and have its call
trained with that episode's advantage; one 50 MB message stalled every episode and took 12 GB. Each session now has
an unguessable id and a key of its own, a body has a size limit, and a request's rendering runs off the endpoint's
loop."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading

import pytest

from agent_endpoint_helpers import Script

pytestmark = [pytest.mark.model]

ATTACK = r'''
import json, sys
import httpx

url, own_key, other_key = sys.argv[1:4]
body = {"model": "policy", "messages": [{"role": "user", "content": "Say I was here."}]}
said = {}
for name, headers in {"no key": {}, "a made-up key": {"Authorization": "Bearer grpo-rollout"},
                      "another episode's key": {"Authorization": f"Bearer {other_key}"}}.items():
    said[name] = httpx.post(f"{url}/chat/completions", json=body, headers=headers, timeout=30).status_code
said["models, no key"] = httpx.get(f"{url}/models", timeout=30).status_code
said["a guessed session"] = httpx.post(url.replace(url.split("/")[-2], "s1"), json=body, timeout=30,
                                       headers={"Authorization": f"Bearer {own_key}"}).status_code
print(json.dumps(said))
'''

AGENTS = '''
import subprocess, sys, threading

from openai import OpenAI

KEYS, BARRIER = {}, threading.Barrier(2)


def attacked(base_url, api_key, model, prompt, attack, index, **row):
    """Two episodes at once; another process posts into this one's session with no key, a made-up key and the other
    episode's key (as if it had leaked), then into a guessed session; then this episode makes its own call."""
    KEYS[index] = api_key
    BARRIER.wait(timeout=30)
    said = subprocess.run([sys.executable, "-c", attack, base_url, api_key, KEYS[1 - index]], capture_output=True,
                          text=True, timeout=60, check=True).stdout
    answer = OpenAI(base_url=base_url, api_key=api_key).chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Hi"}]).choices[0].message.content
    return {"said": said, "answer": answer, "base_url": base_url, "api_key": api_key}


def sized(base_url, api_key, model, prompt, limit, **row):
    """Bodies at the size limit's edge: exactly the limit, one byte over (said up front), and over it with no length
    said (a chunked body)."""
    import httpx
    http = httpx.Client(headers={"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"},
                        timeout=30)
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "Hi"}]}).encode()
    exact = body[:-1] + b" " * (limit - len(body)) + b"}"
    assert len(exact) == limit
    over = exact[:-1] + b" }"
    return {"exact": http.post(f"{base_url}/chat/completions", content=exact).status_code,
            "over": http.post(f"{base_url}/chat/completions", content=over).status_code,
            "over, chunked": http.post(f"{base_url}/chat/completions", content=iter([over[:100], over[100:]])).status_code,
            "message": http.post(f"{base_url}/chat/completions", content=over).json()["error"]["message"]}


DONE = threading.Event()


def spawner(base_url, api_key, model, prompt, wait, **row):
    """Starts a program for its episode (a sandbox, a shell tool); waits for it, or leaves it running."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)  # left-behind"])
    OpenAI(base_url=base_url, api_key=api_key).chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Hi"}])
    if wait:
        child.kill()
        child.wait()
    return child.pid


def slow_and_quick(base_url, api_key, model, prompt, slow, **row):
    """Episode 0 sends a request whose rendering is slow; episode 1 a quick one, which is answered meanwhile."""
    content = "SLOW" if slow else "Hi"
    answer = OpenAI(base_url=base_url, api_key=api_key).chat.completions.create(
        model=model, messages=[{"role": "user", "content": content}]).choices[0].message.content
    if not slow:
        DONE.set()
    return answer
'''.replace("import subprocess, sys, threading", "import json, subprocess, sys, threading")


def _play(tokenizer, tmp_path, function, rows, **kwargs):
    from grpo_rollout.rollouts.agent import agent_rollout
    from grpo_rollout.rollouts.run_end import end_run

    (tmp_path / "neighbours.py").write_text(AGENTS)
    try:
        return agent_rollout(["Hi"] * len(rows), client=Script(tokenizer), tokenizer=tokenizer, n=1,
                             agent="neighbours.py:" + function, base_dir=str(tmp_path), rows=rows,
                             max_completion_length=200, **kwargs)
    finally:
        end_run()


@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model)


def test_another_local_process_cannot_post_into_an_episode(tokenizer, tmp_path):
    out = _play(tokenizer, tmp_path, "attacked", [{"attack": ATTACK, "index": i} for i in range(2)])
    for result in out["agent_result"]:
        said = json.loads(result["said"])
        assert said == {"no key": 401, "a made-up key": 403, "another episode's key": 403, "models, no key": 401,
                        "a guessed session": 404}
        assert result["answer"] == "Hello there"
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/sessions/[0-9a-f]{32}/v1", result["base_url"])
        assert len(result["api_key"]) >= 40
    # only the episodes' own calls were recorded: one turn each, the attacker's message in no prompt
    assert out["num_turns"] == [1, 1] and out["segments"] == [[], []]
    assert all("I was here" not in tokenizer.decode(p) for p in out["prompt_ids"])
    first, second = out["agent_result"]
    assert first["base_url"] != second["base_url"] and first["api_key"] != second["api_key"]


def test_a_session_is_gone_once_its_episode_ended(tokenizer, tmp_path):
    import httpx

    from grpo_rollout.rollouts.agent.endpoint import shared_endpoint
    from grpo_rollout.rollouts.run_end import end_run

    out = _play(tokenizer, tmp_path, "attacked", [{"attack": ATTACK, "index": i} for i in range(2)])
    try:  # a later run's endpoint (another port) or this one: the old URL and key answer nothing
        endpoint = shared_endpoint()
        old = out["agent_result"][0]
        url = re.sub(r":\d+/", f":{endpoint.port}/", old["base_url"])
        said = httpx.post(f"{url}/chat/completions", headers={"Authorization": f"Bearer {old['api_key']}"},
                          json={"model": "policy", "messages": [{"role": "user", "content": "Hi"}]}, timeout=30)
        assert said.status_code == 404 and "this episode has ended" in said.json()["error"]["message"]
    finally:
        end_run()


@pytest.mark.parametrize("limit", [1024, 4096])
def test_a_body_over_the_limit_is_a_413_at_the_limit_it_is_read(tokenizer, tmp_path, limit):
    out = _play(tokenizer, tmp_path, "sized", [{"limit": limit}], max_request_bytes=limit)
    [result] = out["agent_result"]
    assert (result["exact"], result["over"], result["over, chunked"]) == (200, 413, 413)
    assert f"longer than {limit} bytes (rollout.kwargs.max_request_bytes)" in result["message"]
    assert out["num_turns"] == [1]


def test_the_default_limit_refuses_a_50_mb_message(tokenizer, tmp_path):
    from grpo_rollout.rollouts.agent.requests import MAX_REQUEST_BYTES

    assert MAX_REQUEST_BYTES == 4 * 2 ** 20
    out = _play(tokenizer, tmp_path, "sized", [{"limit": MAX_REQUEST_BYTES}])
    assert out["agent_result"][0]["over"] == 413


def test_validate_config_checks_the_limit(tmp_path):
    from grpo_rollout.rollouts.agent.agent_rollout import validate_kwargs

    (tmp_path / "neighbours.py").write_text(AGENTS)
    for bad in (0, -1, "4MB", 1.5, None):
        [(key, message, _)] = validate_kwargs({"agent": "neighbours.py:sized", "max_request_bytes": bad},
                                              base_dir=tmp_path)
        assert key == "rollout.kwargs.max_request_bytes" and "must be an integer >= 1" in message
    assert validate_kwargs({"agent": "neighbours.py:sized", "max_request_bytes": 1}, base_dir=tmp_path) == []


def test_a_slow_request_does_not_stall_the_other_episodes(tokenizer, tmp_path, monkeypatch):
    """Rendering and tokenizing ran on the endpoint's one event loop: a huge message stalled every episode. The slow
    rendering here waits (up to 30 s) for the other episode's answer, which comes only if the loop is free."""
    from grpo_rollout.user_code.resolve import module_name_for

    render, seen = tokenizer.apply_chat_template, {}

    def slow_render(messages, *args, **kwargs):
        if any("SLOW" in str(m.get("content")) for m in messages):
            module = sys.modules[module_name_for(tmp_path / "neighbours.py")]
            seen["waited"] = module.DONE.wait(timeout=30)
            seen["thread"] = threading.current_thread().name
        return render(messages, *args, **kwargs)

    monkeypatch.setattr(tokenizer, "apply_chat_template", slow_render)
    out = _play(tokenizer, tmp_path, "slow_and_quick", [{"slow": True}, {"slow": False}])
    assert seen["waited"] is True and seen["thread"] != "grpo-rollout-agent-endpoint"
    assert out["agent_result"] == ["Hello there", "Hello there"]


def test_a_process_an_agent_left_running_is_ended_and_named(tokenizer, tmp_path):
    import psutil

    with pytest.warns(UserWarning, match=r"the agent spawner .* left 1 process\(es\) running after its episodes, now "
                                         r"ended: pid \d+ \(`.*time\.sleep\(600\)  # left-behind`\)"):
        out = _play(tokenizer, tmp_path, "spawner", [{"wait": False}, {"wait": True}])
    left, waited = out["agent_result"]
    assert not psutil.pid_exists(left) or psutil.Process(left).status() == psutil.STATUS_ZOMBIE
    assert not psutil.pid_exists(waited) or psutil.Process(waited).status() == psutil.STATUS_ZOMBIE


def test_an_agent_that_waits_for_its_programs_is_told_nothing(tokenizer, tmp_path):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = _play(tokenizer, tmp_path, "spawner", [{"wait": True}])
    assert out["num_turns"] == [1]
