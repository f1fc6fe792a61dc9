"""A simulated generation server, to measure what only a GPU box shows (overlap, long-tail episodes) on 2 CPU cores.

:class:`SimulatedServer` is a generation client whose requests *sleep* for a latency the benchmark chooses (log-normal:
a few episodes take ten times the median), then answer random token ids, as a server busy elsewhere would: the
trainer's CPU time is not taken by generation, so the trainer's own share of a step is what it would be next to a
GPU server. It stamps every answer with the weight version it held when the request started and counts a weight
sync as one version, like ``grpo-rollout serve``; it serves any number of requests at once. Used by
``benchmarks/streaming.py`` and ``tests/integration/test_streaming.py`` (through ``vllm.mode: attach``, with the
trainer's ``open_clients`` replaced).
"""

from __future__ import annotations

import math
import random
import threading
import time
from typing import Any, Callable, Hashable, List, Optional, Sequence

from grpo_rollout.generation.base import GenerationClient, GenerationResult
from grpo_rollout.generation.seeds import derive_seed


def lognormal_latency(median_s: float, tail_ratio: float = 10.0, seed: int = 0) -> Callable[[], float]:
    """Latencies (seconds) drawn from a log-normal with this median whose 99th percentile is ``tail_ratio`` times it
    (σ = ln(tail_ratio) / 2.326, the normal's 99th percentile)."""
    rng, sigma = random.Random(seed), math.log(tail_ratio) / 2.326
    lock = threading.Lock()

    def draw() -> float:
        with lock:
            return median_s * math.exp(rng.gauss(0.0, sigma))

    return draw


class SimulatedServer(GenerationClient):
    """Answers ``generate`` after a drawn latency with random tokens (see the module docstring).

    Args:
        tokenizer: the model's tokenizer (prompts are encoded with it). latency: seconds per request (called once per
            request). vocab_size: token ids are drawn below it. sync_s: seconds a weight sync takes.

    Attributes:
        weight_version: weight syncs received. requests: requests answered. busy_s: seconds with at least one request
        running, over the stretches that ended (:meth:`busy_seconds` adds the running one).
    """

    def __init__(self, tokenizer: Any, latency: Callable[[], float], vocab_size: int, sync_s: float = 0.0):
        self.tokenizer, self.latency, self.vocab_size, self.sync_s = tokenizer, latency, vocab_size, sync_s
        self.weight_version, self.requests, self.busy_s = 0, 0, 0.0
        self._lock, self._active, self._since = threading.Lock(), 0, 0.0
        self.url = "http://simulated"

    def _enter(self) -> int:
        with self._lock:
            if self._active == 0:
                self._since = time.perf_counter()
            self._active += 1
            return self.weight_version

    def _leave(self) -> None:
        with self._lock:
            self._active -= 1
            self.requests += 1
            if self._active == 0:
                self.busy_s += time.perf_counter() - self._since

    def generate(self, prompt_ids: Sequence[Sequence[int]], *, n: int = 1, temperature: float = 1.0,
                 top_p: float = 1.0, top_k: int = -1, min_p: float = 0.0, repetition_penalty: float = 1.0,
                 max_tokens: int = 256, seed: Optional[int] = None, stop: Optional[Sequence[str]] = None,
                 truncate: bool = True, affinity: Optional[Hashable] = None) -> GenerationResult:
        """``n`` random completions (1 to ``max_tokens`` ids) per prompt after one drawn latency, with log-probs of
        a uniform draw over 64 tokens (nats), stamped with the version held at the start."""
        version = self._enter()
        try:
            time.sleep(self.latency())
        finally:
            self._leave()
        prompts = self.cut_prompts(prompt_ids, truncate)
        completions: List[List[int]] = []
        for p, prompt in enumerate(prompts):
            for j in range(n):
                rng = random.Random(derive_seed(seed, tuple(prompt), p, j) if seed is not None else None)
                completions.append([rng.randrange(self.vocab_size) for _ in range(rng.randint(1, max_tokens))])
        logprobs = [[-math.log(64)] * len(c) for c in completions]
        return GenerationResult(prompts, completions, logprobs, ["length"] * len(completions), weight_version=version)

    def busy_seconds(self) -> float:
        """Seconds with at least one request running so far (a running stretch counted up to now)."""
        with self._lock:
            return self.busy_s + (time.perf_counter() - self._since if self._active else 0.0)

    def update_weights(self, weights: Any) -> None:
        """Take a weight sync: ``sync_s`` seconds, then one version more (requests already running keep theirs)."""
        time.sleep(self.sync_s)
        with self._lock:
            self.weight_version += 1


def use_simulated_server(monkeypatch_setattr: Callable[[Any, str, Any], None], server_of: Callable[[Any], Any]) -> None:
    """Make the trainer open ``server_of(loaded)`` instead of its configured backend (``monkeypatch_setattr``:
    pytest's ``monkeypatch.setattr`` or :func:`setattr`; ``loaded``: the trainer's loaded policy and tokenizer)."""
    from grpo_rollout.trainer import recipe

    monkeypatch_setattr(recipe, "open_clients", lambda config, loaded, *args, **kw: (server_of(loaded), None))
