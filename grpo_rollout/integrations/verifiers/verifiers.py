"""verifiers environments (the ``vf.Environment`` API of verifiers 0.2) as a built-in rollout.

Config::

    rollout:
      function: grpo_rollout.integrations.verifiers.verifiers:verifiers_rollout
      kwargs:
        env: examples/verifiers_sums/env.py:load_environment   # or an installed environment's id (vf-install)
        env_args: {num_examples: 64}                            # load_environment's keyword arguments
    # no `rewards:` needed: the environment's rubric is the reward

One step, as verifiers' own ``run_group`` plays it (an environment written for prime-rl runs unchanged):

- the environment is loaded once per process: ``env`` as ``module:function`` / ``path/file.py:function`` is called
  with ``env_args``, anything else is an installed environment's id (``verifiers.load_environment``);
- each dataset row is one ``RolloutInput`` (all its columns: ``prompt``, and ``answer``, ``info``, ``task`` and the
  rest reach the rubric as in verifiers); its ``n`` episodes run concurrently through ``env.rollout`` against the
  run's vLLM server(s), over their OpenAI-compatible ``/v1/chat/completions`` route (``/v1/completions`` for a
  completion-format environment), each group on one server (:mod:`.verifiers_play`);
- the server answers with the token ids it sampled and their log-probs (``return_token_ids``, ``logprobs``); they are
  the completion, never re-tokenized (:func:`episode_tokens`): the tokens a later turn's prompt adds (the
  environment's answer) are masked (``completion_mask`` 0). The episode ends at ``max_completion_length`` as the
  built-in rollouts' do: no turn is sampled, played or scored past it (``truncated``, ``end_reason``);
- the group is scored by the environment's rubric (``rubric.score_group``): the reward function ``rubric`` is the
  weighted sum verifiers computed (extra ``verifiers_reward``), and each rubric function is logged as
  ``rewards/<name>`` (a reward function of weight 0). A rubric function that raises stops the run naming it (its
  file:line) where verifiers would score 0; one raising ``EpisodeFailure`` or a ``vf.Error`` fails the episode.

Sampling: the config's ``sampling`` settings over the environment's own ``sampling_args``; each episode, and each
turn of it, has its own seed (the step's seed, the prompt, the sample's index and the turn,
:func:`~grpo_rollout.generation.seeds.derive_seed`). What this does not do: verifiers' own server mode
(``env_client``), its environment groups' advantages (``provides_advantages``), vision inputs; the v1 API of
verifiers 0.4 (``verifiers.v1``) is a different interface and is not supported.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple

from ...generation.version_stamps import confirmed_version
from ...runs import names as rn
from ...rollouts.contract import SAMPLING_DEFAULTS as D, EpisodeFailure, RolloutError
from ...rollouts.conversation import as_messages
from ...rollouts.env_timeouts import DEFAULT_ENV_TIMEOUT_S
from .verifiers_loading import env_problems, load_env
from ...rollouts.episodes import BUDGET_REASONS
from .verifiers_tokens import episode_tokens
from .verifiers_play import play_groups, run_on_loop, why_ended

if TYPE_CHECKING:
    from ...generation.base import GenerationClient

VERIFIERS_REWARD = "verifiers_reward"   # extra: the rubric's weighted sum, per completion
VERIFIERS_SCORES = "verifiers_scores"   # extra: {rubric function name: score}, per completion
REBASED_TURNS = "rebased_turns"         # extra: turns whose prompt re-rendered earlier turns (episode_tokens)
RUBRIC_REWARD = "rubric"                # the reward function that is the rubric's weighted sum



def _endpoints(client: GenerationClient) -> List[Tuple[str, Optional[str]]]:
    """``(url, api key)`` of each vLLM server the run's generation client talks to."""
    parts = list(getattr(client, "clients", None) or [client])
    out = []
    for part in parts:
        url = getattr(part, "url", None)
        if url:
            auth = (getattr(part, "_headers", None) or {}).get("Authorization", "")
            out.append((url.rstrip("/"), auth.removeprefix("Bearer ") or None))
    if not out:
        raise RolloutError("verifiers environments call the vLLM server's OpenAI routes, and this run samples "
                           f"without a server ({type(client).__name__}); set vllm.mode: spawn (or attach)")
    return out


def served_model(url: str, api_key: Optional[str]) -> str:
    """The model name the server at ``url`` answers to (its ``/v1/models``' first entry; asked at each call: a
    server restarted at the same address may serve another)."""
    import httpx

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        resp = httpx.get(url + "/v1/models", headers=headers, timeout=30)
        resp.raise_for_status()
        name = resp.json()["data"][0]["id"]
    except Exception as exc:  # noqa: BLE001 - said with the address
        raise RolloutError(f"the vLLM server at {url} did not list its model (GET /v1/models): "
                           f"{type(exc).__name__}: {exc}") from exc
    return name


def _input(row: Dict[str, Any], prompt: Any, index: int, system_prompt: Optional[str]) -> Dict[str, Any]:
    """A verifiers ``RolloutInput`` from a dataset row: all its columns (they reach the rubric's functions as
    keyword arguments, as in verifiers), its prompt as chat messages (the environment's system prompt first when the
    prompt has none), ``answer``, ``info`` (a JSON text parsed), ``example_id``; a ``task`` that is not a mapping is
    left out (verifiers 0.2 refuses one).

    Raises:
        RolloutError: the prompt is empty, or ``info`` is text that is not a JSON object.
    """
    messages = [dict(m) for m in as_messages(prompt)] if prompt else []
    if not messages:
        raise RolloutError(f"dataset row {index} has an empty prompt; every row needs one")
    if system_prompt and messages[0].get("role") != "system":
        messages = [{"role": "system", "content": system_prompt}] + messages
    out = {**row, "prompt": messages, "answer": row.get("answer", ""), "example_id": row.get("example_id", index)}
    if not isinstance(row.get("task", {}), dict):
        del out["task"]
    info = row.get("info")
    if isinstance(info, str):
        try:
            info = json.loads(info)
        except ValueError:
            info = None
        if not isinstance(info, dict):
            raise RolloutError(f"dataset row {index}: its `info` column is text but not a JSON object "
                               f"({row['info'][:60]!r}); verifiers reads it as one")
    out["info"] = info or {}
    return out


def verifiers_rollout(prompts: Sequence[Any], *, client: GenerationClient, rows: Sequence[Dict[str, Any]], n: int,
                      env: Optional[str] = None, env_args: Optional[Dict[str, Any]] = None,
                      temperature: float = D.temperature, top_p: float = D.top_p, top_k: int = D.top_k,
                      min_p: float = D.min_p, repetition_penalty: float = D.repetition_penalty,
                      max_completion_length: int = D.max_completion_length, seed: Optional[int] = D.seed,
                      base_dir: Optional[str] = None, env_timeout_s: Optional[float] = DEFAULT_ENV_TIMEOUT_S,
                      **_: Any) -> Dict[str, List[Any]]:
    """Play ``n`` episodes per dataset row in a verifiers environment (see the module docstring).

    Args:
        prompts, rows: the ``P`` dataset prompts (a string or chat messages each) and rows.
        client: the run's generation client: its vLLM server(s) answer the environment's requests.
        env: an installed environment's id, or ``module:function`` / ``path/file.py:function`` returning a
            ``vf.Environment``; env_args: that function's keyword arguments.
        n, temperature, ..., seed: sampling (``max_completion_length`` bounds each turn and the whole episode).
        base_dir: where a relative ``env`` file is also looked up. env_timeout_s: seconds the environment may work
            between two model calls of an episode, and each rubric call (``rollout.env_timeout_s``).

    Returns:
        the contract dict (``P × n`` completions; sampler log-probs; masks 0 on the environment's tokens) and the
        extras ``verifiers_reward`` (the rubric's weighted sum, float), ``verifiers_scores`` (each rubric function's
        score, a dict), ``num_turns``, ``truncated``, ``end_reason`` and ``end_detail`` (as the built-in rollouts');
        ``weight_versions``: the servers' confirmed versions when the episodes started and ended (the OpenAI routes'
        answers carry none).

    Raises:
        RolloutError: the environment does not load, the run has no vLLM server, the server returned no token ids,
            or a rubric function raised or returned no number (named, with its file:line).
        EpisodeFailure: an episode failed in the environment (its error), or a rubric function raised one or a
            ``vf.Error``.
        EnvTimeout: the environment or its rubric ran past ``env_timeout_s`` (an EpisodeFailure).
    """
    environment = load_env(env, env_args, Path(base_dir) if base_dir else None)
    endpoints = _endpoints(client)
    models = [served_model(url, key) for url, key in endpoints]
    system_prompt = getattr(environment, "system_prompt", None)
    inputs = [_input(dict(row or {}), prompt, i, system_prompt) for i, (row, prompt) in enumerate(zip(rows, prompts))]
    own = dict(getattr(environment, "sampling_args", None) or {})  # the environment's (stop, chat_template_kwargs)
    sampling = {**own, "temperature": temperature, "top_p": top_p, "max_tokens": max_completion_length,
                "logprobs": True, "extra_body": {**(own.get("extra_body") or {}), "top_k": top_k, "min_p": min_p,
                                                 "repetition_penalty": repetition_penalty, "return_token_ids": True}}
    first = confirmed_version(client)
    groups = run_on_loop(play_groups(environment, inputs, n, endpoints, models, sampling, seed,
                                     max_completion_length, env_timeout_s))
    last = confirmed_version(client)
    out: Dict[str, List[Any]] = {k: [] for k in ("prompt_ids", "completion_ids", "logprobs", "completion_mask",
                                                  *verifiers_rollout.extras)}
    for g, states in enumerate(groups):
        for j, state in enumerate(states):
            where = f"prompt {g}, episode {j} of {env}"
            if state.get("error") is not None:  # verifiers' own errors: the model server's, a sandbox's, a tool's
                raise EpisodeFailure(f"{where} failed in the environment: {error_text(state['error'])}")
            prompt_ids, ids, logprobs, mask, rebased = episode_tokens(state, where)
            cut = len(ids) > max_completion_length
            out["prompt_ids"].append(prompt_ids)
            out["completion_ids"].append(ids[:max_completion_length])
            out["logprobs"].append(logprobs[:max_completion_length])
            out["completion_mask"].append(mask[:max_completion_length])
            out[VERIFIERS_REWARD].append(float(state.get("reward") or 0.0))
            out[VERIFIERS_SCORES].append({k: float(v) for k, v in (state.get("metrics") or {}).items()})
            out[rn.NUM_TURNS_EXTRA].append(len(state.get("trajectory") or []))
            reason, detail = why_ended(state, max_completion_length)
            out[rn.END_REASON_EXTRA].append(reason)
            out[rn.END_DETAIL_EXTRA].append(detail)
            out[rn.TRUNCATED_EXTRA].append(bool(cut or state.get("is_truncated") or reason in BUDGET_REASONS))
            out[REBASED_TURNS].append(rebased)
    out["weight_versions"] = [None if first is None else (first, last)] * len(out[REBASED_TURNS])
    return out


TOOL_FLAGS_FIX = ("the environment offers tools, and the vLLM server parses tool calls only when started with them: "
                  "vllm.extra_args: [--enable-auto-tool-choice, --tool-call-parser, hermes] (the parser that fits "
                  "the model's chat template; vLLM's docs list them)")


def error_text(error: BaseException) -> str:
    """An episode's error with its causes (verifiers wraps the server's answer in a ``ModelError``), and the fix
    when it is a known one."""
    parts, seen = [], set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        parts.append(f"{type(error).__name__}: {error}" if str(error) else type(error).__name__)
        error = error.__cause__ or error.__context__
    text = " <- ".join(parts)
    return text + (f"; {TOOL_FLAGS_FIX}" if "tool-call-parser" in text else "")


def _score_reader(name: str, key: str = VERIFIERS_SCORES) -> Callable:
    def score(completions: Sequence[Any], **extras: Any) -> List[Any]:
        values = extras[key]
        return [v.get(name) if isinstance(v, dict) else v for v in values]

    score.__name__ = score.__qualname__ = name
    return score


def rubric_rewards(kwargs: Dict[str, Any], base_dir: Any = None) -> List[Tuple[str, Callable, float]]:
    """The environment's rubric as this run's reward functions: ``rubric`` (weight 1), the weighted sum verifiers
    computed for each episode (``state["reward"]``), and one weight-0 function per rubric function returning its score
    (logged as ``rewards/<name>``; a name repeated in the rubric is logged once: verifiers keeps one score per name)."""
    environment = load_env(kwargs.get("env"), kwargs.get("env_args"), Path(base_dir) if base_dir else None)
    names = list(dict.fromkeys(str(n) for n in environment.rubric._get_reward_func_names()))
    return [(RUBRIC_REWARD, _score_reader(RUBRIC_REWARD, VERIFIERS_REWARD), 1.0)] + \
        [(name, _score_reader(name), 0.0) for name in names]


verifiers_rollout.extras = (VERIFIERS_REWARD, VERIFIERS_SCORES, rn.NUM_TURNS_EXTRA, rn.TRUNCATED_EXTRA,
                            REBASED_TURNS, rn.END_REASON_EXTRA, rn.END_DETAIL_EXTRA)
verifiers_rollout.implied_rewards = rubric_rewards
verifiers_rollout.needs_server = True  # the environment calls the server's OpenAI routes (a dry run starts one)


def validate_kwargs(kwargs: Dict[str, Any], base_dir: Optional[Path] = None) -> List[Tuple[str, ...]]:
    """Static checks of ``rollout.kwargs`` for :func:`verifiers_rollout` (validate-config): no unknown setting, and
    :func:`~.verifiers_loading.env_problems`."""
    from ...rollouts.kwargs_checks import unknown_settings

    return unknown_settings(verifiers_rollout, kwargs) + env_problems(kwargs, base_dir)


verifiers_rollout.validate_kwargs = validate_kwargs
