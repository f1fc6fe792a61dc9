"""Which weight version sampled what: the servers stamp every ``/generate/`` answer with the version they held when
the request started, and the clients note those stamps here.

- :func:`record_versions` is held around one rollout call: every answer a client gets in that thread (and in asyncio
  tasks or ``asyncio.to_thread`` workers started from it, which inherit the context) is noted in the
  :class:`VersionSpan` it yields. The trainer compares the oldest version with its own to tell a group sampled a few
  versions behind by design (streaming rollouts, ``training.max_staleness``) from one sampled by a server that fell
  behind.
- :func:`reverted_problem` is the per-answer check of one server: an answer older than the version the client had
  confirmed with that server before it sent the request means the server restarted or lost its weights.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Iterator, Optional


class VersionSpan:
    """The weight versions seen during one rollout (thread-safe).

    Attributes:
        oldest, newest: the smallest and largest version seen (``None`` until an answer carried one).
        answers: how many answers carried a version.
    """

    def __init__(self) -> None:
        self.oldest: Optional[int] = None
        self.newest: Optional[int] = None
        self.answers = 0
        self._lock = threading.Lock()

    def add(self, version: Optional[int]) -> None:
        """Note one answer's version (``None``: the answer carried none, nothing is noted)."""
        if version is None:
            return
        with self._lock:
            self.oldest = version if self.oldest is None else min(self.oldest, version)
            self.newest = version if self.newest is None else max(self.newest, version)
            self.answers += 1


_SPAN: ContextVar[Optional[VersionSpan]] = ContextVar("grpo_rollout_version_span", default=None)


@contextmanager
def record_versions() -> Iterator[VersionSpan]:
    """Note the weight version of every generation answer in this context until the block ends.

    Yields:
        the :class:`VersionSpan` being filled (read it after the block).
    """
    span = VersionSpan()
    token = _SPAN.set(span)
    try:
        yield span
    finally:
        _SPAN.reset(token)


def note_version(result: Any) -> Any:
    """Add ``result.weight_version`` and ``weight_version_end`` (a :class:`~.base.GenerationResult`) to the span being
    recorded in this context, if any; return ``result`` unchanged."""
    span = _SPAN.get()
    if span is not None:
        span.add(getattr(result, "weight_version", None))
        span.add(getattr(result, "weight_version_end", None))
    return result


def reverted_problem(url: str, answered: Any, confirmed: int) -> Optional[str]:
    """Why an answer's ``weight_version`` shows a server that went back (``None``: it did not).

    Args:
        url: the server. answered: the version its ``/generate/`` answer carried (``None``: an older server that
            does not say; not checked). confirmed: the version the client had confirmed with it (its last weight
            sync) before it sent the request.
    """
    if not isinstance(answered, int) or answered >= confirmed:
        return None
    return (f"the vLLM server at {url} sampled with weight version {answered}, but it had confirmed version "
            f"{confirmed} before this request: it restarted or reverted to older weights, so it is not sampling "
            "from the trainer's weights. Check its log and keep it running; the finished steps are saved, continue "
            "with --resume latest (the first weight sync brings every server up to date)")


def confirm_version(client: Any, version: int) -> None:
    """Tell ``client`` (and each server client of a multi-server one) that its servers now hold ``version``: after a
    weight sync it did not make itself (NCCL, or another training process's)."""
    for one in _server_clients(client):
        if hasattr(one, "weight_version"):
            one.weight_version = version


def use_in_flight_updates(client: Any, on: bool) -> None:
    """Have ``client``'s servers (each server client of a multi-server one) load weight syncs in flight, between
    engine steps with running requests kept (``on``: streaming rollouts), or after running requests finish."""
    for one in _server_clients(client):
        if hasattr(one, "in_flight_updates"):
            one.in_flight_updates = on


def _server_clients(client: Any) -> list:
    """``client`` and, for a multi-server one, the client of each server."""
    return [client, *getattr(client, "clients", [])]
