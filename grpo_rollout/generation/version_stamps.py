"""Which weight version sampled what: the servers stamp every ``/generate/`` answer with the version they held when
the request started (and when it finished), and that stamp travels with the answer, a
:class:`~.base.GenerationResult`, whatever thread, event loop or process made the request.

- :class:`RecordingClient` is one rollout call's view of the generation client: it is the client in every respect,
  and adds every answer it returns to its own :class:`VersionSpan`. The trainer hands each rollout call a fresh one,
  so a rollout's answers are recorded whether it generates on its own thread, from its own ``ThreadPoolExecutor``,
  through ``asyncio.to_thread`` or on an event loop of its own. The trainer compares the oldest version with its own
  to tell a group sampled a few versions behind by design (streaming rollouts, ``training.max_staleness``) from one
  sampled by a server that fell behind.
- :func:`result_versions` is one answer's ``(oldest, newest)``, what a rollout returns per completion as
  ``weight_versions`` (the built-in rollouts do; a rollout generating in another process must).
- :func:`reverted_problem` is the per-answer check of one server: an answer older than the version the client had
  confirmed with that server before it sent the request means the server restarted or lost its weights.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Optional, Tuple

if TYPE_CHECKING:
    from .base import GenerationClient


class VersionSpan:
    """The weight versions of the answers one rollout call received (thread-safe).

    Attributes:
        oldest, newest: the smallest and largest version seen (``None`` until an answer carried one).
        answers: how many answers carried a version.
    """

    def __init__(self) -> None:
        self.oldest: Optional[int] = None
        self.newest: Optional[int] = None
        self.answers = 0
        self._lock = threading.Lock()

    def note(self, result: Any) -> Any:
        """Add one answer's versions (:func:`result_versions` of a :class:`~.base.GenerationResult`; an answer that
        carries none adds nothing); return ``result`` unchanged."""
        seen = result_versions(result)
        if seen is not None:
            with self._lock:
                self.oldest = seen[0] if self.oldest is None else min(self.oldest, seen[0])
                self.newest = seen[1] if self.newest is None else max(self.newest, seen[1])
                self.answers += 1
        return result


class RecordingClient:
    """One rollout call's view of a generation client: every attribute and method is the client's own (reads and
    writes alike), and :meth:`generate` / :meth:`agenerate` add the versions of each answer to :attr:`versions`, this
    view's own record, from whatever thread or event loop they are called. Nothing is kept per thread or per context.

    A view pickles as a view of the same client (when the client pickles, e.g. into a process pool); the copy records
    in the other process, so a rollout that generates there returns ``weight_versions`` with its completions.

    Attributes:
        versions: the :class:`VersionSpan` of every answer returned through this view.
    """

    __slots__ = ("_client", "versions")

    def __init__(self, client: GenerationClient):
        object.__setattr__(self, "_client", client)
        object.__setattr__(self, "versions", VersionSpan())

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        """The client's ``generate``, its answer's versions recorded."""
        return self.versions.note(self._client.generate(*args, **kwargs))

    async def agenerate(self, *args: Any, **kwargs: Any) -> Any:
        """The client's ``agenerate``, its answer's versions recorded."""
        return self.versions.note(await self._client.agenerate(*args, **kwargs))

    @property  # type: ignore[misc]
    def __class__(self) -> type:  # isinstance(view, VllmClient) holds as for the client (the view's own type stays)
        return type(object.__getattribute__(self, "_client"))

    def __getattr__(self, name: str) -> Any:
        return getattr(object.__getattribute__(self, "_client"), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._client, name, value)

    def __reduce__(self) -> Any:
        return RecordingClient, (self._client,)

    def __repr__(self) -> str:
        return f"RecordingClient({self._client!r})"


def result_versions(result: Any) -> Optional[Tuple[int, int]]:
    """``(oldest, newest)`` weight version of one answer (a :class:`~.base.GenerationResult`): its
    ``weight_version`` and ``weight_version_end`` (the start's when it has no end); ``None`` when it carries none
    (transformers generation, which samples from the trainer's own weights)."""
    start, end = getattr(result, "weight_version", None), getattr(result, "weight_version_end", None)
    if start is None:
        return None
    return start, max(start, end if end is not None else start)


def widened(span: Optional[Tuple[int, int]], result: Any) -> Optional[Tuple[int, int]]:
    """``span`` (``(oldest, newest)`` or ``None``) widened by one more answer's versions (:func:`result_versions`)."""
    seen = result_versions(result)
    if seen is None or span is None:
        return span or seen
    return min(span[0], seen[0]), max(span[1], seen[1])


def confirmed_version(client: GenerationClient) -> Optional[int]:
    """The oldest weight version ``client``'s servers confirmed (each server client of a multi-server one); ``None``
    for a client without servers. A request sent now is sampled with this version or a newer one (a weight sync in
    flight), unless its server reverted (:func:`reverted_problem`)."""
    versions = [one.weight_version for one in _server_clients(client)
                if isinstance(getattr(one, "weight_version", None), int)]
    return min(versions) if versions else None


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


def confirm_version(client: GenerationClient, version: int) -> None:
    """Tell ``client`` (and each server client of a multi-server one) that its servers now hold ``version``: after a
    weight sync it did not make itself (NCCL, or another training process's)."""
    for one in _server_clients(client):
        if hasattr(one, "weight_version"):
            one.weight_version = version


def use_in_flight_updates(client: GenerationClient, on: bool) -> None:
    """Have ``client``'s servers (each server client of a multi-server one) load weight syncs in flight, between
    engine steps with running requests kept (``on``: streaming rollouts), or after running requests finish."""
    for one in _server_clients(client):
        if hasattr(one, "in_flight_updates"):
            one.in_flight_updates = on


def _server_clients(client: GenerationClient) -> list:
    """``client`` and, for a multi-server one, the client of each server."""
    return [client, *getattr(client, "clients", [])]
