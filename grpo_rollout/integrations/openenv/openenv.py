"""OpenEnv environments (HTTP/WebSocket environment servers) as a built-in rollout, through ``openenv-core``'s client.

Config::

    rollout:
      function: grpo_rollout.integrations.openenv.openenv:openenv_rollout
      kwargs:
        url: http://127.0.0.1:8000                       # a running OpenEnv server, or:
        # server: examples/openenv_guess/server.py:app   # its app, served by this process for the run
        action: examples/openenv_guess/play.py:to_action  # the model's text → the environment's action (a dict)
        max_turns: 4
    rewards:
      - function: grpo_rollout.rewards.tools:env_reward  # the sum of the episode's step rewards

One episode per completion, each its own session on the server (``openenv-core``'s ``GenericEnvClient``):

- ``reset(**row)``: the dataset row's columns are the reset's keyword arguments (OpenEnv's reset accepts extra
  fields). The first user message is the row's prompt (when the dataset has one) followed by the observation's text;
- each sampled turn goes through the ``action`` function to an action, and ``step(action)``'s observation text is the
  next user message, until the server says ``done``, ``max_turns`` turns were sampled or the token budget is used;
- an observation's text is ``observation(obs)`` when that function is configured, else its first string field of
  ``prompt``, ``message``, ``text``, ``content``, ``output``, else the observation as JSON;
- the step rewards add up to the extra ``env_reward`` (``None`` rewards add nothing), ``env_done`` says whether the
  server ended the episode. Everything else is the environment rollout's (:mod:`.environment`).
"""

from __future__ import annotations

import inspect
import json
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple

from ...user_code.signatures import a_type, describe, raised_at
from ...rollouts.contract import SAMPLING_DEFAULTS as D, EpisodeFailure, RolloutError
from ...rollouts.conversation import as_messages
from ...rollouts.env_timeouts import DEFAULT_ENV_TIMEOUT_S
from ...rollouts.environment import ENV_EXTRAS, environment_rollout
from ...rollouts.kwargs_checks import type_problems, unknown_settings
from .openenv_errors import action_problem, environment_bug, record_app_errors, server_error
from .openenv_serving import _SERVED, close_openenv_servers, serve_app  # noqa: F401 - the OpenEnv rollout's API

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase
    from ...generation.base import GenerationClient

#: observation fields tried, in order, for its text when no ``observation`` function is configured
TEXT_FIELDS = ("prompt", "message", "text", "content", "output")


def observation_text(observation: Any) -> str:
    """An observation's text: its first string field of :data:`TEXT_FIELDS`, else the observation as JSON."""
    if isinstance(observation, str):
        return observation
    if isinstance(observation, dict):
        for name in TEXT_FIELDS:
            if isinstance(observation.get(name), str):
                return observation[name]
    return json.dumps(observation, default=str)


CAPACITY_FIX = ("it may be at capacity: let the server hold as many sessions at once as a step has episodes "
                "(create_app's max_concurrent_envs >= prompts_per_step × num_generations)")


def _at_capacity(exc: Exception) -> bool:
    """The server refused or closed a session, as openenv-core's server does when it holds max_concurrent_envs."""
    return "capacity" in str(exc).lower() or type(exc).__name__.startswith("ConnectionClosed")


class OpenEnvSession:
    """One OpenEnv session in the environment rollout's shape (``reset(row)`` / ``step(text)``)."""

    def __init__(self, url: str, to_action: Callable, to_text: Callable, prompt_column: str,
                 opened: List["OpenEnvSession"]):
        self.url, self.to_action, self.to_text, self.prompt_column = url, to_action, to_text, prompt_column
        self.env: Any = None
        opened.append(self)

    def reset(self, row: Dict[str, Any]) -> List[Dict[str, Any]]:
        from openenv.core import GenericEnvClient

        record_app_errors()  # an environment served here: its bugs said with their file:line
        self.env = GenericEnvClient(base_url=self.url).sync()
        try:
            self.env.connect()
        except Exception as exc:  # noqa: BLE001 - said with the server's address; the environment's failure
            raise EpisodeFailure(f"the OpenEnv server at {self.url} did not take the session: {type(exc).__name__}: "
                                 f"{exc}; " + (CAPACITY_FIX if _at_capacity(exc) else
                                               "start it, or fix rollout.kwargs.url")) from exc
        columns = {k: v for k, v in row.items() if k != self.prompt_column}
        try:
            result = self.env.reset(**columns)
        except Exception as exc:  # noqa: BLE001 - the server answered with an error, or closed the session
            said = server_error(exc)
            if said and said[1] == "EXECUTION_ERROR":  # the environment's own reset raised: a bug
                bug = environment_bug(self.url, "reset", *said)
                raise bug from bug.__cause__
            fix = CAPACITY_FIX if _at_capacity(exc) else (
                f"the row's columns ({', '.join(columns) or 'none'}) are reset's keyword arguments: make the "
                "server's reset accept them")
            raise RolloutError(f"the OpenEnv server at {self.url} refused reset: {type(exc).__name__}: {exc}; "
                               f"{fix}") from exc
        text = self._text(result.observation)
        prompt = row.get(self.prompt_column)
        if prompt is None:
            return [{"role": "user", "content": text}]
        messages = as_messages(prompt)
        return messages[:-1] + [{**messages[-1], "content": f"{messages[-1]['content']}\n\n{text}"}]

    def step(self, text: str) -> Tuple[Optional[str], Optional[float], bool]:
        try:
            action = self.to_action(text)
        except Exception as exc:
            raise RolloutError(f"the action function {describe(self.to_action)} raised {type(exc).__name__}: "
                               f"{exc}{raised_at(exc)}") from exc
        if not isinstance(action, dict) and not hasattr(action, "model_dump"):
            raise RolloutError(f"the action function {describe(self.to_action)} returned {a_type(action)} "
                               f"({str(action)[:40]!r}); it must return the action as a dict (or an OpenEnv Action)")
        try:
            result = self.env.step(action)
        except Exception as exc:  # noqa: BLE001 - said with the server's address; the environment's failure
            said = server_error(exc)
            problem = action_problem(self.url, action) if said and said[1] == "VALIDATION_ERROR" else None
            if problem:  # the model's bad action: answered, as a tool call its schema refuses is
                return f"Error: the action {str(action)[:80]} does not fit the environment's action: {problem}", \
                    None, False
            if said and said[1] in ("EXECUTION_ERROR", "VALIDATION_ERROR"):  # the environment's own step raised
                bug = environment_bug(self.url, "step", *said)
                raise bug from bug.__cause__
            raise EpisodeFailure(f"the OpenEnv server at {self.url} failed step({str(action)[:80]}): "
                                 f"{type(exc).__name__}: {exc}") from exc
        return (None if result.done else self._text(result.observation)), result.reward, bool(result.done)

    def _text(self, observation: Any) -> str:
        try:
            text = self.to_text(observation)
        except Exception as exc:
            raise RolloutError(f"the observation function {describe(self.to_text)} raised {type(exc).__name__}: "
                               f"{exc}{raised_at(exc)}") from exc
        if not isinstance(text, str):
            raise RolloutError(f"the observation function {describe(self.to_text)} returned a "
                               f"{type(text).__name__}; it must return the text the model reads")
        return text

    def close(self) -> None:
        if self.env is not None:
            try:
                self.env.close()
            except Exception:  # noqa: BLE001 - closing a session is best effort
                pass


def _function(spec: Any, key: str, base_dir: Optional[Path]) -> Callable:
    from ...user_code.resolve import ImportSpecError, resolve_callable

    if callable(spec):
        return spec
    try:
        return resolve_callable(str(spec), base_dir)
    except ImportSpecError as exc:
        raise RolloutError(f"rollout.kwargs.{key} {spec!r}: {exc}") from exc


def openenv_rollout(prompts: Sequence[Any], *, client: GenerationClient, tokenizer: PreTrainedTokenizerBase, rows: Sequence[Dict[str, Any]], n: int,
                    action: Any = None, url: Optional[str] = None, server: Optional[str] = None,
                    observation: Any = None, prompt_column: str = "prompt", temperature: float = D.temperature,
                    top_p: float = D.top_p, top_k: int = D.top_k, min_p: float = D.min_p,
                    repetition_penalty: float = D.repetition_penalty,
                    max_completion_length: int = D.max_completion_length, seed: Optional[int] = D.seed,
                    max_turns: int = 4, stop: Optional[Sequence[str]] = None, max_turn_tokens: Optional[int] = None,
                    base_dir: Optional[str] = None, env_timeout_s: Optional[float] = DEFAULT_ENV_TIMEOUT_S,
                    **_: Any) -> Dict[str, List[Any]]:
    """Play ``n`` episodes per dataset row on an OpenEnv server (see the module docstring).

    Args:
        prompts, rows: the ``P`` dataset prompts (may be ``None``) and rows. n, temperature, ..., seed: sampling.
        action: the function (or its name) turning a sampled turn's text into the environment's action.
        url: the server's address; server: instead, ``module:app`` or ``path/file.py:app``, an OpenEnv app this
            process serves for the run (:func:`serve_app`). observation: the function turning an observation (a dict)
            into the text the model reads (default :func:`observation_text`). prompt_column: the row's prompt column
            (``data.prompt_column``), not sent to ``reset``. max_turns, stop, max_turn_tokens: as the environment
            rollout's. base_dir: where relative file names are also looked up. env_timeout_s: seconds a reset or step
            may take.

    Returns:
        the environment rollout's contract dict and extras (``env_reward``, ``env_done``, ``num_turns``, ...).

    Raises:
        RolloutError: a setting is missing or does not load, the server does not answer, or a user function raised.
    """
    base = Path(base_dir) if base_dir else None
    if action is None:
        raise RolloutError("openenv_rollout needs rollout.kwargs.action: a function turning the model's text into "
                           "the environment's action (a dict)")
    if bool(url) == bool(server):
        raise RolloutError("openenv_rollout needs either rollout.kwargs.url (a running server) or "
                           "rollout.kwargs.server (module:app to serve), not both")
    address = url if url else serve_app(server, base)
    to_action = _function(action, "action", base)
    to_text = _function(observation, "observation", base) if observation is not None else observation_text
    opened: List[OpenEnvSession] = []
    try:
        return environment_rollout(prompts, client=client, tokenizer=tokenizer, rows=rows, env=OpenEnvSession, n=n,
                                   env_kwargs={"url": address, "to_action": to_action, "to_text": to_text,
                                               "prompt_column": prompt_column, "opened": opened},
                                   temperature=temperature, top_p=top_p, top_k=top_k, min_p=min_p,
                                   repetition_penalty=repetition_penalty, max_completion_length=max_completion_length,
                                   seed=seed, max_turns=max_turns, stop=stop, max_turn_tokens=max_turn_tokens,
                                   env_timeout_s=env_timeout_s)
    finally:
        _close_all(opened)


#: Seconds the end of a rollout waits for its sessions to close, all together.
CLOSE_WAIT_S = 2.0


def _close_all(opened: List["OpenEnvSession"]) -> None:
    """Close the episodes' sessions at once, waiting :data:`CLOSE_WAIT_S` seconds at most: a session whose server is
    stuck in the environment's code (a hung ``reset``, the run interrupted) holds its WebSocket's closing handshake
    for the client's own 10 s timeout; its closing is left on a daemon thread."""
    threads = [threading.Thread(target=episode.close, name="openenv-close", daemon=True) for episode in opened]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + CLOSE_WAIT_S
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))


openenv_rollout.extras = ENV_EXTRAS
openenv_rollout.uses_prompts = False  # reset's observation makes the prompt: data.prompt_column is optional

def validate_kwargs(kwargs: Dict[str, Any], base_dir: Optional[Path] = None) -> List[Tuple[str, ...]]:
    """Static checks of ``rollout.kwargs`` for :func:`openenv_rollout` (validate-config): the package is installed,
    ``action`` / ``observation`` / ``server`` import, ``url`` answers, and the multi-turn settings."""
    problems: List[Tuple[str, ...]] = unknown_settings(openenv_rollout, kwargs) + type_problems(kwargs)
    try:
        import openenv.core  # noqa: F401
    except ImportError:
        return problems + [("rollout.function", "the package openenv-core is not installed",
                            "pip install openenv-core (make install does)")]
    if not kwargs.get("action"):
        problems.append(("rollout.kwargs.action", "no action function", "action: path/play.py:to_action (text → dict)"))
    for key in ("action", "observation", "server"):
        if kwargs.get(key):
            try:
                found = _function(kwargs[key], key, base_dir)
            except RolloutError as exc:
                problems.append((f"rollout.kwargs.{key}", str(exc), "name it as package.module:name or "
                                                                     "path/file.py:name"))
                continue
            if key == "server" and (inspect.isclass(found) or not hasattr(found, "routes")):
                problems.append(("rollout.kwargs.server", f"{kwargs[key]} is {a_type(found)}, not an "
                                 "OpenEnv app", "name the app: app = create_app(MyEnvironment, MyAction, "
                                                "MyObservation), then server: path/server.py:app"))
    if bool(kwargs.get("url")) == bool(kwargs.get("server")):
        problems.append(("rollout.kwargs.url", "give either url (a running OpenEnv server) or server (module:app)",
                         "url: http://127.0.0.1:8000"))
    elif not str(kwargs.get("url") or "http://").startswith(("http://", "https://")):
        problems.append(("rollout.kwargs.url", f"must start with http:// or https://, got {kwargs['url']!r}",
                         f"url: http://{kwargs['url']}"))
    elif kwargs.get("url"):
        problems += _url_problems(str(kwargs["url"]))
    return problems


def _url_problems(url: str) -> List[Tuple[str, ...]]:
    import httpx

    try:
        httpx.get(url.rstrip("/") + "/health", timeout=5).raise_for_status()
    except httpx.HTTPError as exc:
        return [("rollout.kwargs.url", f"the OpenEnv server at {url} does not answer GET /health: {exc}",
                 "start the server first (or use server: module:app to have the run serve it)", "warning")]
    return []


openenv_rollout.validate_kwargs = validate_kwargs
