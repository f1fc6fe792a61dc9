"""Driving multi-turn episodes: sample a turn → hand it to the tool/environment handler → insert its answer → repeat,
many samples at once, within the ``max_completion_length`` budget; and why each episode ended.

How the budget is spent (one sample): the completion is every sampled token *and* every inserted token (the
handler's answer with the chat template's glue around it). Each turn may sample at most what is left of the budget
(or ``max_turn_tokens`` when smaller). After a turn, the handler's answer is tokenized; it is inserted only if at
least one token is left after it, else the episode ends with ``end_reason = "budget_reply"`` and its
``end_detail`` says how many tokens the reply needed, how many were left, and the smallest budget that would have
let it in.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Dict, List, Optional, Sequence, Tuple

from ..user_code.coroutines import run_coroutine  # noqa: F401 - re-exported for the rollouts
from ..generation.sampling_settings import SamplingSettings
from ..generation.version_stamps import widened
from ..runs import names as rn
from .contract import RolloutError
from .conversation import MAX_CONTINUATIONS, Conversation, TurnHandler
from .failed_groups import failure_test

if TYPE_CHECKING:
    from ..generation.base import GenerationClient

#: ``end_reason`` values (the per-completion extra) and what each means.
END_REASONS = {
    "done": "the handler ended it (the environment said done / a turn without a tool call)",
    "max_turns": "max_turns sampled turns",
    "budget_turn": "a sampled turn used up the rest of max_completion_length",
    "budget_reply": "the environment's / tool's reply did not fit in what was left of max_completion_length",
    "prompt_too_long": "an agent's request was longer than sampling.max_prompt_length or the server's context (the "
                       "recording endpoint refused it with a 400) and the agent stopped there",
}
#: The reasons that count as "cut by the budget" (metric ``episodes/cut_by_budget``).
BUDGET_REASONS = ("budget_turn", "budget_reply")


@dataclass(frozen=True)
class Sampling(SamplingSettings):
    """The sampling settings of every turn of an episode: :class:`~grpo_rollout.generation.sampling_settings.
    SamplingSettings` (defaults: the config's ``sampling.*``; one completion per request, ``max_tokens`` set per turn
    from the remaining budget; :meth:`request_seed` gives each sample, turn and continuation ``part`` its own seed)
    and the cap of a turn."""

    max_turn_tokens: Optional[int] = None  # cap per turn (the remaining budget caps it too)

    def request_seed(self, sample: int, turn: int, part: int = 0) -> Optional[int]:  # type: ignore[override]
        """A distinct, reproducible seed per sample, turn and continuation ``part`` (``None`` when unseeded)."""
        return super().request_seed(sample, turn, part)


async def sample_turn(client: GenerationClient, conv: Conversation, sampling: Sampling, max_tokens: int,
                      seed: Optional[int], continuation: bool = False) -> Tuple[List[int], List[float], str]:
    """Sample one turn of ``conv`` from its tokens so far (``max_tokens`` at most); return the sampled ids, their
    log-probs (nats) and the finish reason, and widen ``conv.weight_versions`` by the answer's versions; the answer's
    versions are also the call's in ``conv.call_versions`` (a ``continuation`` of the turn widens its last entry)."""
    # truncate=False: later turns (prompt + completion so far) are longer than max_prompt_length but within the
    # length the server was sized for; cutting them would make the sampler see another context than the trainer.
    # The first prompt was cut by Conversation.start.
    ids = conv.input_ids
    result = await client.agenerate([ids], **sampling.request_kwargs(n=1, max_tokens=max_tokens, seed=seed),
                                    truncate=False,
                                    affinity=tuple(conv.prompt_ids))  # with several servers: the episode stays on one
    if list(result.prompt_ids[0]) != ids:
        raise RolloutError(f"the generation client changed the prompt of a turn ({len(ids)} tokens sent, "
                           f"{len(result.prompt_ids[0])} used): the sampler would not see what the trainer trains on")
    conv.weight_versions = widened(conv.weight_versions, result)  # the version travels with the episode
    if continuation and conv.call_versions:
        conv.call_versions[-1] = widened(conv.call_versions[-1], result)
    else:
        conv.call_versions.append(widened(None, result))
    return result.completion_ids[0], result.logprobs[0], result.finish_reasons[0]


def _end(conv: Conversation, reason: str, detail: str) -> None:
    conv.end_reason, conv.end_detail = reason, detail


async def run_episode(client: GenerationClient, conv: Conversation, on_turn: TurnHandler, *, sampling: Sampling,
                      max_completion_length: int, max_turns: int, sample_index: int) -> Conversation:
    """Generate → ``on_turn(text)`` → append its messages → generate again, until ``on_turn`` returns ``None``
    (``stop_reason="done"``), ``max_turns`` sampled turns (``"max_turns"``) or the token budget runs out
    (``"length"``: the whole completion, inserted tokens included, never exceeds ``max_completion_length``; inserted
    text that would leave no room for one more sampled token is not added). ``conv.end_reason``/``end_detail`` say
    which, in words (:data:`END_REASONS`; the budget cases name the token counts).

    Each turn's ``max_tokens`` is the remaining budget, or ``sampling.max_turn_tokens`` when smaller (a turn cut by
    that cap does not end the episode). ``on_turn`` is called after every sampled turn, also the last one, so
    tools/environments see every answer; ``conv.last_finish`` (``"length"``: a token limit stopped the turn) and
    ``conv.truncated`` are set before, so a handler can tell a turn that was cut off from one the model finished.
    """
    continue_turn = getattr(on_turn, "continue_turn", None)
    budget = max_completion_length

    def max_tokens() -> int:
        left = budget - len(conv.completion_ids)
        if sampling.max_turn_tokens:
            return min(left, sampling.max_turn_tokens - (conv.turn_tokens if part else 0))
        return left

    while True:
        part = 0
        ids, logprobs, finish = await sample_turn(client, conv, sampling, max_tokens(),
                                                   sampling.request_seed(sample_index, conv.turns))
        text = conv.add_sampled(ids, logprobs, finish)
        # a stop string that fell where the turn is not over (inside a tool call's JSON string): sample on
        while (finish == "stop" and continue_turn is not None and part < MAX_CONTINUATIONS and max_tokens() > 0
               and continue_turn(text)):
            part += 1
            ids, logprobs, finish = await sample_turn(client, conv, sampling, max_tokens(),
                                                       sampling.request_seed(sample_index, conv.turns, part), True)
            text = conv.add_sampled(ids, logprobs, finish, continuation=True)
        # cut by the whole completion's budget (not by the per-turn cap): the answer is unfinished
        used = len(conv.completion_ids)
        conv.truncated = finish == "length" and used >= budget
        conv.capped_turns += finish == "length" and not conv.truncated  # cut by max_turn_tokens: unfinished too
        new_messages = await on_turn(text)
        turn = conv.turns
        if new_messages is None and not conv.truncated:  # a cut answer ended the episode by the budget, not by choice
            conv.stop_reason = "done"
            _end(conv, "done", f"done after turn {turn}")
        elif conv.truncated or used >= budget:
            conv.stop_reason, conv.truncated = "length", True
            _end(conv, "budget_turn", f"turn {turn} used the last of max_completion_length={budget} tokens "
                                      f"({used} used); the reply after it was not inserted")
        elif conv.turns >= max_turns:
            conv.stop_reason = "max_turns"
            _end(conv, "max_turns", f"max_turns={max_turns} turns were sampled")
        else:
            inserted = conv.insertion_ids(new_messages)
            if used + len(inserted) >= budget:
                conv.stop_reason, conv.truncated = "length", True
                _end(conv, "budget_reply",
                     f"the reply after turn {turn} needs {len(inserted)} tokens (template glue included) but only "
                     f"{budget - used} of max_completion_length={budget} were left ({used} used); raise "
                     f"sampling.max_completion_length to at least {used + len(inserted) + 1} for one more turn, "
                     "or shorten the reply")
            else:
                conv.add_inserted(inserted, new_messages)
                continue
        return conv


async def _cancel(tasks: List["asyncio.Future"]) -> None:
    for task in tasks:
        task.cancel()
    if tasks:
        await asyncio.gather(*tasks, return_exceptions=True)


def _errors(tasks: Sequence["asyncio.Future"]) -> List[BaseException]:
    """The exceptions of the finished, not cancelled ``tasks``, in order. Reading each one marks it retrieved: an
    exception nobody read is printed by asyncio ("Task exception was never retrieved", with its traceback) when
    the task is collected, after the run already reported the first one."""
    return [e for e in (t.exception() for t in tasks if t.done() and not t.cancelled()) if e is not None]


async def gather_or_cancel(coros: Sequence[Awaitable[Any]]) -> List[Any]:
    """Run ``coros`` concurrently; return their results in order. When one raises, every other one still running is
    cancelled *and awaited* (so its in-flight generation request is closed before the error propagates: a server
    is never left generating for a rollout that has already failed), then the first error is raised; every task's
    outcome is retrieved, so the other failures (several episodes calling a server that died) print nothing."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    except BaseException:  # cancelled from outside (Ctrl-C): take the tasks down too
        await _cancel([t for t in tasks if not t.done()])
        _errors(tasks)
        raise
    await _cancel(list(pending))  # (gather(return_exceptions=True) retrieves what they raise)
    errors = _errors([t for t in tasks if t in done])
    if errors:
        raise errors[0]
    return [t.result() for t in tasks]


async def gather_settled(coros: Sequence[Awaitable[Any]], is_failure: Callable[[BaseException], bool],
                         failed: Dict[int, BaseException], group_size: int) -> List[Any]:
    """Run ``coros`` (episodes, ``group_size`` in a row per group) concurrently; return their results in order,
    ``None`` for those that failed or were cancelled. An episode whose error ``is_failure`` (outside the model) is
    put in ``failed`` (index → error) and the rest of its group cancelled (it will be played again whole); the other
    groups play on. Any other error cancels every episode and is raised, as :func:`gather_or_cancel` does."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    pending = set(tasks)
    try:
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_EXCEPTION)
            for i in sorted(tasks.index(t) for t in done if not t.cancelled() and t.exception() is not None):
                if not is_failure(tasks[i].exception()):
                    raise tasks[i].exception()
                failed.setdefault(i, tasks[i].exception())
                group = {t for t in tasks[i - i % group_size:i - i % group_size + group_size] if t in pending}
                await _cancel(list(group))
                pending -= group
    except BaseException:  # a bug, or cancelled from outside (Ctrl-C): take the other episodes down too
        await _cancel([t for t in tasks if not t.done()])
        _errors(tasks)
        raise
    return [None if t.cancelled() or t.exception() is not None else t.result() for t in tasks]


def run_episodes(client: GenerationClient, episodes: Sequence[tuple], *, sampling: Sampling, max_completion_length: int,
                 max_turns: int, failed: Optional[Dict[int, BaseException]] = None,
                 group_size: int = 1) -> List[Conversation]:
    """Run every ``(conversation, on_turn)`` pair concurrently; return the conversations in the same order.

    Every sample turn is its own ``client.agenerate`` request, all in flight at once: a vLLM server batches them; the
    in-process transformers client runs them one at a time (its ``generate`` holds a lock: the model is shared).
    When one episode raises (an environment error), the others' requests are cancelled before the error is raised;
    but given ``failed`` (a dict) while the trainer keeps finished groups (:mod:`.failed_groups`), an episode that
    failed outside the model is put there and only its group (``group_size`` episodes in a row) is cancelled.
    """
    is_failure = failure_test() if failed is not None else None  # read here: the episodes run on another thread

    async def main() -> List[Conversation]:
        coros = [run_episode(client, conv, on_turn, sampling=sampling, max_completion_length=max_completion_length,
                             max_turns=max_turns, sample_index=i) for i, (conv, on_turn) in enumerate(episodes)]
        if is_failure is None:
            return await gather_or_cancel(coros)
        await gather_settled(coros, is_failure, failed, group_size)
        return [conv for conv, _ in episodes]

    return run_coroutine(main())


def contract_dict(conversations: Sequence[Conversation]) -> Dict[str, List[Any]]:
    """The rollout contract's core keys, one row per conversation (``prompt_ids`` too, as prompts may differ per
    sample), plus the ``num_turns``, ``turn_starts``, ``final_response``, ``truncated``, ``end_reason``,
    ``end_detail`` and ``turns_capped`` (sampled turns cut by ``max_turn_tokens``: unfinished answers the episode went
    on from) extras, each conversation's ``weight_versions`` and, per model call, its ``call_weight_versions``
    (``[oldest, newest]`` or ``None`` each: the agent rollout's shape).

    ``truncated`` is :attr:`Conversation.truncated`: the ``max_completion_length`` budget ended the episode (it is not
    enough to look for an end-of-turn token in the completion: inserted template text holds such tokens too).
    """
    return {
        "prompt_ids": [c.prompt_ids for c in conversations],
        "completion_ids": [c.completion_ids for c in conversations],
        "logprobs": [c.logprobs for c in conversations],
        "completion_mask": [c.completion_mask for c in conversations],
        rn.NUM_TURNS_EXTRA: [c.turns for c in conversations],
        rn.TURN_STARTS_EXTRA: [list(c.turn_starts) for c in conversations],
        rn.FINAL_RESPONSE_EXTRA: [c.last_text for c in conversations],
        rn.TRUNCATED_EXTRA: [c.truncated for c in conversations],
        rn.END_REASON_EXTRA: [c.end_reason for c in conversations],
        rn.END_DETAIL_EXTRA: [c.end_detail for c in conversations],
        "turns_capped": [c.capped_turns for c in conversations],
        "weight_versions": [c.weight_versions for c in conversations],
        rn.CALL_VERSIONS_EXTRA: [[None if v is None else list(v) for v in c.call_versions] for c in conversations],
    }


def run_multi_turn(client: GenerationClient, episodes: Sequence[tuple], *, temperature: float, top_p: float, top_k: int,
                   min_p: float, repetition_penalty: float, seed: Optional[int], stop: Optional[Sequence[str]],
                   max_turn_tokens: Optional[int], max_completion_length: int, max_turns: int,
                   failed: Optional[Dict[int, BaseException]] = None, group_size: int = 1) -> Dict[str, List[Any]]:
    """:func:`run_episodes` with the rollout's sampling settings, returned as :func:`contract_dict` (the shared tail
    of the built-in tool-calling and environment rollouts; their handlers add their own extras). ``failed``,
    ``group_size``: as :func:`run_episodes` (then :func:`.failed_groups.finished_groups` ends the rollout)."""
    sampling = Sampling(temperature=temperature, top_p=top_p, top_k=top_k, min_p=min_p,
                        repetition_penalty=repetition_penalty, seed=seed, stop=tuple(stop) if stop else None,
                        max_turn_tokens=max_turn_tokens)
    return contract_dict(run_episodes(client, episodes, sampling=sampling, max_completion_length=max_completion_length,
                                      max_turns=max_turns, failed=failed, group_size=group_size))
