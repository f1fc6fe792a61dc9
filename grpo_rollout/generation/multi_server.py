"""Several vLLM servers behind one generation client.

- ``generate`` with many prompts: the prompts are split into one contiguous share per server (a prompt's ``n``
  samples — its whole group — stay on one server) and sent concurrently; answers come back in prompt order.
- ``generate`` with fewer prompts than servers (streaming rollouts send one group per call): each prompt goes to a
  server with the fewest requests running from this client, so concurrent groups spread over every server.
- a request with an ``affinity`` key (every turn of a multi-turn episode passes its first prompt) always goes to the
  server that key was first given, so the episode's prefix stays in that server's cache; new keys go to the server
  with the fewest keys so far.
- ``update_weights`` stages the weights once and has every server load them concurrently; the step goes on only when
  every server confirms the same new version. A server that fails or answers another version stops it, named by URL.
"""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, Hashable, List, Optional, Sequence

from .base import GenerationClient, GenerationResult
from .vllm_client import ServerError, VllmClient, staged_weights


def _shares(total: int, parts: int) -> List[range]:
    """``total`` positions split into ``parts`` contiguous ranges whose sizes differ by at most one."""
    base, extra = divmod(total, parts)
    out, start = [], 0
    for i in range(parts):
        size = base + (i < extra)
        out.append(range(start, start + size))
        start += size
    return out


class MultiServerClient(GenerationClient):
    """One client over ``K`` :class:`VllmClient` s (one per server).

    Args:
        clients: one per server, all for the same model and tokenizer.
        first: index of the server that gets this client's first share or key (training rank ``r`` passes ``r``, so
            several ranks do not all start on server 0).

    Attributes:
        requests: how many requests each server has been sent.
    """

    def __init__(self, clients: Sequence[VllmClient], first: int = 0):
        if not clients:
            raise ValueError("MultiServerClient needs at least one server")
        self.clients = list(clients)
        self.tokenizer = self.clients[0].tokenizer
        self.max_prompt_length = self.clients[0].max_prompt_length
        self.requests = [0] * len(self.clients)
        self.weight_version = 0
        self.last_sync_seconds = 0.0
        self._first = first % len(self.clients)
        self._keys: Dict[Hashable, int] = {}
        self._keys_per_server = [0] * len(self.clients)
        self._running = [0] * len(self.clients)  # requests in flight per server, from this client
        self._lock = threading.Lock()

    @property
    def urls(self) -> List[str]:
        """The servers' URLs."""
        return [c.url for c in self.clients]

    def server_for(self, affinity: Hashable) -> int:
        """The server index for ``affinity`` (sticky; a new key goes to the server with the fewest keys)."""
        if affinity not in self._keys:
            k = len(self.clients)
            order = [(self._first + i) % k for i in range(k)]
            chosen = min(order, key=lambda i: self._keys_per_server[i])
            self._keys[affinity] = chosen
            self._keys_per_server[chosen] += 1
        return self._keys[affinity]

    def _split(self, prompt_ids: Sequence[Sequence[int]], affinity: Optional[Hashable]) -> List[tuple]:
        """``(server, prompt positions)`` pairs for one request, counted as running until :meth:`_done`."""
        k = len(self.clients)
        with self._lock:
            if affinity is not None:
                plan = [(self.server_for(affinity), range(len(prompt_ids)))]
            elif len(prompt_ids) < k:  # one prompt each to the least busy servers (ties: from `first` on)
                order = sorted(((self._first + i) % k for i in range(k)), key=lambda i: self._running[i])
                plan = [(server, range(j, j + 1)) for j, server in enumerate(order[:len(prompt_ids)])]
            else:
                plan = [((self._first + i) % k, share) for i, share in enumerate(_shares(len(prompt_ids), k))]
            for server, _ in plan:
                self.requests[server] += 1
                self._running[server] += 1
        return plan

    def _done(self, plan: List[tuple]) -> None:
        with self._lock:
            for server, _ in plan:
                self._running[server] -= 1

    @staticmethod
    def _merge(parts: List[GenerationResult], n: int) -> GenerationResult:
        out = GenerationResult([], [], [], [])
        for part in parts:
            out.prompt_ids += part.prompt_ids
            out.completion_ids += part.completion_ids
            out.logprobs += part.logprobs
            out.finish_reasons += part.finish_reasons
        versions = [p.weight_version for p in parts if p.weight_version is not None]
        out.weight_version = min(versions) if versions else None  # the oldest weights any share was sampled with
        ends = [p.weight_version_end for p in parts if p.weight_version_end is not None]
        out.weight_version_end = max(ends) if ends else None  # and the newest
        return out

    def generate(self, prompt_ids: Sequence[Sequence[int]], *, n: int = 1, affinity: Optional[Hashable] = None,
                 **kwargs: Any) -> GenerationResult:
        """See :meth:`GenerationClient.generate`; whole prompts (groups) per server, all servers at once.

        Raises:
            ServerError: a server failed, or answered with weights older than its last sync (named by URL).
        """
        plan = self._split(prompt_ids, affinity)
        try:
            if len(plan) == 1:
                server, share = plan[0]
                return self.clients[server].generate([prompt_ids[i] for i in share], n=n, **kwargs)
            with ThreadPoolExecutor(max_workers=len(plan)) as pool:
                futures = [pool.submit(self.clients[server].generate, [prompt_ids[i] for i in share], n=n, **kwargs)
                           for server, share in plan]
                parts = [f.result() for f in futures]
        finally:
            self._done(plan)
        return self._merge(parts, n)

    async def agenerate(self, prompt_ids: Sequence[Sequence[int]], *, n: int = 1,
                        affinity: Optional[Hashable] = None, **kwargs: Any) -> GenerationResult:
        """Async :meth:`generate`."""
        plan = self._split(prompt_ids, affinity)
        try:
            parts = await asyncio.gather(*(self.clients[server].agenerate([prompt_ids[i] for i in share], n=n,
                                                                          **kwargs) for server, share in plan))
        finally:
            self._done(plan)
        return self._merge(list(parts), n)

    def update_weights(self, weights: Any) -> None:
        """Stage the weights once, have every server load them concurrently, and check that all confirm the same
        new version. Clears the affinity keys (a new step starts). Sets ``last_sync_seconds``.

        Raises:
            ServerError: a server failed or answered another version (its URL is in the message).
        """
        start = time.perf_counter()
        version = self.weight_version + 1
        with staged_weights(weights, version) as folder:
            self._each(lambda c: c.reload(folder, version))
        versions = [c.weight_version for c in self.clients]
        if any(v != version for v in versions):
            raise ServerError(f"the servers answered weight versions {versions}, expected {version} from all")
        self.weight_version = version
        self._keys.clear()
        self._keys_per_server = [0] * len(self.clients)
        self._running = [0] * len(self.clients)  # requests in flight per server, from this client
        self._lock = threading.Lock()
        self.last_sync_seconds = time.perf_counter() - start

    def sleep(self) -> None:
        """Every server to sleep, concurrently (:meth:`VllmClient.sleep`)."""
        self._each(lambda c: c.sleep())

    def wake_up(self) -> None:
        """Every server awake, concurrently (:meth:`VllmClient.wake_up`)."""
        self._each(lambda c: c.wake_up())

    def _each(self, call: Callable[[VllmClient], Any]) -> None:
        """``call`` on every server's client at once; the first failure is raised (a ``ServerError``) after all
        finished."""
        with ThreadPoolExecutor(max_workers=len(self.clients)) as pool:
            errors = [f.exception() for f in [pool.submit(call, c) for c in self.clients]]
        failed = [e for e in errors if e is not None]
        if failed:
            raise failed[0] if isinstance(failed[0], ServerError) else ServerError(str(failed[0]))

    def health(self) -> List[Dict[str, Any]]:
        """Every server's ``/health/`` answer, in order."""
        return [c.health() for c in self.clients]

    def close(self) -> None:
        """Close every server's client (spawned servers stop)."""
        for c in self.clients:
            c.close()
