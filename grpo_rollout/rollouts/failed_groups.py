"""A rollout call some of whose groups failed outside the model while the others finished (issue 51.8): the finished
groups are kept and only the failed ones are played again.

A rollout plays a whole step's groups in one call. When one episode fails outside the model (an environment that
timed out, a sandbox gone: :class:`~.contract.EpisodeFailure` or a ``rollout.failure_errors`` type), a rollout that
raised for the whole call would make the trainer play every group again. Instead, while the trainer allows it
(``rollout.on_error: retry | drop``, :func:`keeping_finished`), the built-in multi-turn rollouts and ``agent_rollout``
let the other episodes finish (the failed episode's own group is cancelled: it is played again whole) and raise
:class:`FailedGroups` with the finished groups' results; the trainer scores them and plays only the failed prompts
again, each in a rollout call of its own. Any other error (a bug) still cancels every episode and stops the run.

A rollout of your own can do the same: raise ``FailedGroups(output, {prompt_index: error})`` with the contract dict of
the groups that finished (in prompt order, the failed prompts left out).
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional

from .contract import EpisodeFailure

#: ``is_failure(exc)``: whether an episode's exception is a failure outside the model that the trainer plays again or
#: leaves out (``None``: every error fails the whole call, e.g. with ``rollout.on_error: stop``)
FailureTest = Callable[[BaseException], bool]
_FAILURE_TEST: ContextVar[Optional[FailureTest]] = ContextVar("grpo_rollout_failure_test", default=None)


@contextmanager
def keeping_finished(is_failure: Optional[FailureTest]) -> Iterator[None]:
    """Within the block, rollouts called in this thread keep their finished groups when an episode fails
    outside the model as ``is_failure`` says (``None``: not at all). The trainer sets it around a step's call."""
    token = _FAILURE_TEST.set(is_failure)
    try:
        yield
    finally:
        _FAILURE_TEST.reset(token)


def failure_test() -> Optional[FailureTest]:
    """The test :func:`keeping_finished` set here (``None`` outside it: a test, a notebook, ``on_error: stop``). Read
    it in the rollout's own thread, before its episodes start on another."""
    return _FAILURE_TEST.get()


class FailedGroups(EpisodeFailure):
    """Some groups of a rollout call failed outside the model; the others finished.

    Args:
        output: the rollout contract dict of the finished groups only, in prompt order (``n`` rows each).
        errors: the call's prompt index (0-based) → the failure of one of its episodes, for each failed group.
        num_prompts: the call's prompts (for the message).

    Attributes:
        output, errors: as given. failed: the failed prompt indices, sorted. kept: the others, sorted.
        rollout: the checked :class:`~.contract.RolloutOutput` of ``output``, set by the trainer's call.
    """

    def __init__(self, output: Mapping[str, Any], errors: Mapping[int, BaseException], num_prompts: int):
        self.output, self.errors = output, dict(errors)
        self.failed = sorted(self.errors)
        self.kept = [i for i in range(num_prompts) if i not in self.errors]
        self.rollout: Any = None
        said = "; ".join(f"prompt {i}: {type(e).__name__}: {e}" for i, e in sorted(self.errors.items())[:3])
        super().__init__(f"{len(self.failed)} of {num_prompts} groups failed outside the model ({said}"
                         f"{'; ...' if len(self.failed) > 3 else ''})")


def kept_episodes(failed: Mapping[int, BaseException], num_prompts: int, n: int) -> List[int]:
    """The episodes (``P × n`` indices) of the groups none of whose episodes is in ``failed`` (episode → error)."""
    lost = {i // n for i in failed}
    return [i for i in range(num_prompts * n) if i // n not in lost]


def finished_groups(out: Dict[str, Any], failed: Mapping[int, BaseException], num_prompts: int, n: int,
                    kept_only: bool = False) -> Dict[str, Any]:
    """``out`` (a contract dict, one row per episode: ``P × n``) when no episode failed.

    Raises:
        FailedGroups: episodes in ``failed`` (episode index → error) failed; it holds ``out`` cut to the other groups
            (every list of ``P × n`` rows cut to their episodes; of ``P`` rows, to their prompts; the rest as is),
            or ``out`` as it is with ``kept_only`` (it holds only :func:`kept_episodes` already).
    """
    if not failed:
        return out
    episodes = kept_episodes(failed, num_prompts, n)
    prompts = sorted({i // n for i in episodes})

    def cut(value: Any) -> Any:
        if isinstance(value, list) and len(value) == num_prompts * n:
            return [value[i] for i in episodes]
        if isinstance(value, list) and len(value) == num_prompts:
            return [value[i] for i in prompts]
        return value

    errors: Dict[int, BaseException] = {}
    for i, exc in sorted(failed.items()):
        errors.setdefault(i // n, exc)
    raise FailedGroups(out if kept_only else {k: cut(v) for k, v in out.items()}, errors, num_prompts)
