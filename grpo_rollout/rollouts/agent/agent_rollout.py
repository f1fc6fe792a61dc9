"""The rollout for agents that own their loop: ``rollout.function: grpo_rollout.rollouts.agent:agent_rollout`` with
``rollout.kwargs.agent: my_agent.py:run`` calls ``run(base_url=..., api_key=..., model=..., **row)`` once per
episode (``sampling.num_generations`` episodes per prompt, all at once) and trains on the chat calls it made
through ``base_url`` (:mod:`~grpo_rollout.rollouts.agent.endpoint`). Its return value reaches the reward functions
as ``agent_result``. docs/environments.md, "Agents as they are", has the whole contract and an example.
"""

from __future__ import annotations

import asyncio
import inspect
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from ...user_code.coroutines import run_coroutine
from ...user_code.resolve import ImportSpecError, resolve_callable
from ...user_code.signatures import defined_at
from ..contract import SAMPLING_DEFAULTS as D, RolloutError
from ..conversation import as_messages
from ..episodes import Sampling, contract_dict, gather_or_cancel
from ..kwargs_checks import type_problems, unknown_settings
from .endpoint import shared_endpoint
from .sessions import AGENT_MODEL, AgentSession

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from ...generation.base import GenerationClient

#: The API key an agent is handed (the endpoint checks none; OpenAI clients insist on one).
API_KEY = "grpo-rollout"
#: The extra that carries each episode's return value to the reward functions.
AGENT_RESULT = "agent_result"


def load_agent(agent: Union[str, Callable], base_dir: Optional[str] = None) -> Callable:
    """The agent function ``rollout.kwargs.agent`` names (``file.py:function`` or ``package.module:function``)."""
    if callable(agent):
        return agent
    return resolve_callable(str(agent), Path(base_dir) if base_dir else None)


async def _play(fn: Callable, session: AgentSession, row: Dict[str, Any]) -> Any:
    endpoint = shared_endpoint()
    base_url = endpoint.open(session)
    kwargs = dict(row, base_url=base_url, api_key=API_KEY, model=AGENT_MODEL)
    try:
        result = await fn(**kwargs) if inspect.iscoroutinefunction(fn) else await asyncio.to_thread(fn, **kwargs)
        conv = session.conversation
        if conv is not None and conv.end_reason is None:
            conv.stop_reason, conv.end_reason = "done", "done"
            conv.end_detail = f"the agent returned after {session.calls} chat calls"
        return result
    except Exception as exc:
        if session.ended:  # the budget ended it: the agent's client raised on the refused request
            return None
        raise RolloutError(f"the agent {getattr(fn, '__name__', fn)}{defined_at(fn)} raised "
                           f"{type(exc).__name__}: {exc}") from exc
    finally:
        endpoint.close_session(base_url)


def agent_rollout(prompts: Sequence[Any], *, client: GenerationClient, tokenizer: PreTrainedTokenizerBase, n: int,
                  agent: Union[str, Callable], rows: Optional[Sequence[Dict[str, Any]]] = None,
                  temperature: float = D.temperature, top_p: float = D.top_p, top_k: int = D.top_k,
                  min_p: float = D.min_p, repetition_penalty: float = D.repetition_penalty,
                  max_completion_length: int = D.max_completion_length, seed: Optional[int] = D.seed,
                  max_turn_tokens: Optional[int] = None, base_dir: Optional[str] = None,
                  **_: Any) -> Dict[str, List[Any]]:
    """Play ``n`` episodes of the agent per prompt and return them in the rollout contract.

    Args:
        prompts: ``P`` prompts; an agent gets its dataset row (``rows``), and ``prompt`` in it when the row has no
            such column. client, tokenizer: the run's generation client and its tokenizer (chat template).
        n: episodes per prompt. agent: the agent function, or its name.
        temperature, top_p, top_k, min_p, repetition_penalty, seed: every chat call samples with these (what the
            agent sends for them is ignored); each episode and call gets its own seed.
        max_completion_length: tokens per episode, sampled and inserted (tool results, later user turns) together;
            a call's ``max_tokens`` is cut to what is left. max_turn_tokens: tokens per call at most.

    Returns:
        the contract's keys, one row per episode (P × n), and the multi-turn extras
        (:func:`~grpo_rollout.rollouts.episodes.contract_dict`), plus ``agent_result``: each episode's return
        value (``None`` when the budget ended it).

    Raises:
        RolloutError: the agent raised (naming it, with file:line), or made no chat call in an episode.
    """
    fn = load_agent(agent, base_dir)
    sampling = Sampling(temperature=temperature, top_p=top_p, top_k=top_k, min_p=min_p,
                        repetition_penalty=repetition_penalty, seed=seed, max_turn_tokens=max_turn_tokens)
    rows = list(rows) if rows is not None else [{"prompt": p} for p in prompts]
    sessions = [AgentSession(client, tokenizer, sampling, i, max_completion_length) for i in range(len(prompts) * n)]
    episode_rows = [dict({"prompt": as_messages(prompts[i // n])}, **rows[i // n]) for i in range(len(sessions))]

    async def main() -> List[Any]:
        return await gather_or_cancel([_play(fn, s, r) for s, r in zip(sessions, episode_rows)])

    results = run_coroutine(main())
    for i, session in enumerate(sessions):
        if session.conversation is None:
            raise RolloutError(f"the agent {getattr(fn, '__name__', fn)}{defined_at(fn)} made no chat call in "
                               f"episode {i} (prompt {i // n}): call the model at base_url with model={AGENT_MODEL!r}")
    out = contract_dict([s.conversation for s in sessions])
    out[AGENT_RESULT] = list(results)
    return out


def validate_kwargs(kwargs: Dict[str, Any], base_dir: Optional[Path] = None) -> List[Tuple[str, str, str]]:
    """Static checks of ``rollout.kwargs`` for :func:`agent_rollout`: ``(key, message, fix)`` per problem (unknown
    settings, no ``agent``, one that does not import or is not a function, ``max_turn_tokens`` out of range)."""
    problems = unknown_settings(agent_rollout, kwargs) + type_problems(kwargs)
    fix = "agent: my_agent.py:run (a function called as run(base_url=..., api_key=..., model=..., **row))"
    if not kwargs.get("agent"):
        return problems + [("rollout.kwargs.agent", "no agent function configured", fix)]
    try:
        load_agent(kwargs["agent"], str(base_dir) if base_dir else None)
    except ImportSpecError as exc:
        problems.append(("rollout.kwargs.agent", f"{kwargs['agent']}: {exc}", fix))
    return problems


agent_rollout.validate_kwargs = validate_kwargs  # type: ignore[attr-defined]
