"""Issue 39, item 2: the weight version that sampled an answer travels with the answer, whatever thread, event loop or
process made the request. Before, it was recorded through a ContextVar that ``concurrent.futures`` worker threads do
not inherit: a rollout generating from its own thread pool recorded nothing and the stage silently took the trainer's
version (real version 3 recorded as [2, 2]), so fresh streamed groups were dropped as stale and rolled again.

A stand-in server client stamps every answer with the version it "holds"; no vLLM server is needed."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import threading
from collections import Counter
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from types import SimpleNamespace

import pytest

from grpo_rollout.config import Config
from grpo_rollout.generation.base import GenerationClient, GenerationResult
from grpo_rollout.generation.version_stamps import widened
from grpo_rollout.rewards.calling import RewardFunction
from grpo_rollout.rollouts.contract import RolloutError
from grpo_rollout.rollouts.single_turn import single_turn
from grpo_rollout.runs.rollouts import RolloutRecord, token_record, write_rollouts
from grpo_rollout.trainer.guards import StaleWeightsError
from grpo_rollout.orchestrator.stage import RolloutStage
from grpo_rollout.views.inspect import load_sample, summary_line


class StampingClient(GenerationClient):
    """A server-backed client's stand-in: each answer carries ``version`` as its ``weight_version`` (``None``: an
    answer without one). Picklable, so a process pool can use it."""

    def __init__(self, version):
        self.version, self.tokenizer = version, None

    def generate(self, prompt_ids, *, n=1, **kwargs):
        k = len(prompt_ids) * n
        return GenerationResult([list(p) for p in prompt_ids], [[5, 6]] * k, [[-0.5, -0.5]] * k, ["stop"] * k,
                                self.version, self.version)


def _contract(results, n):
    return {"prompt_ids": [r.prompt_ids[0] for r in results],
            "completion_ids": [c for r in results for c in r.completion_ids],
            "logprobs": [lp for r in results for lp in r.logprobs]}


def from_thread_pool(prompts, client, n, **_):
    with ThreadPoolExecutor(max_workers=2) as pool:
        return _contract(list(pool.map(lambda i: client.generate([[i + 1]], n=n), range(len(prompts)))), n)


def through_to_thread(prompts, client, n, **_):
    async def main():
        return await asyncio.gather(*(asyncio.to_thread(client.generate, [[i + 1]], n=n) for i in range(len(prompts))))

    return _contract(asyncio.run(main()), n)


def from_own_loop_thread(prompts, client, n, **_):
    out = []

    async def main():  # an event loop of the rollout's own, on a thread of its own
        out.extend(await asyncio.gather(*(client.agenerate([[i + 1]], n=n) for i in range(len(prompts)))))

    worker = threading.Thread(target=asyncio.run, args=(main(),))
    worker.start()
    worker.join()
    return _contract(out, n)


def plain_call(prompts, client, n, **_):
    return _contract([client.generate([[i + 1]], n=n) for i in range(len(prompts))], n)


def _generate_one(client, i, n):
    return client.generate([[i + 1]], n=n)


def from_process_pool(prompts, client, n, **_):
    """The client (a picklable one) is used in another process: the answers come back as data, and so do their
    versions, which the rollout returns with the completions."""
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("fork")) as pool:
        results = list(pool.map(_generate_one, [client] * len(prompts), range(len(prompts)), [n] * len(prompts)))
    return {**_contract(results, n),
            "weight_versions": [[r.weight_version, r.weight_version_end] for r in results for _ in range(n)]}


def without_the_client(prompts, client, n, **_):  # completions made some other way: no version anywhere
    return {"prompt_ids": [[1]] * len(prompts), "completion_ids": [[5]] * (len(prompts) * n),
            "logprobs": [[-0.5]] * (len(prompts) * n)}


def _stage(tmp_path, rollout, client, prompts=("a", "b"), staleness=0):
    (tmp_path / "data.jsonl").write_text("".join(json.dumps({"prompt": p}) + "\n" for p in prompts))
    config = Config()
    config.data.train, config.data.shuffle = str(tmp_path / "data.jsonl"), False
    config.sampling.num_generations, config.training.prompts_per_step = 2, 2
    config.training.max_staleness = staleness
    stage = RolloutStage(config, tmp_path, SimpleNamespace(world_size=1, rank=0))
    stage.rollout_fn = rollout
    stage.rewards = [RewardFunction("one", lambda completions, **kw: [1.0] * len(completions))]
    tokenizer = SimpleNamespace(batch_decode=lambda ids, **kw: ["ok"] * len(ids), decode=lambda ids, **kw: "x")
    stage.connect(client, tokenizer, {0}, 100)
    return stage


@pytest.mark.parametrize("rollout", [from_thread_pool, through_to_thread, from_own_loop_thread, plain_call,
                                     from_process_pool])
@pytest.mark.parametrize("server_version", [1, 3])  # behind and ahead of the trainer's 2
def test_the_true_version_is_recorded_from_any_thread_loop_or_process(tmp_path, rollout, server_version):
    stage = _stage(tmp_path, rollout, StampingClient(server_version))
    batch = stage.generate_and_score(0, [{"prompt": "a"}, {"prompt": "b"}], stage.sampling_settings(0))
    assert batch.rollout.weight_version == server_version
    assert batch.scores.weight_versions == [(server_version, server_version)] * 4
    said = "1, but the trainer's weights are version 2" if server_version < 2 else "3, newer than the trainer's 2"
    with pytest.raises(StaleWeightsError, match=f"sampled with weight version {said}"):
        stage.checked_version(0, batch, current=2, allowed=0)  # never silently taken as the trainer's 2


@pytest.mark.parametrize("path", ["step", "dynamic sampling refill"])
def test_a_step_sampled_by_a_lagging_server_from_a_thread_pool_stops(tmp_path, path):
    stage = _stage(tmp_path, from_thread_pool, StampingClient(1))
    with pytest.raises(StaleWeightsError, match="sampled with weight version 1, but the trainer's weights are "
                                                "version 2"):
        stage.source.next_batch(0, version=2) if path == "step" else stage.refill(0, 2, [0, 1])


def test_built_in_rollouts_return_their_answers_versions():
    out = single_turn(["a", "b"], client=SimpleNamespace(encode_prompts=lambda p: [[1]] * len(p),
                                                         generate=StampingClient(4).generate), n=2)
    assert out["weight_versions"] == [(4, 4)] * 4


def test_an_episode_spans_the_versions_of_its_turns():  # what the multi-turn built-ins return per conversation
    turns = [GenerationResult([], [], [], [], 3, 3), GenerationResult([], [], [], [], 3, 5),
             GenerationResult([], [], [], [], None, None)]
    span = None
    for result in turns:
        span = widened(span, result)
    assert span == (3, 5) and widened(None, turns[2]) is None


def test_weight_versions_reach_the_rollout_file_and_inspect(tmp_path):
    stage = _stage(tmp_path, from_thread_pool, StampingClient(3))
    batch = stage.generate_and_score(0, [{"prompt": "a"}, {"prompt": "b"}], stage.sampling_settings(0))
    out = batch.rollout
    records = [RolloutRecord.of(r, token_record(out.prompt_ids[i], out.completion_ids[i], out.completion_mask[i],
                                                out.logprobs[i], out.logprobs[i], None),
                                step=1, index=i, group=i // 2, prompt_text="a")
               for i, r in enumerate(batch.scores.records())]
    write_rollouts(tmp_path, 1, records)
    lines = [json.loads(x) for x in (tmp_path / "rollouts" / "step_1.jsonl").read_text().splitlines()]
    assert [x["weight_versions"] for x in lines] == [[3, 3]] * 4
    sample = load_sample(tmp_path, 1, 0, tokenizer=SimpleNamespace(decode=lambda ids, **kw: "x"))
    assert summary_line(sample).endswith("sampled by weights v3")


@pytest.mark.parametrize("rollout", [without_the_client, lambda prompts, client, n, **_: {
    **from_process_pool(prompts, client, n), "weight_versions": None}], ids=["made-otherwise", "process-pool"])
def test_a_server_backed_rollout_without_versions_is_an_error_naming_it(tmp_path, rollout):
    stage = _stage(tmp_path, rollout, StampingClient(2))
    with pytest.raises(RolloutError) as info:
        stage.generate_and_score(0, [{"prompt": "a"}, {"prompt": "b"}], stage.sampling_settings(0))
    message = str(info.value)
    assert "returned 4 of 4 completions without the weight version that sampled them" in message
    assert f"{__file__}:" in message and "return `weight_versions`" in message and "`client`" in message


def test_answers_carrying_no_version_are_an_error_too(tmp_path):
    stage = _stage(tmp_path, from_thread_pool, StampingClient(None))
    with pytest.raises(RolloutError, match="from_thread_pool .*without the weight version"):
        stage.generate_and_score(0, [{"prompt": "a"}, {"prompt": "b"}], stage.sampling_settings(0))


def test_shared_weights_need_no_version(tmp_path):
    client = StampingClient(None)
    client.shares_weights = True  # the transformers backend: the trainer's own weights, current by construction
    stage = _stage(tmp_path, without_the_client, client)
    batch = stage.generate_and_score(0, [{"prompt": "a"}, {"prompt": "b"}], stage.sampling_settings(0))
    assert batch.rollout.weight_version is None and batch.scores.weight_versions == [None] * 4


def test_a_streamed_group_sampled_after_a_sync_is_not_dropped(tmp_path):
    """max_staleness 1, two groups a step: the slow groups of step 1 start at version 1 and sample at version 3
    (two syncs later), from the rollout's own thread pool; step 3, at version 3, trains them (lag 0). Before, they
    were recorded as version 1, dropped as two behind and rolled again."""
    release, later, calls = threading.Event(), threading.Event(), Counter()

    def rollout(prompts, client, n, step, **_):
        calls[(step, prompts[0])] += 1
        gate = release if prompts[0].startswith("slow") else later if step >= 3 else None
        if gate is not None:
            assert gate.wait(30)
        return from_thread_pool(prompts, client, n)

    client = StampingClient(1)
    prompts = ["fast 0", "fast 1", "slow 2", "slow 3", "fast 4", "fast 5", "fast 6", "fast 7"]
    stage = _stage(tmp_path, rollout, client, prompts, staleness=1)
    steps, dropped = [], 0
    try:
        for step, version in enumerate((1, 2, 3)):
            client.version = version  # the servers hold what the trainer synced
            if version == 3:
                release.set()  # the slow groups, started at version 1, sample now
            batch = stage.source.next_batch(step, version)
            stage.source.trained()
            dropped += batch.stream.dropped_stale
            steps.append(sorted(zip(batch.scores.prompts[::2], batch.scores.weight_versions[::2])))
    finally:
        later.set()  # the groups of step 4 on (held back so that step 3 can only take the slow ones)
        stage.close()
    assert dropped == 0
    assert steps == [[("fast 0", (1, 1)), ("fast 1", (1, 1))], [("fast 4", (2, 2)), ("fast 5", (2, 2))],
                     [("slow 2", (3, 3)), ("slow 3", (3, 3))]]
    assert calls[(1, "slow 2")] == calls[(1, "slow 3")] == 1  # not rolled again
