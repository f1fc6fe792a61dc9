"""The rollout for agents that own their loop: ``rollout.function: grpo_rollout.rollouts.agent:agent_rollout`` with
``rollout.kwargs.agent: my_agent.py:run`` calls ``run(base_url=..., api_key=..., model=..., **row)`` once per
episode (``sampling.num_generations`` episodes per prompt, all at once) and trains on the chat calls it made
through ``base_url`` (:mod:`~grpo_rollout.rollouts.agent.endpoint`). Its return value reaches the reward functions
as ``agent_result``. docs/environments.md, "Agents as they are", has the whole contract and an example.
"""

from __future__ import annotations

import inspect
import threading
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from ...user_code.coroutines import SharedLoop
from ...user_code.resolve import ImportSpecError, resolve_callable
from ...user_code.signatures import defined_at
from ...runs import names as rn
from ..contract import SAMPLING_DEFAULTS as D, EpisodeFailure, RolloutError
from ..conversation import as_messages
from ..env_timeouts import DEFAULT_ENV_TIMEOUT_S, ENV_TIMEOUT_KEY, EnvTimeout, bounded_call
from ..episodes import Sampling, contract_dict, gather_or_cancel, gather_settled
from ..failed_groups import failure_test, finished_groups, kept_episodes
from ..kwargs_checks import check_int, one_of, type_problems, unknown_settings
from ..segments import SEGMENTS_KEY, Segment
from .endpoint import shared_endpoint
from .leftovers import WATCH
from .requests import AGENT_MODEL, MAX_REQUEST_BYTES
from .sessions import AgentSession

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from ...generation.base import GenerationClient

#: The extra that carries each episode's return value to the reward functions.
AGENT_RESULT = "agent_result"
#: The extra with each episode's calls' weight versions (``[oldest, newest]`` per call, in order).
CALL_VERSIONS = "call_weight_versions"
#: The extra counting each episode's answers that never reached the agent (its client had gone, timed out or lost
#: the connection, when the answer was ready): none is recorded, so the client's retry is the call.
RETRIED_CALLS = "retried_calls"
#: The extra counting each episode's tool calls that were not handed to the agent (malformed, a tool the request did
#: not offer, arguments its schema refuses: :mod:`.answers`).
REFUSED_TOOL_CALLS = "refused_tool_calls"

_LOOP: Optional[SharedLoop] = None
_LOOP_LOCK = threading.Lock()


def agent_loop() -> SharedLoop:
    """The event loop every step's episodes run on, started at first use and kept for the process's life: what an
    async agent keeps between episodes (the OpenAI Agents SDK's shared client and its pooled connections) stays on a
    live loop. A fresh loop per step left those connections on a closed one, and the client's retry of a call whose
    answer it then lost was recorded twice; and its shutdown closed the episodes a failed one had cancelled with
    tracebacks (verifiers' interception servers)."""
    global _LOOP
    with _LOOP_LOCK:
        if _LOOP is None:
            _LOOP = SharedLoop("grpo-rollout-agents")
        return _LOOP


def load_agent(agent: Union[str, Callable], base_dir: Optional[str] = None) -> Callable:
    """The agent function ``rollout.kwargs.agent`` names (``file.py:function`` or ``package.module:function``)."""
    if callable(agent):
        return agent
    return resolve_callable(str(agent), Path(base_dir) if base_dir else None)


def _lost_connection(exc: BaseException) -> bool:
    """The ``openai`` client's own connection or timeout error (not a ``ConnectionError`` or an httpx one, so
    ``rollout.failure_errors`` would not count it): a failed episode for ``rollout.on_error``."""
    try:
        import openai
    except ImportError:
        return False
    return isinstance(exc, openai.APIConnectionError)  # APITimeoutError is one


def _raised_at(exc: BaseException) -> str:
    """`` (raised at file:line in function)``: the innermost frame of the traceback in the user's own code (outside
    this package and installed libraries)."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if not {"grpo_rollout", "site-packages"} & set(Path(f.filename).parts)]
    return f" (raised at {frames[-1].filename}:{frames[-1].lineno} in {frames[-1].name})" if frames else ""


def _refusal(exc: BaseException, session: AgentSession) -> bool:
    """Whether ``exc``, raised out of the agent, is its client's error for a request the endpoint refused (the budget
    used up, a prompt too long): an HTTP error with a 4xx status (the ``openai`` client's ``APIStatusError``, httpx's
    ``HTTPStatusError``), or one whose message carries the refusal (a harness that wraps it). Anything else is the
    agent's own exception, raised or not after a refusal: the run's error, with its file:line."""
    status = getattr(exc, "status_code", None) or getattr(getattr(exc, "response", None), "status_code", None)
    if isinstance(status, int) and 400 <= status < 500:
        return True
    said = session.ended or (session.refused[1] if session.refused else "")
    return bool(said) and said in str(exc)


def _finish(session: AgentSession, fn: Callable) -> None:
    """Say why a played episode ended: the refusal the agent stopped at (``refused``: its last request was refused
    for its length), else ``done``; an episode refused before its first sequence fails (``rollout.on_error``)."""
    conv = session.conversation
    if conv is None and session.refused:
        raise EpisodeFailure(f"the agent {getattr(fn, '__name__', fn)}{defined_at(fn)} stopped after its first "
                             f"request was refused: {session.refused[1]}")
    if conv is None or conv.end_reason is not None:
        return
    if session.refused:
        conv.stop_reason, conv.truncated = "length", True
        conv.end_reason, conv.end_detail = session.refused
    else:
        conv.stop_reason, conv.end_reason = "done", "done"
        conv.end_detail = f"the agent returned after {session.calls} chat calls"


async def _play(fn: Callable, session: AgentSession, row: Dict[str, Any], timeout_s: Optional[float]) -> Any:
    endpoint = shared_endpoint()
    base_url, api_key = endpoint.open(session)
    kwargs = dict(row, base_url=base_url, api_key=api_key, model=AGENT_MODEL)
    try:
        result = await bounded_call(f"the agent {getattr(fn, '__name__', fn)}{defined_at(fn)}", fn, kwargs=kwargs,
                                    timeout_s=timeout_s)
    except EnvTimeout:
        session.ended = f"the episode ran past {ENV_TIMEOUT_KEY}"
        raise
    except Exception as exc:
        if not (session.ended or session.refused) or not _refusal(exc, session):
            kind = EpisodeFailure if isinstance(exc, EpisodeFailure) or _lost_connection(exc) else RolloutError
            raise kind(f"the agent {getattr(fn, '__name__', fn)}{defined_at(fn)} raised {type(exc).__name__}: {exc}"
                       f"{_raised_at(exc)}") from exc
        result = None  # the agent's client raised on the refused request: the episode ends there
    finally:
        endpoint.close_session(base_url)
    _finish(session, fn)
    return result


def _run_watched(fn: Callable, coro: Any) -> Any:
    """Run the step's episodes on :func:`agent_loop`; the processes the agents started and left running are ended
    when no episode is playing any more (:mod:`.leftovers`)."""
    WATCH.enter()
    try:
        return agent_loop().run(coro)
    finally:
        WATCH.leave(f"{getattr(fn, '__name__', fn)}{defined_at(fn)}")


def agent_rollout(prompts: Sequence[Any], *, client: GenerationClient, tokenizer: PreTrainedTokenizerBase, n: int,
                  agent: Union[str, Callable], rows: Optional[Sequence[Dict[str, Any]]] = None,
                  temperature: float = D.temperature, top_p: float = D.top_p, top_k: int = D.top_k,
                  min_p: float = D.min_p, repetition_penalty: float = D.repetition_penalty,
                  max_completion_length: int = D.max_completion_length, seed: Optional[int] = D.seed,
                  max_turn_tokens: Optional[int] = None, tool_prompt: str = "auto", base_dir: Optional[str] = None,
                  env_timeout_s: Optional[float] = DEFAULT_ENV_TIMEOUT_S,
                  max_request_bytes: int = MAX_REQUEST_BYTES, **_: Any) -> Dict[str, List[Any]]:
    """Play ``n`` episodes of the agent per prompt and return them in the rollout contract.

    Args:
        prompts: ``P`` prompts; an agent gets its dataset row (``rows``), and ``prompt`` in it when the row has no
            such column. client, tokenizer: the run's generation client and its tokenizer (chat template).
        n: episodes per prompt. agent: the agent function, or its name.
        temperature, top_p, top_k, min_p, repetition_penalty, seed: every chat call samples with these (what the
            agent sends for them is ignored); each episode and call gets its own seed.
        max_completion_length: tokens per episode, sampled and inserted (tool results, later user turns) together;
            a call's ``max_tokens`` is cut to what is left. max_turn_tokens: tokens per call at most.
        tool_prompt: how a request's ``tools`` reach the model: ``auto`` (the chat template when it renders them,
            else a system prompt describing them and the ``<tool_call>`` format), ``template`` or ``system``.

    Returns:
        the contract's keys, one row per episode (P × n): its last token sequence, and ``segments``, the ones
        before it (a request that did not continue the one before: :mod:`~grpo_rollout.rollouts.segments`); the
        multi-turn extras (:func:`~grpo_rollout.rollouts.episodes.contract_dict`; ``num_turns``: the episode's chat
        calls), plus ``agent_result``: each episode's return value (``None`` when the budget ended it),
        ``call_weight_versions``: per episode, each call's ``[oldest, newest]`` weight version, and
        ``retried_calls``: per episode, the answers its client never got (not recorded; its retry was the call),
        ``refused_tool_calls``: per episode, the model's tool calls not handed to the agent (:mod:`.answers`).

        max_request_bytes: the longest request body the endpoint reads (longer: 413).
        env_timeout_s: seconds an episode (the agent function's call, model calls included) may take
            (``rollout.env_timeout_s``); a plain function is then abandoned on its daemon thread, its session closed.

    Raises:
        EnvTimeout: an episode ran past ``env_timeout_s`` (an :class:`~..contract.EpisodeFailure`:
            ``rollout.on_error`` decides).
        RolloutError: the agent raised (naming it, with file:line; a connection or timeout error inside, or an
            ``EpisodeFailure`` it raised, counts as a failed episode for ``rollout.on_error``), or made no chat call
            in an episode.
        FailedGroups: while the trainer keeps finished groups (``rollout.on_error: retry | drop``), some episodes
            failed outside the model: it holds the groups that finished (:mod:`~..failed_groups`).
    """
    fn = load_agent(agent, base_dir)
    sampling = Sampling(temperature=temperature, top_p=top_p, top_k=top_k, min_p=min_p,
                        repetition_penalty=repetition_penalty, seed=seed, max_turn_tokens=max_turn_tokens)
    rows = list(rows) if rows is not None else [{"prompt": p} for p in prompts]
    sessions = [AgentSession(client, tokenizer, sampling, i, max_completion_length, tool_prompt=tool_prompt,
                             max_request_bytes=max_request_bytes) for i in range(len(prompts) * n)]
    episode_rows = [dict({"prompt": as_messages(prompts[i // n])}, **rows[i // n]) for i in range(len(sessions))]

    failed: Dict[int, BaseException] = {}  # episodes that failed outside the model: their groups are played again
    is_failure = failure_test()  # (the trainer's, read in this thread)

    async def main() -> List[Any]:
        coros = [_play(fn, s, r, env_timeout_s) for s, r in zip(sessions, episode_rows)]
        if is_failure is None:
            return await gather_or_cancel(coros)
        return await gather_settled(coros, is_failure, failed, n)

    results = _run_watched(fn, main())
    kept = kept_episodes(failed, len(prompts), n)
    sessions, results = [sessions[i] for i in kept], [results[i] for i in kept]
    for i, session in zip(kept, sessions):
        if session.conversation is None:
            raise RolloutError(f"the agent {getattr(fn, '__name__', fn)}{defined_at(fn)} made no chat call in "
                               f"episode {i} (prompt {i // n}): call the model at base_url with model={AGENT_MODEL!r}")
    out = contract_dict([s.conversation for s in sessions])
    out[SEGMENTS_KEY] = [[Segment(c.prompt_ids, c.completion_ids, c.logprobs, c.completion_mask).as_dict()
                          for c in s.earlier] for s in sessions]
    out["weight_versions"] = [s.weight_versions() for s in sessions]
    out[rn.NUM_TURNS_EXTRA] = [s.calls for s in sessions]
    out[CALL_VERSIONS] = [[None if v is None else list(v) for v in s.call_versions] for s in sessions]
    out[RETRIED_CALLS] = [s.lost for s in sessions]
    out[REFUSED_TOOL_CALLS] = [s.refused_calls for s in sessions]
    out[AGENT_RESULT] = list(results)
    return finished_groups(out, failed, len(prompts), n, kept_only=True)


def validate_kwargs(kwargs: Dict[str, Any], base_dir: Optional[Path] = None) -> List[Tuple[str, str, str]]:
    """Static checks of ``rollout.kwargs`` for :func:`agent_rollout`: ``(key, message, fix)`` per problem (unknown
    settings, no ``agent``, one that does not import or is not a function, ``max_turn_tokens`` out of range, an
    unknown ``tool_prompt``)."""
    problems = (unknown_settings(agent_rollout, kwargs) + type_problems(kwargs)
                + check_int(kwargs, "max_request_bytes", 1)
                + one_of(kwargs, "tool_prompt", ("auto", "template", "system"), "auto"))
    fix = "agent: my_agent.py:run (a function called as run(base_url=..., api_key=..., model=..., **row))"
    if not kwargs.get("agent"):
        return problems + [("rollout.kwargs.agent", "no agent function configured", fix)]
    try:
        fn = load_agent(kwargs["agent"], str(base_dir) if base_dir else None)
    except ImportSpecError as exc:
        return problems + [("rollout.kwargs.agent", f"{kwargs['agent']}: {exc}", fix)]
    why = _call_shape_problem(fn)
    return problems + ([("rollout.kwargs.agent", f"{kwargs['agent']}: {why}", fix)] if why else [])


def _call_shape_problem(fn: Callable) -> str:
    """Why ``fn`` cannot be called as ``fn(base_url=..., api_key=..., model=..., **row)`` (``""``: it can)."""
    if inspect.isclass(fn):
        return "is a class; name a function (or a method of an instance) that plays one episode"
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return ""
    named = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    if any(p.kind == p.VAR_KEYWORD for p in params):
        return ""
    missing = [k for k in ("base_url", "api_key", "model") if k not in named]
    if missing:
        return f"takes no parameter {', '.join(missing)}{defined_at(fn)}: it is called with base_url, api_key, " \
               "model and the dataset row's columns as keyword arguments"
    return ""


agent_rollout.validate_kwargs = validate_kwargs  # type: ignore[attr-defined]
# what reward functions may ask for (validate-config checks their parameters against these)
agent_rollout.extras = (AGENT_RESULT, CALL_VERSIONS, RETRIED_CALLS, REFUSED_TOOL_CALLS,  # type: ignore[attr-defined]
                        rn.NUM_TURNS_EXTRA, rn.TURN_STARTS_EXTRA, rn.FINAL_RESPONSE_EXTRA, rn.TRUNCATED_EXTRA,
                        rn.END_REASON_EXTRA, rn.END_DETAIL_EXTRA)
