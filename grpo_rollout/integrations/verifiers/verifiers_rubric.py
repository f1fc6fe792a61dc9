"""A verifiers rubric that cannot hide a broken function: verifiers catches what a rubric function raises, logs it
and scores the episode 0 (``Rubric._call_individual_reward_func`` / ``_call_group_reward_func``), and does the same when
``float()`` of its result fails. :func:`guard_rubric` wraps each function so that, while :data:`SCORING` is set (the
run's own scoring in :func:`~.verifiers_play.play_groups`), such a failure is carried past that handler as
:class:`RubricRaised` and becomes the run's error, naming the function and its file:line.
"""

from __future__ import annotations

import functools
import inspect
from contextvars import ContextVar
from typing import Any

from ...user_code.signatures import a_type, defined_at, raised_at
from ...rollouts.contract import EpisodeFailure, RolloutError

_GUARDED = "__grpo_rollout_guarded__"  # a rubric function's wrapper (guard_rubric)
#: set by play_groups while it scores: its scoring tasks inherit it
SCORING: ContextVar[bool] = ContextVar("grpo_rollout_verifiers_scoring", default=False)


class RubricRaised(BaseException):
    """A rubric function raised (or returned no number): carried past verifiers' ``except Exception`` around each
    rubric function, which would log it and score the episode 0, to :func:`play_groups`. A ``BaseException`` only on
    that way; :meth:`error_for` turns it into the error the run sees."""

    def __init__(self, fn: Any, error: BaseException):
        super().__init__(f"{getattr(fn, '__name__', fn)}: {error}")
        self.fn, self.error = fn, error

    def error_for(self, where: str) -> RolloutError:
        """The error naming the function, its ``def``'s file:line and where it raised: an :class:`EpisodeFailure`
        when the function raised one or a verifiers ``vf.Error`` (a judge's server gone: outside the user's code;
        ``rollout.on_error`` applies), else a :class:`RolloutError` (a bug in the rubric: the run stops)."""
        from verifiers.errors import Error as VerifiersError

        kind = EpisodeFailure if isinstance(self.error, (EpisodeFailure, VerifiersError)) else RolloutError
        name = getattr(self.fn, "__qualname__", getattr(self.fn, "__name__", repr(self.fn)))
        fix = "" if kind is EpisodeFailure else "; fix the function (verifiers would score the episode 0 and train on)"
        return kind(f"{where}: the rubric function `{name}`{defined_at(self.fn)} raised {type(self.error).__name__}: "
                    f"{self.error}{raised_at(self.error)}{fix}")


def _is_number(value: Any) -> bool:
    """What verifiers takes as a score (``float(value)`` works), text left out."""
    if isinstance(value, (str, bytes)):
        return False
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True


def _guarded(fn: Any, group: bool) -> Any:
    """``fn`` (a rubric function, sync or async) raising :class:`RubricRaised` where it raised, or returned something
    that is not a number (a list of them for a ``group`` function), while :func:`play_groups` scores (elsewhere, e.g.
    verifiers' own evaluation of the same environment, it behaves as written); its name and signature kept (verifiers
    reads them)."""
    if getattr(fn, _GUARDED, False):
        return fn

    def checked(result: Any) -> Any:
        ok = isinstance(result, (list, tuple)) and all(map(_is_number, result)) if group else _is_number(result)
        if not ok and SCORING.get():
            raise RubricRaised(fn, TypeError(f"returned {a_type(result)} ({result!r:.60}); a rubric function returns "
                                             f"{'a list of numbers, one per episode' if group else 'a number'}"))
        return result

    async def awaited(pending: Any) -> Any:
        try:
            result = await pending
        except Exception as exc:
            if SCORING.get():
                raise RubricRaised(fn, exc) from exc
            raise
        return checked(result)

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            result = fn(*args, **kwargs)
        except Exception as exc:
            if SCORING.get():
                raise RubricRaised(fn, exc) from exc
            raise
        return awaited(result) if inspect.isawaitable(result) else checked(result)

    setattr(call, _GUARDED, True)
    return call


def guard_rubric(rubric: Any) -> None:
    """Every function of ``rubric`` and of the rubrics it holds (a ``RubricGroup``'s, an ``EnvGroup``'s environments')
    :func:`_guarded`, in place (again for functions added since: a guarded one is kept as it is)."""
    todo, seen = [rubric], set()
    while todo:
        r = todo.pop()
        if r is None or id(r) in seen:
            continue
        seen.add(id(r))
        if isinstance(getattr(r, "funcs", None), list):
            r.funcs[:] = [_guarded(f, r._is_group_func(f)) for f in r.funcs]
        todo += list(getattr(r, "rubrics", None) or [])
        todo += [getattr(e, "rubric", None) for e in (getattr(r, "env_map", None) or {}).values()]
