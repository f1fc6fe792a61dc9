"""Weights out: after each update, the policy's full weights go to every generation server, which confirms the new
weight version.

Versions count weight syncs: the first sync (before step 1) makes version 1, each step's sync one more
(:mod:`grpo_rollout.orchestrator.versions` checks batches against it). Rank 0 sends over HTTP or a shared folder; with
``vllm.weight_transfer: nccl`` every rank takes part in a GPU broadcast (:mod:`~grpo_rollout.generation.nccl_sync`).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable, Optional

from ...generation.version_stamps import confirm_version
from ...generation.vllm_client import ServerError
from ...distributed import Dist
from ..update.logprobs import CompletionLogprobs
from .policy import full_state_dict
from .precision import Precision
from ...orchestrator.versions import progress_lines

if TYPE_CHECKING:
    from ...generation.base import GenerationClient


class WeightSync:
    """Sends the policy's weights to the servers behind ``client`` (or over ``nccl``) and keeps the confirmed version.

    Attributes:
        version: the weight version every server confirmed last (0: none yet).
    """

    def __init__(self, policy: CompletionLogprobs, client: GenerationClient, nccl: Optional[Any], dist: Dist, precision: Precision,
                 say: Callable[[str], None]):
        self.policy, self.client, self.nccl, self.dist, self.precision, self.say = \
            policy, client, nccl, dist, precision, say
        self.version = 0

    def send(self) -> None:
        """Gather the full weights (a collective) and have rank 0 send them, cast to the servers' dtype, to every
        server (or broadcast them over NCCL); every rank learns whether that worked.

        While a server has not answered, a line every 30 s says how long the sync has waited; one that does not
        answer for ``vllm.sync_timeout_s`` seconds stops it. On success every rank's client records the new version.

        Raises:
            ServerError (one process) / RankError (several): a server failed, answered another version, or did not
                answer in time.
        """
        error = None
        urls = ", ".join(getattr(self.client, "urls", None) or [str(getattr(self.client, "url", "vLLM"))])
        waiting = progress_lines(lambda: f"Waiting for the weight sync to {urls}", self.say)
        if self.nccl is not None:  # GPU to GPU; every rank takes part in gathering the shards
            try:
                with waiting:
                    self.nccl.send()
            except ServerError as exc:
                error = exc
        else:
            weights = self.precision.for_server(full_state_dict(self.policy, self.dist))  # in the servers' dtype
            if self.dist.is_main:
                try:
                    with waiting:
                        self.client.update_weights(weights)
                except ServerError as exc:
                    error = exc
        self.dist.agree(error)
        sender = self.nccl if self.nccl is not None else self.client
        self.version = self.dist.broadcast(getattr(sender, "weight_version", self.version + 1))
        confirm_version(self.client, self.version)  # other ranks' and NCCL's clients did not sync themselves

    def rest(self, asleep: bool) -> float:
        """``vllm.sleep_during_training``: rank 0 puts every server to sleep (``asleep``) or wakes it up; every rank
        learns whether that worked. Call it after every rank finished generating (a collective has run since).

        Returns:
            The seconds it took (rank 0's, the same on every rank).

        Raises:
            ServerError (one process) / RankError (several): a server could not sleep or wake up.
        """
        start, error = time.perf_counter(), None
        if self.dist.is_main:
            try:
                self.client.sleep() if asleep else self.client.wake_up()
            except ServerError as exc:
                error = exc
        self.dist.agree(error)
        return self.dist.broadcast(time.perf_counter() - start)

    def close(self) -> None:
        """Close the NCCL channel, if any."""
        if self.nccl is not None:
            self.nccl.close()
