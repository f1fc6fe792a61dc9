"""validate-config measures the dataset's prompts against ``sampling.max_prompt_length``, as the run will see them:
a chat prompt rendered with the chat template and the generation prompt, with the built-in tool-calling rollout's
Python tools (in the template or its system prompt, as ``tool_prompt`` picks); a verifiers taskset's rows carry the
task's system prompt and prompt.

What a prompt over the limit costs depends on the rollout: the recording endpoint (``agent_rollout``,
``verifiers_rollout``) refuses such a request (400), and the built-in multi-turn rollouts cut it from the left, losing
its system prompt and tool descriptions: an error for those. A single-turn prompt is cut from the left as the setting
says: a warning. The tokenizer is read from a local model folder (or the converted embedded model) only, so the
check needs no network and no model; where there is none, nothing is measured.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, List, Optional, Sequence, Tuple

from ..config.problems import Problem, add_error, add_warning
from ..config.schema import Config
from ..user_code.resolve import resolve_callable

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

#: Rows measured at most (the first ones): enough to find a systematic overrun, fast on any dataset.
MAX_ROWS = 2000
#: The rollouts that never answer from a cut prompt (an over-long one is an error for them), by their names.
WHOLE_PROMPT_ROLLOUTS = ("agent_rollout", "verifiers_rollout", "tool_calling_rollout")


@functools.lru_cache(maxsize=4)
def _tokenizer_at(folder: str) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder)


def local_tokenizer(name_or_path: str) -> Optional[PreTrainedTokenizerBase]:
    """The model's tokenizer when it is on this machine (a folder, or the embedded model once converted); ``None``
    otherwise (a hub id, a model not converted yet, a folder it cannot read)."""
    from ..models.builtin import PREFIX, cache_dir

    folder = (cache_dir() / "models" / name_or_path[len(PREFIX):] if name_or_path.startswith(PREFIX)
              else Path(name_or_path).expanduser())
    if not (folder / "config.json").is_file():
        return None
    try:
        return _tokenizer_at(str(folder.resolve()))
    except Exception:  # noqa: BLE001 - a folder without a usable tokenizer: the model check names it
        return None


def _shown(config: Config, tokenizer: PreTrainedTokenizerBase, base_dir: Path, rollout: Optional[Callable]) -> Tuple[Callable, bool]:
    """``prompt → the text the model is given first`` (a string as it is, messages through the chat template with
    the tool-calling rollout's Python tools), and whether tools are shown."""
    from ..rollouts.tool_prompt import ToolPrompt
    from ..rollouts.tool_running import load_tools

    kwargs = config.rollout.kwargs
    setup = None
    if getattr(rollout, "__name__", "") == "tool_calling_rollout" and kwargs.get("tools"):
        try:
            setup = ToolPrompt.of(tokenizer, load_tools(kwargs["tools"], base_dir), kwargs.get("tool_prompt", "auto"),
                                  kwargs.get("system_prompt"))
        except Exception:  # noqa: BLE001 - a tool that does not load is the rollout check's problem
            setup = None

    def shown(prompt: Any) -> str:
        if isinstance(prompt, str):
            return prompt
        messages = [dict(m) for m in prompt]
        if setup is not None:
            messages = setup.messages(messages)
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                             **(setup.template_kwargs if setup is not None else {}))

    return shown, setup is not None


def check_prompt_lengths(config: Config, prompts: Sequence[Any], problems: List[Problem], base_dir: Path) -> None:
    """Measure the first :data:`MAX_ROWS` ``prompts`` (one per dataset row) as the run renders them; the longest over
    ``sampling.max_prompt_length`` is a problem at that key (an error for :data:`WHOLE_PROMPT_ROLLOUTS`, else a
    warning), naming the row, its length and the setting that fits every measured prompt."""
    limit = config.sampling.max_prompt_length
    tokenizer = local_tokenizer(config.model.name_or_path) if limit else None
    if tokenizer is None:
        return
    try:
        rollout = resolve_callable(config.rollout.function, base_dir) if config.rollout.function else None
    except Exception:  # noqa: BLE001 - reported by check_functions
        rollout = None
    shown, with_tools = _shown(config, tokenizer, base_dir, rollout)
    try:
        texts = [shown(p) for p in list(prompts)[:MAX_ROWS]]
    except Exception:  # noqa: BLE001 - a template that cannot render them: the dry run and the run say why
        return
    lengths = [len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]
    over = [i for i, n in enumerate(lengths) if n > limit]
    if not over:
        return
    row = max(over, key=lambda i: lengths[i])
    whole = getattr(rollout, "__name__", "") in WHOLE_PROMPT_ROLLOUTS
    said = (f"{len(over)} of the first {len(lengths)} prompts are longer than max_prompt_length={limit} tokens as the "
            f"model sees them (chat template{', tools' if with_tools else ''} included); the longest, "
            f"row {row}, has {lengths[row]}: ")
    said += ("the recording endpoint refuses such a request, and the built-in multi-turn rollouts would cut its "
             "start (the system prompt, the tool descriptions)") if whole else "it is cut from the left"
    (add_error if whole else add_warning)(problems, "sampling.max_prompt_length", limit, said,
                                          f"set sampling.max_prompt_length: {max(lengths)} (or shorten the prompts; "
                                          "vllm.max_model_len grows with it)")
