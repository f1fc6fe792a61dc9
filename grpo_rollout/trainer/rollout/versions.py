"""The trainer's side of weight versions: how far behind the weights that sampled a batch are, and a progress line
while a weight sync waits for the servers.

Versions count weight syncs: the first sync (before step 1) makes version 1, each step's sync one more. A batch
sampled with the trainer's current version is compared with the trainer's log-probs (``vllm.max_logprob_mismatch``);
with streaming rollouts (``training.max_staleness`` ≥ 1) groups are sampled while the trainer trains, so they may be
up to that many versions behind by design, and a step with such a group is not compared (its largest lag is logged as
``sampler/weight_version_lag``).
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Callable, Iterator, Optional


def version_lag_problem(step: int, sampled: Optional[int], current: int, allowed: int) -> Optional[str]:
    """Why a batch's weight version is wrong (``None``: it is fine).

    Args:
        step: the 0-based step the batch is for. sampled: the oldest version that sampled it (``None``: unknown,
            not checked). current: the version the trainer's weights were last synced as. allowed: how many versions
            behind is expected (0, or ``training.max_staleness`` when streaming).
    """
    if sampled is None or current - allowed <= sampled <= current:
        return None
    if sampled > current:
        return (f"step {step + 1}'s rollout was sampled with weight version {sampled}, newer than the trainer's "
                f"{current}: something else (another run?) loaded weights into a vLLM server, so it is not sampling "
                "from the trainer's current weights. Give each run its own server(s)")
    expected = f"{current - allowed} or {current}" if allowed else str(current)
    return (f"step {step + 1}'s rollout was sampled with weight version {sampled}, but the trainer's weights are "
            f"version {current} (expected {expected}): a server is {current - sampled} weight sync(s) behind, so it "
            "is not sampling from the trainer's current weights. Check the server logs (output_dir/vllm*.log)")


@contextmanager
def progress_lines(what: Callable[[], str], say: Callable[[str], None], every_s: float = 30.0) -> Iterator[None]:
    """While the block runs, call ``say(f"{what()}: {waited} s")`` every ``every_s`` seconds (from a helper thread);
    a block that ends sooner says nothing."""
    done = threading.Event()
    start = time.monotonic()

    def report() -> None:
        while not done.wait(every_s):
            say(f"{what()}: {time.monotonic() - start:.0f} s")

    thread = threading.Thread(target=report, name="grpo-rollout-sync-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
