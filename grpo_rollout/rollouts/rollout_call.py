"""Calling a rollout function with the sampling settings and the context objects it names."""

from __future__ import annotations

import inspect
from typing import Any, Callable, Dict, Mapping, Sequence

from ..generation.sampling_settings import SamplingSettings
from ..generation.vllm_client import ServerError
from ..user_code.signatures import accepts_var_kwargs, describe, named_params, raised_at
from .contract import RolloutContext, RolloutError, RolloutOutput, check_rollout_output
from .failed_groups import FailedGroups
from ..user_code.coroutines import run_coroutine


def call_rollout(fn: Callable, prompts: Sequence[Any], sampling: SamplingSettings, rollout_kwargs: Mapping[str, Any],
                 context: RolloutContext, vocab_size: int | None = None) -> RolloutOutput:
    """Call ``fn(prompts, **sampling, **rollout_kwargs, **named context)`` (awaited to completion when ``fn`` is
    ``async def``) and check the result.

    Args:
        prompts: the ``P`` unique prompts of the step.
        sampling: the sampling settings, passed under the contract's names (``n``, ``temperature``, ...,
            ``max_completion_length``, ``seed``: :meth:`SamplingSettings.rollout_kwargs`).
        rollout_kwargs: the config's ``rollout.kwargs`` (sampling keys in it agree with ``sampling``, checked earlier).
        context: the client, tokenizer, rows, step, ... (:class:`~.contract.RolloutContext`); each field is passed
            only if ``fn`` names it.

    Raises:
        RolloutError: the function raised, or returned something that breaks the contract.
        ServerError: the generation server failed a request the rollout made (passed on unchanged).
        FailedGroups: some groups failed outside the model, the others finished (:mod:`.failed_groups`): passed on
            with its ``rollout``, the finished groups' checked output.
    """
    names = set(named_params(fn))
    kwargs: Dict[str, Any] = {**sampling.rollout_kwargs(), **rollout_kwargs}
    kwargs.update(context.named_by(names))
    if not accepts_var_kwargs(fn):
        kwargs = {k: v for k, v in kwargs.items() if k in names}
    try:
        result = fn(list(prompts), **kwargs)
        if inspect.isawaitable(result):  # an `async def` rollout: to completion here (streaming: on the shared loop)
            result = run_coroutine(result, shared=True)
    except FailedGroups as exc:  # the groups that finished are kept: checked as any result
        exc.rollout = _checked(fn, exc.output, len(exc.kept), sampling.n, vocab_size, exc.failed, len(prompts))
        raise
    except (RolloutError, ServerError):  # a dead or refusing server is not the rollout's fault: say so as it is
        raise
    except (Exception, SystemExit) as exc:  # SystemExit too: the user's code calling sys.exit() is its failure
        raise RolloutError(f"the rollout function {describe(fn)} raised {type(exc).__name__}: {exc}"
                           f"{raised_at(exc)}") from exc
    return _checked(fn, result, len(prompts), sampling.n, vocab_size)


def _checked(fn: Callable, result: Any, num_prompts: int, n: int, vocab_size: int | None,
             failed: Sequence[int] = (), called_with: int = 0) -> RolloutOutput:
    """``result`` checked against the contract for ``num_prompts`` prompts (a :class:`FailedGroups`' output: the
    call's ``called_with`` prompts but the ``failed`` ones, which must be some of them).

    Raises:
        RolloutError: it breaks the contract, or ``failed`` names no prompt of the call (naming ``fn``).
    """
    if called_with and not (failed and all(isinstance(i, int) and 0 <= i < called_with for i in failed)):
        raise RolloutError(f"{describe(fn)} raised FailedGroups for prompts {list(failed)}; name one or more of the "
                           f"call's {called_with} prompts by index (0 to {called_with - 1})")
    if called_with and num_prompts == 0:
        return RolloutOutput([], [], None, [], {}, 0, n)
    try:
        return check_rollout_output(result, num_prompts, n, vocab_size)
    except RolloutError as exc:
        raise RolloutError(f"{describe(fn)}: {exc}") from exc
