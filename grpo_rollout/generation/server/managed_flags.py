"""Static check of ``vllm.extra_args`` against the flags the server launcher sets itself.

:func:`grpo_rollout.generation.server.launch.server_command` writes ``--model``, ``--dtype``, ``--max-model-len``,
``--host``, ``--port``, ``--api-key``, ``--logprobs-mode``, ... from the config and appends ``vllm.extra_args`` last,
so a repeated flag silently wins over the config key (vLLM's parser keeps the last value): ``--dtype float16`` with
``model.dtype: float32`` serves other numbers than the trainer computes, ``--port 9000`` in spawn mode leaves the
trainer waiting on the port it picked. Such a flag is an error naming the key to set instead; one that repeats the
config's own value is a warning (it does nothing).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from ...config.batch_checks import needed_model_len
from ...config.problems import Problem, add_error, add_warning
from ...config.schema import Config

_DTYPE_ALIASES = {"half": "float16", "float": "float32", "bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


@dataclass(frozen=True)
class Managed:
    """A flag the launcher sets: the config key it comes from (``None``: fixed by grpo-rollout), the value it gets
    from a config (``None``: the launcher picks it, or leaves it out), and how a written value is normalised."""

    key: Optional[str]
    value: Callable[[Config], Any]
    normalise: Callable[[str], Any] = str
    takes_value: bool = True


def _spawn(config: Config) -> bool:
    return config.vllm.mode == "spawn"


def _int(text: str) -> Any:
    try:
        return int(text)
    except ValueError:
        return text


def _float(text: str) -> Any:
    try:
        return float(text)
    except ValueError:
        return text


#: flag (as vLLM spells it, dashes) → what the launcher sets; kept in step with ``server_command`` by
#: ``tests/unit/test_algorithm_server_checks.py::test_every_flag_the_launcher_sets_is_managed``.
MANAGED_FLAGS: Dict[str, Managed] = {
    "--model": Managed("model.name_or_path", lambda c: c.model.name_or_path),
    "--served-model-name": Managed("model.name_or_path", lambda c: c.model.name_or_path),
    "--dtype": Managed("model.dtype", lambda c: c.model.dtype, lambda v: _DTYPE_ALIASES.get(v, v)),
    "--max-model-len": Managed("vllm.max_model_len", lambda c: c.vllm.max_model_len or needed_model_len(c.sampling),
                               _int),
    "--host": Managed("vllm.host", lambda c: "127.0.0.1" if _spawn(c) else c.vllm.host),
    "--port": Managed("vllm.port", lambda c: None if _spawn(c) else c.vllm.port, _int),
    "--api-key": Managed("vllm.api_key", lambda c: c.vllm.api_key),
    "--logprobs-mode": Managed(None, lambda c: "processed_logprobs"),
    "--gpu-memory-utilization": Managed("vllm.gpu_memory_utilization", lambda c: c.vllm.gpu_memory_utilization,
                                        _float),
    "--enforce-eager": Managed("vllm.enforce_eager", lambda c: c.vllm.enforce_eager, lambda v: True, False),
    "--no-enforce-eager": Managed("vllm.enforce_eager", lambda c: c.vllm.enforce_eager, lambda v: False, False),
    "--enable-sleep-mode": Managed("vllm.sleep_during_training", lambda c: c.vllm.sleep_during_training,
                                   lambda v: True, False),
    "--no-enable-sleep-mode": Managed("vllm.sleep_during_training", lambda c: c.vllm.sleep_during_training,
                                      lambda v: False, False),
    "--weight-transfer-config": Managed("vllm.weight_transfer",
                                        lambda c: '{"backend": "nccl"}' if c.vllm.weight_transfer == "nccl" else None),
}


def _flags(args: List[str]) -> Iterator[Tuple[int, str, Optional[str]]]:
    """``(index, flag, value)`` of every managed flag in ``args`` (``--flag=value``, ``--flag value``; underscores
    read as dashes, as vLLM's parser does)."""
    for i, arg in enumerate(args):
        if not isinstance(arg, str) or not arg.startswith("--"):
            continue
        name, eq, inline = arg.partition("=")
        name = "--" + name[2:].replace("_", "-")
        managed = MANAGED_FLAGS.get(name)
        if managed is None:
            continue
        if not managed.takes_value:
            yield i, name, None
        elif eq:
            yield i, name, inline
        else:
            following = args[i + 1] if i + 1 < len(args) else None
            yield i, name, following if isinstance(following, str) and not following.startswith("--") else None


def _yaml(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _fix(flag: str, managed: Managed, spawn: bool, got: Any, where: str) -> str:
    remove = f"remove `{flag}` from {where}"
    if managed.key is None:
        return f"{remove}: grpo-rollout needs the value it sets"
    if flag in ("--host", "--port") and spawn:
        return f"{remove}: spawn mode serves on 127.0.0.1 at a free port it picks (set {managed.key} for " \
               "`grpo-rollout serve`)"
    if flag in ("--model", "--served-model-name"):
        return f"{remove}: the server must serve the model being trained (model.name_or_path)"
    if flag == "--weight-transfer-config":
        return f"{remove}; set vllm.weight_transfer: nccl to start vLLM's NCCL weight transfer"
    if where == "--vllm-arg" and flag in ("--dtype", "--max-model-len"):  # grpo-rollout serve's own options
        return f"{remove} and pass `{flag} {got}` to grpo-rollout serve instead (or set {managed.key}: {_yaml(got)} " \
               "in its config); the trainer's config must say the same"
    return f"{remove} and set {managed.key}: {_yaml(got)} instead (or only remove it, to keep the config's value)"


def check_server_args(config: Config, problems: List[Problem], args: Optional[Sequence[str]] = None,
                      where: str = "vllm.extra_args") -> None:
    """Every flag in ``vllm.extra_args`` that the launcher sets itself (:data:`MANAGED_FLAGS`): an error when its value
    differs from the one the config gives the launcher, a warning when it repeats it. ``args``/``where``: other
    arguments appended to the server's command line and what they are called (``grpo-rollout serve``'s
    ``--vllm-arg``)."""
    args = list(config.vllm.extra_args or []) if args is None else list(args)
    for i, flag, written in _flags(args):
        managed = MANAGED_FLAGS[flag]
        expected = managed.value(config)
        text = flag if written is None else f"{flag} {written}"
        if managed.takes_value and written is None:
            add_error(problems, f"{where}[{i}]", text, f"`{flag}` has no value", f"remove `{flag}` from {where}")
            continue
        got = managed.normalise(written if written is not None else "")
        if managed.key is None:
            source = f"grpo-rollout's own value {expected!r}"
        elif flag == "--max-model-len" and not config.vllm.max_model_len:
            source = f"sampling.max_prompt_length + sampling.max_completion_length = {expected!r}, vllm.max_model_len " \
                     "being null"
        else:
            source = f"{managed.key} = {_yaml(expected)}"
        if expected is not None and got == expected:
            add_warning(problems, f"{where}[{i}]", text,
                        f"repeats what the launcher already sets ({source})", f"remove `{flag}` from {where}")
        else:
            if expected is not None:
                now = f"the launcher sets it from {source}" if managed.key else f"the launcher sets {source}"
            elif flag == "--port":
                now = "spawn mode picks a free port itself"
            elif flag == "--api-key" and _spawn(config):
                now = "vllm.api_key is unset, so spawn mode gives the server a random key of its own for the run"
            else:
                now = f"{managed.key} is unset, so the launcher leaves it out and the trainer assumes none"
            add_error(problems, f"{where}[{i}]", text,
                      f"contradicts a setting grpo-rollout manages ({now}); extra args come last, so the server "
                      f"would run with `{text}` while the trainer assumes the config's value",
                      _fix(flag, managed, _spawn(config), got, where),
                      depends_on=(managed.key,) if managed.key else ())
