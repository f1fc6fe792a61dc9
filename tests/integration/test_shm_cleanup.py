"""A failing run leaves nothing in /dev/shm and no server generating for nobody (issue 19): a rollout that raises
while 7 generation requests are in flight gets them aborted before the spawned server is stopped, the server exits
without being killed, and no new /dev/shm entry stays behind."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest

from grpo_rollout.generation.shm import ShmWatch, in_use, shm_entries

RAISING_ROLLOUT = '''
import asyncio
import httpx

async def rollout(prompts, client, n, max_completion_length, **kwargs):
    ids = client.encode_prompts(prompts)[0]
    url = getattr(client, "url", None) or client.urls[0]
    requests = [asyncio.ensure_future(client.agenerate([ids], n=1, max_tokens=max_completion_length, seed=i))
                for i in range(7)]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 120
    async with httpx.AsyncClient(headers={"Authorization": "Bearer shm-test-key"}) as http:
        while loop.time() < deadline:  # wait until the server is really generating all 7
            answer = await http.get(url + "/metrics")
            answer.raise_for_status()  # (a 401 here once made this loop wait out its deadline and the test vacuous)
            text = answer.text
            running = sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                          if line.startswith("vllm:num_requests_running"))
            if running >= 7:
                break
            await asyncio.sleep(0.05)
    raise RuntimeError("the environment broke")  # with 7 requests in flight
'''


def _running(url: str) -> float:
    answer = httpx.get(url + "/metrics", timeout=5, headers={"Authorization": "Bearer shm-test-key"})
    answer.raise_for_status()
    text = answer.text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("vllm:num_requests_running"))


def test_leftover_shared_memory_files_are_removed_unless_in_use(tmp_path):
    root = tmp_path / "shm"
    root.mkdir()
    (root / "psm_before").write_bytes(b"x")
    watch = ShmWatch(root)
    (root / "psm_left").write_bytes(b"x" * 64)
    (root / "grpo-rollout-weights-v3-abc").mkdir()  # another run's weight folder: never touched
    (root / "unrelated").write_bytes(b"x")
    with open(root / "psm_open", "wb") as held:
        held.write(b"x")
        held.flush()
        assert in_use([root / "psm_open", root / "psm_left"]) == {root / "psm_open"}
        assert watch.remove_leftovers() == [root / "psm_left"]
    assert shm_entries(root) == {"psm_before", "psm_open", "grpo-rollout-weights-v3-abc", "unrelated"}
    assert watch.remove_leftovers() == [root / "psm_open"]  # closed now


def test_a_semaphore_in_use_is_never_removed():
    """A POSIX semaphore is mapped under a temporary name (``/proc/<pid>/maps`` shows ``sem.XXXXXX (deleted)``), so
    matched by name a live one looked unused: a run stopping its server removed the semaphores of another server
    still starting, whose worker then died (``FileNotFoundError`` in ``SemLock._rebuild``, the server exiting with
    code 1 on a machine running two jobs; issue 28.9). Matched by inode it stays, and goes once released."""
    import multiprocessing

    watch = ShmWatch()
    lock = multiprocessing.get_context("spawn").Lock()  # a named semaphore in /dev/shm, as vLLM's processes make
    ours = [p for p in watch.new_entries() if p.name.startswith("sem.mp-")]
    assert ours, "no named semaphore appeared in /dev/shm"
    assert set(ours) <= in_use(ours)
    removed = watch.remove_leftovers()
    assert not set(removed) & set(ours)
    assert all(p.exists() for p in ours)
    lock.acquire()
    lock.release()  # still usable
    del lock  # released and unlinked by multiprocessing itself


@pytest.mark.vllm
@pytest.mark.model
def test_rollout_raising_with_requests_in_flight_leaves_no_shm_and_no_busy_server(tmp_path, monkeypatch, tiny_model):
    from grpo_rollout.config import config_from_dict
    from grpo_rollout.generation.spawn import ManagedServer
    from grpo_rollout.rollouts.contract import RolloutError
    from grpo_rollout.trainer import train
    from grpo_rollout.trainer.reporting.progress import RichReporter

    model = tiny_model
    (tmp_path / "raising_rollout.py").write_text(RAISING_ROLLOUT)
    (tmp_path / "data.jsonl").write_text("".join(json.dumps({"prompt": f"Say {i}"}) + "\n" for i in range(4)))
    cfg, problems = config_from_dict({
        "model": {"name_or_path": str(model)}, "data": {"train": str(tmp_path / "data.jsonl")},
        "rollout": {"function": f"{tmp_path / 'raising_rollout.py'}:rollout"},
        "rewards": [{"function": "grpo_rollout.rewards.library:length_penalty"}],
        "sampling": {"num_generations": 2, "max_completion_length": 440, "max_prompt_length": 32, "seed": 0},
        "training": {"output_dir": str(tmp_path / "out"), "max_steps": 2, "prompts_per_step": 2,
                     "micro_batch_size": 4},
        "vllm": {"mode": "spawn", "kv_cache_space_gib": 1, "api_key": "shm-test-key"}})
    assert not [p for p in problems if p.is_error], problems

    seen = {}
    original_stop = ManagedServer.stop

    def probing_stop(self, grace_s: float = 20.0):
        if self.process is not None and "running" not in seen:  # the run is stopping its server: is it idle?
            deadline = time.monotonic() + 5  # aborts take a moment to reach the engine; finishing 7 × 440 takes far longer
            while True:
                seen["running"] = _running(self.url)
                if seen["running"] == 0 or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
        original_stop(self, grace_s)
        seen["killed"] = self.killed

    monkeypatch.setattr(ManagedServer, "stop", probing_stop)
    before = shm_entries()
    with pytest.raises(RolloutError, match="the environment broke"):
        train(cfg, base_dir=tmp_path, reporter=RichReporter(quiet=True))
    assert seen["running"] == 0  # the 7 requests were aborted when the rollout failed, not left generating
    assert seen["killed"] is False  # so the server stopped within its grace period
    new = {Path("/dev/shm") / name for name in shm_entries() - before}
    assert new - in_use(new) == set(), new  # (entries still in use belong to other programs running meanwhile)
    log = (tmp_path / "out" / "vllm.log").read_text()
    assert "Exception in ASGI application" not in log  # the aborted requests end as 499s, not as server errors
