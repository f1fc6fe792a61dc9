"""The trainer's side of weight versions: how far behind the weights that sampled a batch are, and a progress line
while a weight sync waits for the servers.

Versions count weight syncs: the first sync (before step 1) makes version 1, each step's sync one more. A batch
sampled with the trainer's current version is compared with the trainer's log-probs (``vllm.max_logprob_mismatch``);
with streaming rollouts (``training.max_staleness`` ≥ 1) groups are sampled while the trainer trains, so they may be
up to that many versions behind by design, and a step with such a group is not compared (its largest lag is logged as
``sampler/weight_version_lag``).

The versions come with the data: each completion's from the rollout's ``weight_versions``, else from the answers the
client view the rollout was handed returned (:class:`~grpo_rollout.generation.version_stamps.RecordingClient`), whatever
thread, loop or process generated them (:func:`completion_versions`). A server-backed rollout with neither is an error,
never the trainer's version taken instead.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator, List, Optional

from ..generation.version_stamps import VersionSpan
from ..rollouts.contract import RolloutError, RolloutOutput, Versions
from ..user_code.signatures import defined_at, describe


class StaleWeightsError(RuntimeError):
    """The generation server's log-probs (or weight version) say it is not on the trainer's weights."""


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


def completion_versions(out: RolloutOutput, recorded: VersionSpan, fn: Any) -> List[Versions]:
    """Each completion's ``(oldest, newest)`` weight version, for a rollout sampled by a server: what the rollout
    ``fn`` returned as ``weight_versions``, else (for a completion it gave none) the oldest and newest of every answer
    its client view ``recorded``.

    Raises:
        RolloutError: a completion has neither (the rollout made it without the client it was handed, generated in
            another process without returning ``weight_versions``, or the server stamps no versions); the message
            names ``fn`` (file:line) and the fixes.
    """
    given = out.weight_versions or [None] * len(out)
    span = (recorded.oldest, recorded.newest) if recorded.answers else None
    if span is None and any(v is None for v in given):
        missing = sum(v is None for v in given)
        raise RolloutError(
            f"the rollout function {describe(fn)}{defined_at(fn)} returned {missing} of {len(out)} completions without "
            "the weight version that sampled them: no vLLM answer came back through the `client` it was handed, and "
            "it returned no `weight_versions`, so the trainer cannot tell how stale they are. Generate with that "
            "`client` (from any thread, thread pool or event loop), or return `weight_versions`: one [oldest, newest] "
            "per completion, the GenerationResult's [weight_version, weight_version_end] (needed when generating in "
            "another process). A grpo-rollout server stamps every /generate/ answer; an older one does not: update it")
    return [v if v is not None else span for v in given]


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
