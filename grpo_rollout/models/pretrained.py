"""Loading the policy (and reference) model and tokenizer named by ``model.name_or_path``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Optional, Tuple

from ..config.schema import DTYPES  # the one list of model.dtype names (the config's)

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


def torch_dtype(name: str) -> Any:
    """The torch dtype of a ``model.dtype`` name (one of :data:`DTYPES`).

    Raises:
        ValueError: ``name`` is not one of them.
    """
    import torch

    if name not in DTYPES:
        raise ValueError(f"model.dtype must be one of {', '.join(DTYPES)}, got {name!r}")
    return getattr(torch, name)


class ModelLoadError(ValueError):
    """A model (``model.name_or_path``, or a checkpoint) that transformers cannot find, reach or read: named, with
    what transformers said first and the fix."""

    def __init__(self, name_or_path: str, cause: BaseException):
        said = next((line.strip() for line in str(cause).splitlines() if line.strip()), type(cause).__name__)
        super().__init__(f"cannot load the model {name_or_path!r}: {type(cause).__name__}: {said[:300]}. Fix "
                         "model.name_or_path: a local folder holding config.json, the weights and the tokenizer "
                         "files; a Hugging Face hub id this machine can download (or has in its cache, with "
                         "HF_HUB_OFFLINE=1); or builtin:smollm2-135m-instruct")


def load_model_and_tokenizer(name_or_path: str, dtype: str = "float32", revision: Optional[str] = None,
                             trust_remote_code: bool = False,
                             progress: Optional[Callable[[str], None]] = None) -> Tuple[Any, Any, str]:
    """Load a causal LM and its tokenizer; ``builtin:`` names are converted once (see :mod:`.builtin`).

    Returns ``(model, tokenizer, resolved_path)``. The tokenizer gets a pad token (the EOS token) if it has none.

    Raises:
        ValueError: unknown built-in name or missing package. ModelLoadError (a ValueError): transformers cannot
            find, reach or read the model or its tokenizer.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # our own progress output is enough

    from .builtin import resolve_model_path

    path = resolve_model_path(name_or_path, progress=progress)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, revision=revision, trust_remote_code=trust_remote_code)
        model = AutoModelForCausalLM.from_pretrained(path, revision=revision, dtype=torch_dtype(dtype),
                                                     trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as exc:  # not found, not reachable, not a model folder, no tokenizer in it
        raise ModelLoadError(name_or_path, exc) from exc
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    disable_dropout(model)
    return model, tokenizer, path


def eos_token_ids(model: Any, tokenizer: PreTrainedTokenizerBase) -> set:
    """The token ids that end a completion: the model's generation config's ``eos_token_id`` (an id or a list),
    else the tokenizer's."""
    config = getattr(model, "generation_config", None)
    eos = config.eos_token_id if config is not None else None
    eos = eos if eos is not None else tokenizer.eos_token_id
    return set(eos if isinstance(eos, (list, tuple)) else [eos])


def disable_dropout(model: Any) -> int:
    """Switch every dropout of ``model`` off, in train mode too; returns how many were on.

    GRPO compares log-probs of the same tokens under the policy, the old policy, the reference model and the sampler;
    dropout would make them differ at random (a KL and importance ratios away from 0 and 1 with identical weights).
    TRL does the same by default (``disable_dropout``). Covers ``nn.Dropout*`` modules (GPT-2 style) and the float
    attributes named ``*dropout`` that attention modules read at run time (Llama's ``attention_dropout``).
    """
    import torch

    changed = 0
    for module in model.modules():
        if isinstance(module, torch.nn.modules.dropout._DropoutNd):
            changed += module.p > 0
            module.p = 0.0
            continue
        for name, value in list(vars(module).items()):
            if name.endswith("dropout") and isinstance(value, float):
                changed += value > 0
                setattr(module, name, 0.0)
    return changed
