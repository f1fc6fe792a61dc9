"""verifiers environments (the ``vf.Environment`` API of verifiers 0.2) as a built-in rollout.

Config::

    rollout:
      function: grpo_rollout.rollouts.verifiers:verifiers_rollout
      kwargs:
        env: examples/verifiers_sums/env.py:load_environment   # or an installed environment's id (vf-install)
        env_args: {num_examples: 64}                            # load_environment's keyword arguments
    # no `rewards:` needed: the environment's rubric is the reward

One step, as verifiers' own ``run_group`` plays it (an environment written for prime-rl runs unchanged):

- the environment is loaded once per process: ``env`` as ``module:function`` / ``path/file.py:function`` is called
  with ``env_args``, anything else is an installed environment's id (``verifiers.load_environment``);
- each dataset row is one ``RolloutInput`` (its ``prompt``, and ``answer``, ``task``, ``info`` when the row has
  them); its ``n`` episodes run concurrently through ``env.rollout`` against the run's vLLM server(s), over their
  OpenAI-compatible ``/v1/chat/completions`` route (``/v1/completions`` for a completion-format environment), each
  group on one server;
- the server answers with the token ids it sampled and their log-probs (``return_token_ids``, ``logprobs``); they are
  the completion, never re-tokenized. Turn ``k``'s prompt must extend turn ``k-1``'s prompt and completion (the chat
  template renders the conversation so far the same way); the tokens it adds (the environment's answer) are masked
  (``completion_mask`` 0). An episode longer than ``max_completion_length`` is cut there (``truncated``);
- the group is scored by the environment's rubric (``rubric.score_group``). Each rubric function becomes one of this
  run's reward functions with the rubric's weight, so ``rewards/<name>`` logs its score and the step's reward is the
  rubric's weighted sum, as verifiers computes it (extra ``verifiers_reward``).

Sampling: the config's ``sampling`` settings; each episode has its own seed (the step's seed, the prompt and the
sample's index, :func:`~grpo_rollout.generation.seeds.derive_seed`). What this does not do: verifiers' own server
mode (``env_client``), its environment groups' advantages (``provides_advantages``), vision inputs; the v1 API of
verifiers 0.4 (``verifiers.v1``) is a different interface and is not supported.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ..generation.seeds import derive_seed
from ..runs import names as rn
from ..user_code.coroutines import run_coroutine
from .contract import SAMPLING_DEFAULTS as D, RolloutError
from .conversation import as_messages
from .verifiers_loading import env_problems, load_env

VERIFIERS_REWARD = "verifiers_reward"   # extra: the rubric's weighted sum, per completion
VERIFIERS_SCORES = "verifiers_scores"   # extra: {rubric function name: score}, per completion



def _endpoints(client: Any) -> List[Tuple[str, Optional[str]]]:
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
    """A verifiers ``RolloutInput`` from a dataset row: its prompt as chat messages (the environment's system prompt
    first when the row's prompt has none), ``answer``, ``info``, ``example_id`` and (a mapping) ``task``."""
    messages = [dict(m) for m in as_messages(prompt)]
    if system_prompt and messages[0].get("role") != "system":
        messages = [{"role": "system", "content": system_prompt}] + messages
    out = {"prompt": messages, "answer": row.get("answer", ""), "example_id": row.get("example_id", index)}
    if isinstance(row.get("task"), dict):
        out["task"] = row["task"]
    info = row.get("info")
    out["info"] = json.loads(info) if isinstance(info, str) and info.startswith("{") else (info or {})
    return out


def episode_tokens(state: Dict[str, Any], where: str) -> Tuple[List[int], List[int], List[float], List[int]]:
    """One episode's ``prompt_ids`` and ``completion_ids``, ``logprobs`` and ``completion_mask`` (each
    ``(completion_len,)``), from the token ids the server returned for each turn (``state["trajectory"]``).

    Turn ``k``'s completion is trained on (mask 1, the sampler's log-probs); the tokens its prompt adds after turn
    ``k-1``'s prompt and completion (the environment's answer, the template's turn markers) are masked (0, log-prob
    0.0 as a placeholder).

    Raises:
        RolloutError: a turn has no token ids (the server is not vLLM, or did not honour ``return_token_ids``), or a
            turn's prompt does not extend the previous turn's prompt and completion (the chat template rewrites
            earlier turns, e.g. drops reasoning).
    """
    steps = state.get("trajectory") or []
    if not steps:
        raise RolloutError(f"{where}: the environment's episode sampled no turn")
    prompt_ids: List[int] = []
    ids: List[int] = []
    logprobs: List[float] = []
    mask: List[int] = []
    for k, step in enumerate(steps):
        tokens = step.get("tokens")
        if not tokens or tokens.get("completion_logprobs") is None:
            raise RolloutError(f"{where}, turn {k + 1}: the server's answer carried no token ids and log-probs; "
                               "the trained tokens must be the sampled ones: use a vLLM server (grpo-rollout serve "
                               "or vllm.mode: spawn), which returns them for return_token_ids and logprobs")
        turn_prompt, turn_ids = list(tokens["prompt_ids"]), list(tokens["completion_ids"])
        if k == 0:
            prompt_ids = turn_prompt
        else:
            so_far = prompt_ids + ids
            if turn_prompt[:len(so_far)] != so_far:
                at = next((i for i, (a, b) in enumerate(zip(turn_prompt, so_far)) if a != b),
                          min(len(turn_prompt), len(so_far)))
                raise RolloutError(f"{where}, turn {k + 1}: its prompt ({len(turn_prompt)} tokens) does not extend the "
                                   f"previous turns ({len(so_far)} tokens; they differ from token {at}): the chat "
                                   "template renders earlier turns differently once the conversation goes on (e.g. "
                                   "it drops reasoning), so the episode is not one token sequence. Use a template "
                                   "that keeps earlier turns as they were sampled")
            added = turn_prompt[len(so_far):]
            ids += added
            logprobs += [0.0] * len(added)
            mask += [0] * len(added)
        ids += turn_ids
        logprobs += [float(x) for x in tokens["completion_logprobs"]]
        mask += [1] * len(turn_ids)
    return prompt_ids, ids, logprobs, mask


async def _play(env: Any, inputs: List[Dict[str, Any]], n: int, endpoints: List[Tuple[str, Optional[str]]],
                models: List[str], sampling: Dict[str, Any], seed: Optional[int]) -> List[List[Any]]:
    """Play ``n`` episodes of each input, each group on one server, and score each group with the rubric."""
    from openai import AsyncOpenAI
    from verifiers.clients import OpenAIChatCompletionsClient, OpenAICompletionsClient

    kind = OpenAICompletionsClient if getattr(env, "message_type", "chat") == "completion" else \
        OpenAIChatCompletionsClient
    clients = [kind(AsyncOpenAI(base_url=url + "/v1", api_key=key or "EMPTY", max_retries=0, timeout=3600))
               for url, key in endpoints]

    def args(g: int, j: int) -> Dict[str, Any]:
        out = dict(sampling, extra_body=dict(sampling["extra_body"]))
        if seed is not None:
            out["seed"] = derive_seed(seed, repr(inputs[g]["prompt"]), g, j)
        return out

    async def group(g: int) -> List[Any]:
        server = g % len(clients)
        states = await asyncio.gather(*(env.rollout(json.loads(json.dumps(inputs[g], default=str)), clients[server],
                                                    models[server], args(g, j)) for j in range(n)))
        if getattr(env, "score_rollouts", True):
            await env.rubric.score_group(list(states))
        else:
            await env.rubric.dummy_score_group(list(states))
        for state in states:
            await env.rubric.cleanup(state)
        return list(states)

    try:
        return list(await asyncio.gather(*(group(g) for g in range(len(inputs)))))
    finally:
        for c in clients:
            await c.client.close()


def verifiers_rollout(prompts: Sequence[Any], *, client: Any, rows: Sequence[Dict[str, Any]], n: int,
                      env: Optional[str] = None, env_args: Optional[Dict[str, Any]] = None,
                      temperature: float = D.temperature, top_p: float = D.top_p, top_k: int = D.top_k,
                      min_p: float = D.min_p, repetition_penalty: float = D.repetition_penalty,
                      max_completion_length: int = D.max_completion_length, seed: Optional[int] = D.seed,
                      base_dir: Optional[str] = None, **_: Any) -> Dict[str, List[Any]]:
    """Play ``n`` episodes per dataset row in a verifiers environment (see the module docstring).

    Args:
        prompts, rows: the ``P`` dataset prompts (a string or chat messages each) and rows.
        client: the run's generation client: its vLLM server(s) answer the environment's requests.
        env: an installed environment's id, or ``module:function`` / ``path/file.py:function`` returning a
            ``vf.Environment``; env_args: that function's keyword arguments.
        n, temperature, ..., seed: sampling (``max_completion_length`` bounds each turn and the whole episode).
        base_dir: where a relative ``env`` file is also looked up.

    Returns:
        the contract dict (``P × n`` completions; sampler log-probs; masks 0 on the environment's tokens) and the
        extras ``verifiers_reward`` (the rubric's weighted sum, float), ``verifiers_scores`` (each rubric function's
        score, a dict), ``num_turns`` and ``truncated``.

    Raises:
        RolloutError: the environment does not load, the run has no vLLM server, an episode failed in the
            environment (its error), or the server returned no token ids.
    """
    environment = load_env(env, env_args, Path(base_dir) if base_dir else None)
    endpoints = _endpoints(client)
    models = [served_model(url, key) for url, key in endpoints]
    system_prompt = getattr(environment, "system_prompt", None)
    inputs = [_input(dict(row or {}), prompt, i, system_prompt) for i, (row, prompt) in enumerate(zip(rows, prompts))]
    sampling = {"temperature": temperature, "top_p": top_p, "max_tokens": max_completion_length, "logprobs": True,
                "extra_body": {"top_k": top_k, "min_p": min_p, "repetition_penalty": repetition_penalty,
                               "return_token_ids": True}}
    groups = run_coroutine(_play(environment, inputs, n, endpoints, models, sampling, seed), shared=True)
    out: Dict[str, List[Any]] = {k: [] for k in ("prompt_ids", "completion_ids", "logprobs", "completion_mask",
                                                  VERIFIERS_REWARD, VERIFIERS_SCORES, rn.NUM_TURNS_EXTRA,
                                                  rn.TRUNCATED_EXTRA)}
    for g, states in enumerate(groups):
        for j, state in enumerate(states):
            where = f"prompt {g}, episode {j} of {env}"
            if state.get("error") is not None:
                raise RolloutError(f"{where} failed in the environment: {error_text(state['error'])}")
            prompt_ids, ids, logprobs, mask = episode_tokens(state, where)
            cut = len(ids) > max_completion_length
            out["prompt_ids"].append(prompt_ids)
            out["completion_ids"].append(ids[:max_completion_length])
            out["logprobs"].append(logprobs[:max_completion_length])
            out["completion_mask"].append(mask[:max_completion_length])
            out[VERIFIERS_REWARD].append(float(state.get("reward") or 0.0))
            out[VERIFIERS_SCORES].append({k: float(v) for k, v in (state.get("metrics") or {}).items()})
            out[rn.NUM_TURNS_EXTRA].append(len(state.get("trajectory") or []))
            out[rn.TRUNCATED_EXTRA].append(bool(cut or state.get("is_truncated")))
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


def _score_reader(name: str) -> Callable:
    def score(completions: Sequence[Any], verifiers_scores: Sequence[Dict[str, float]], **_: Any) -> List[Any]:
        return [s.get(name) for s in verifiers_scores]

    score.__name__ = score.__qualname__ = name
    return score


def rubric_rewards(kwargs: Dict[str, Any], base_dir: Any = None) -> List[Tuple[str, Callable, float]]:
    """The environment's rubric as this run's reward functions: ``(name, reader, weight)`` per rubric function, the
    reader returning the score the rubric gave each completion (``verifiers_scores``)."""
    environment = load_env(kwargs.get("env"), kwargs.get("env_args"), Path(base_dir) if base_dir else None)
    rubric = environment.rubric
    names, weights = rubric._get_reward_func_names(), rubric._get_reward_weights()
    return [(name, _score_reader(name), float(w)) for name, w in zip(names, weights)]


verifiers_rollout.extras = (VERIFIERS_REWARD, VERIFIERS_SCORES, rn.NUM_TURNS_EXTRA, rn.TRUNCATED_EXTRA)
verifiers_rollout.implied_rewards = rubric_rewards
verifiers_rollout.needs_server = True  # the environment calls the server's OpenAI routes (a dry run starts one)


def validate_kwargs(kwargs: Dict[str, Any], base_dir: Optional[Path] = None) -> List[Tuple[str, ...]]:
    """Static checks of ``rollout.kwargs`` for :func:`verifiers_rollout` (validate-config): no unknown setting, and
    :func:`~.verifiers_loading.env_problems`."""
    from .kwargs_checks import unknown_settings

    return unknown_settings(verifiers_rollout, kwargs) + env_problems(kwargs, base_dir)


verifiers_rollout.validate_kwargs = validate_kwargs
