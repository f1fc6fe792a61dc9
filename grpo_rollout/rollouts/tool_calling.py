"""The built-in tool-calling rollout: the model may call Python functions; their answers are fed back to it.

Config::

    rollout:
      function: grpo_rollout.rollouts.tool_calling:tool_calling_rollout
      kwargs:
        tools: [examples/multiply/task.py:multiply]   # dotted or file paths of plain functions
        max_turns: 3            # sampled turns per sample
        tool_timeout_s: 5       # a call running longer is abandoned and reported to the model as an error

Per sample: generate → parse ``<tool_call>`` blocks → run the tools (in the order written, each in its own thread,
with the timeout; exceptions become the tool's answer; ``parallel_tool_calls: true`` runs one turn's calls
concurrently) → append one tool message per call → generate again; until a turn has
no call, ``max_turns`` turns were sampled, or the ``max_completion_length`` budget is used up (tool tokens count).
All samples of the step run concurrently. Tool tokens get ``completion_mask`` 0 (see :mod:`.conversation`).

How the tools are described to the model (``tool_prompt``: ``auto``, ``template`` or ``system``): see
:mod:`.tool_prompt`.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple

from ..runs import names as rn
from .contract import SAMPLING_DEFAULTS as D, RolloutError
from .kwargs_checks import check_bool, check_optional_text, check_positive_seconds, one_of, type_problems, unknown_settings
from .conversation import Conversation, as_messages, eos_ids_of
from .env_timeouts import DEFAULT_ENV_TIMEOUT_S
from .episodes import run_multi_turn
from .failed_groups import finished_groups
from .tool_parsing import CALL_CLOSE, parse_tool_calls, stopped_inside_string
from .tool_prompt import ToolPrompt
from .tool_running import ToolError, ToolResult, cut_result, load_tools, run_tool_call, tool_schema
from .tool_sources import CONFIGURED_TOOLS, EpisodeTools, SourceStart, merged_tools, tool_source, with_observation

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase
    from ..generation.base import GenerationClient

#: Extras every sample gets (besides ``tool_calls/<name>`` and ``tool_errors/<name>`` for each configured tool).
TOOL_EXTRAS = (rn.NUM_TURNS_EXTRA, rn.NUM_TOOL_CALLS_EXTRA, rn.NUM_TOOL_ERRORS_EXTRA, rn.TOOL_RESULTS_EXTRA,
               rn.FINAL_RESPONSE_EXTRA, rn.TRUNCATED_EXTRA, rn.END_REASON_EXTRA, rn.END_DETAIL_EXTRA,
               rn.CALL_VERSIONS_EXTRA)
#: the ``rollout.kwargs`` keys naming tool sources (:mod:`.tool_sources`; the integrations register them), in the
#: order their tools follow the configured ones
SOURCE_KEYS = ("mcp_servers", "environment_factory")


def tool_message(result: ToolResult) -> Dict[str, Any]:
    """The chat message carrying one tool answer (role ``tool``; templates without tool support render it under
    that role name)."""
    return {"role": "tool", "name": result.name or "unknown", "content": result.content}


class _ToolEpisode:
    """Per-sample tool handling: parse the turn, run its calls (in the order written, or concurrently when
    ``parallel``), count them."""

    def __init__(self, tools: Dict[str, Callable], timeout_s: Optional[float], parallel: bool = False,
                 conv: Optional[Conversation] = None):
        self.tools, self.timeout_s, self.parallel, self.conv = tools, timeout_s, parallel, conv
        self.results: List[ToolResult] = []

    async def __call__(self, text: str) -> Optional[List[Dict[str, Any]]]:
        calls = parse_tool_calls(text)
        if not calls:
            return None
        # a token limit (max_completion_length, max_turn_tokens) stopped the turn inside its last call: cut off, not
        # malformed; it is not run
        cut = calls.pop() if not calls[-1].closed and self.conv is not None and self.conv.last_finish == "length" \
            else None
        if self.parallel:
            results = list(await asyncio.gather(*(run_tool_call(c, self.tools, self.timeout_s) for c in calls)))
        else:  # one after the other: write(path) then read(path) in one turn must see the file
            results = [await run_tool_call(c, self.tools, self.timeout_s) for c in calls]
        results += [cut_result(cut)] if cut is not None else []
        self.results += results
        return [tool_message(r) for r in results]

    @staticmethod
    def continue_turn(text: str) -> bool:
        """The stop string ``</tool_call>`` fell inside a JSON string argument: the call is not finished."""
        return stopped_inside_string(text)

    def extras(self) -> Dict[str, Any]:
        """This sample's tool counts (total, errors, per configured tool; a call cut off by a token limit is
        neither) and its ``tool_results`` records (all of them)."""
        made = [r for r in self.results if not r.cut]
        out: Dict[str, Any] = {rn.NUM_TOOL_CALLS_EXTRA: len(made),
                               rn.NUM_TOOL_ERRORS_EXTRA: sum(not r.ok for r in made),
                               rn.TOOL_RESULTS_EXTRA: [r.as_dict() for r in self.results]}
        for name in self.tools:
            out[rn.TOOL_CALLS_PREFIX + name] = sum(r.name == name for r in made)
            out[rn.TOOL_ERRORS_PREFIX + name] = sum(r.name == name and not r.ok for r in made)
        return out


def tool_calling_rollout(prompts: Sequence[Any], *, client: GenerationClient, tokenizer: PreTrainedTokenizerBase, n: int, tools: Sequence[Any] = (),
                         temperature: float = D.temperature, top_p: float = D.top_p, top_k: int = D.top_k,
                         min_p: float = D.min_p, repetition_penalty: float = D.repetition_penalty,
                         max_completion_length: int = D.max_completion_length, seed: Optional[int] = D.seed,
                         max_turns: int = 3, tool_timeout_s: Optional[float] = 10.0,
                         tool_prompt: str = "auto", system_prompt: Optional[str] = None,
                         stop: Optional[Sequence[str]] = (CALL_CLOSE,), max_turn_tokens: Optional[int] = None,
                         parallel_tool_calls: bool = False, mcp_servers: Optional[Sequence[Any]] = None,
                         environment_factory: Any = None,
                         rows: Optional[Sequence[Dict[str, Any]]] = None, base_dir: Optional[str] = None,
                         env_timeout_s: Optional[float] = DEFAULT_ENV_TIMEOUT_S, **_: Any) -> Dict[str, List[Any]]:
    """Sample ``n`` tool-using conversations per prompt.

    Args:
        prompts: ``P`` prompts (strings become one user message; chat message lists are used as they are).
        client: the generation client. tokenizer: its tokenizer (chat template).
        tools: functions or their names (``pkg.module:func``, ``path/file.py:func``); each needs type hints and an
            ``Args:`` docstring.
        n, temperature, ..., seed: the sampling settings; ``max_completion_length`` bounds the whole completion
            (sampled + tool tokens) of a sample.
        max_turns: sampled turns per sample (>= 1). tool_timeout_s: seconds per call (``None``: no limit).
        tool_prompt: ``auto``, ``template`` or ``system`` (see the module docstring). system_prompt: replaces the
            default system prompt text (``{tools}`` and ``{example}`` are filled in).
        stop: stop strings of every turn; the default ends a turn at ``</tool_call>`` so the tool runs before the
            model can invent its answer: a turn then holds one call (a ``</tool_call>`` written inside a JSON string
            argument does not end it: sampling goes on). ``null`` ends turns only at the end-of-turn token, so a turn
            can hold several calls.
        max_turn_tokens: tokens per turn at most (``None``: only the remaining budget limits a turn).
        parallel_tool_calls: run the calls of one turn concurrently; by default they run one after the other in
            the order the model wrote them (a later call may depend on an earlier one's effect).
        mcp_servers: MCP servers whose tools are added (``{command, args, env, cwd}`` started over stdio, or
            ``{url}``; :mod:`grpo_rollout.integrations.mcp.mcp_tools`, a tool source).
        environment_factory: TRL's environment factory (a class or its name, or a mapping of names to them): one
            environment per episode, reset with its prompt's row, whose public methods are tools
            (:mod:`grpo_rollout.integrations.trl.environment_factory`, a tool source). rows: the ``P`` dataset rows
            (for ``reset``). env_timeout_s: seconds each ``reset`` may take (``rollout.env_timeout_s``, the
            trainer's; raises EnvTimeout past it).
        base_dir: where relative tool file paths are also looked up.

    Returns:
        the contract dict: ``prompt_ids``, ``completion_ids``, ``logprobs``, ``completion_mask`` (``P × n`` rows,
        grouped by prompt) and the extras ``num_turns``, ``num_tool_calls``, ``num_tool_errors`` (ints),
        ``tool_calls/<name>`` and ``tool_errors/<name>`` per configured tool, ``tool_results`` (a list of
        ``{name, arguments, content, error}`` per sample), ``final_response`` (text of the last sampled turn) and
        ``truncated`` (the ``max_completion_length`` budget cut the episode); with ``environment_factory`` also
        ``environments`` (the episode's environment) and ``first_prompt`` (when a ``reset`` added to the prompt).

    Raises:
        RolloutError: a tool or environment cannot be loaded or described, or a setting is invalid.
    """
    if max_turns < 1:
        raise RolloutError(f"max_turns must be >= 1, got {max_turns}")
    sources = dict(zip(SOURCE_KEYS, (mcp_servers, environment_factory)))
    start = SourceStart(rows, len(prompts), n, Path(base_dir) if base_dir else None, env_timeout_s)
    parts = [[_configured_tools(tools, start.base_dir)]] * (len(prompts) * n)
    for key, spec in sources.items():
        if spec is not None:
            parts = [mine + [theirs] for mine, theirs in zip(parts, tool_source(key).start(spec, start))]
    eos = eos_ids_of(client, tokenizer)
    episodes, handlers, shown, setups = [], [], [], {}
    for k, sample_parts in enumerate(parts):
        sample_tools = merged_tools(sample_parts)
        if tuple(sample_tools) not in setups:  # how the tools are shown: once per tool set (environment class)
            setups[tuple(sample_tools)] = ToolPrompt.of(tokenizer, sample_tools, tool_prompt, system_prompt)
        setup = setups[tuple(sample_tools)]
        observation = next((p.observation for p in sample_parts if p.observation is not None), None)
        messages = with_observation(as_messages(prompts[k // n]), observation)
        shown.append(prompts[k // n] if observation is None else messages)
        conv = Conversation.start(tokenizer, setup.messages(messages), eos, client.max_prompt_length,
                                  **setup.template_kwargs)
        handler = _ToolEpisode(sample_tools, tool_timeout_s, parallel_tool_calls, conv)
        episodes.append((conv, handler))
        handlers.append(handler)
    failed: Dict[int, BaseException] = {}  # episodes that failed outside the model, their groups played again
    out = run_multi_turn(client, episodes, temperature=temperature, top_p=top_p, top_k=top_k, min_p=min_p,
                         repetition_penalty=repetition_penalty, seed=seed, stop=stop, max_turn_tokens=max_turn_tokens,
                         max_completion_length=max_completion_length, max_turns=max_turns, failed=failed,
                         group_size=n)
    per_sample = [h.extras() for h in handlers]
    for key in dict.fromkeys(k for e in per_sample for k in e):  # several environments: each its own tools
        out[key] = [e.get(key, 0) for e in per_sample]
    environments = [next((p.environment for p in ps if p.environment is not None), None) for ps in parts]
    if any(e is not None for e in environments):
        out[rn.ENVIRONMENTS_EXTRA] = environments
    if any(p.observation is not None for ps in parts for p in ps):
        out[rn.FIRST_PROMPT_EXTRA] = shown
    return finished_groups(out, failed, len(prompts), n)


def _configured_tools(tools: Sequence[Any], base_dir: Optional[Path]) -> EpisodeTools:
    """``rollout.kwargs.tools``, loaded.

    Raises:
        RolloutError: a tool does not load.
    """
    try:
        return EpisodeTools(load_tools(tools or [], base_dir), owner=CONFIGURED_TOOLS)
    except ToolError as exc:
        raise RolloutError(str(exc)) from exc


def _implied_rewards(kwargs: Dict[str, Any], base_dir: Optional[Path] = None,
                     env_timeout_s: Optional[float] = DEFAULT_ENV_TIMEOUT_S) -> List[Tuple[str, Callable]]:
    """The reward functions the configured tool sources imply (an environment's ``get_reward``)."""
    return [reward for key in SOURCE_KEYS if kwargs.get(key) is not None
            for reward in tool_source(key).rewards(kwargs[key], base_dir, env_timeout_s)]


tool_calling_rollout.extras = TOOL_EXTRAS + (rn.ENVIRONMENTS_EXTRA, rn.FIRST_PROMPT_EXTRA)
tool_calling_rollout.implied_rewards = _implied_rewards


def validate_kwargs(kwargs: Dict[str, Any], base_dir: Optional[Path] = None) -> List[Tuple[str, str, str]]:
    """Static checks of ``rollout.kwargs`` for :func:`tool_calling_rollout`: ``(key, message, fix)`` per problem
    (unknown settings, tools or environments that do not import or have no schema, the types and ranges of
    ``max_turns``, ``max_turn_tokens``, ``tool_timeout_s``, ``stop``, ``tool_prompt``, ``system_prompt``). Meant for validate-config."""
    problems = unknown_settings(tool_calling_rollout, kwargs) + type_problems(kwargs)
    problems += check_positive_seconds(kwargs, "tool_timeout_s") + check_optional_text(kwargs, "system_prompt")
    problems += check_bool(kwargs, "parallel_tool_calls")
    tools = kwargs.get("tools")
    specs = {key: kwargs[key] for key in SOURCE_KEYS if kwargs.get(key) is not None}
    for key, spec in specs.items():
        others = bool(tools) or any(other != key and bool(s) for other, s in specs.items())
        problems += tool_source(key).problems(spec, base_dir, others)
    if not tools:
        if not any(specs.values()):
            problems.append(("rollout.kwargs.tools", "no tools configured",
                             "list them: tools: [package.module:function, path/file.py:function], or give "
                             "mcp_servers or an environment_factory (TRL's: a class whose methods are the tools)"))
    elif not isinstance(tools, (list, tuple, str)):
        problems.append(("rollout.kwargs.tools", f"must be a list of tool names, got {tools!r}",
                         "tools: [package.module:function, path/file.py:function]"))
    else:
        try:
            for fn in load_tools(tools, base_dir).values():
                tool_schema(fn)
        except ToolError as exc:
            fix = ("fix the function's type hints/docstring" if "JSON schema" in str(exc)
                   else "fix the name: package.module:function or path/file.py:function")
            problems.append(("rollout.kwargs.tools", str(exc), fix))
    problems += one_of(kwargs, "tool_prompt", ("auto", "template", "system"), "auto")
    text = kwargs.get("system_prompt")
    if isinstance(text, str) and "{tools}" not in text and "{tools_json}" not in text:
        problems.append(("rollout.kwargs.system_prompt", "has no {tools} or {tools_json}: the tools are described to "
                         "the model only if the text itself does so (and only when the system prompt is used)",
                         "add {tools} (one line per tool) and {example} (an example call)", "warning"))
    return problems


tool_calling_rollout.validate_kwargs = validate_kwargs
