"""LoRA adapters through PEFT (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language Models",
arXiv:2106.09685): a frozen weight ``W`` (``out × in``) gets a trainable update ``(alpha / r) · B · A`` with ``A``
(``r × in``, random) and ``B`` (``out × r``, zeros), so at the start the model is exactly the base model.

The trainer holds a ``peft.PeftModel`` as its policy. Everything LoRA-specific it needs lives here:

- :func:`apply_lora` / :func:`load_adapter`: wrap a freshly loaded base model with new or saved adapters;
- :func:`merged_state_dict`: the weights ``W + (alpha / r) · B · A`` under the base model's own parameter names, what
  vLLM (which serves the plain model) is sent, and what ``training.save_merged`` writes; it reads the adapters
  without merging them into the live weights, so the frozen base weights never drift (merging then unmerging in place
  would add rounding error to ``W`` at every sync);
- :func:`save_merged_model`: a ``save_pretrained`` folder of the merged model that
  ``AutoModelForCausalLM.from_pretrained`` loads without PEFT.

The reference model for the KL term is the base model, i.e. the policy with its adapters switched off
(``PeftModel.disable_adapter()``): no second copy of the weights.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Optional, Sequence, Tuple, Union

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

#: Files ``PeftModel.save_pretrained`` writes (what marks a checkpoint folder as an adapter checkpoint).
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
#: The sub-folder of a checkpoint that ``training.save_merged`` fills with the merged model.
MERGED_DIR = "merged"


def is_peft_model(model: Any) -> bool:
    """True when ``model`` is a ``peft.PeftModel`` (False also when PEFT is not installed)."""
    try:
        from peft import PeftModel
    except ImportError:
        return False
    return isinstance(model, PeftModel)


def is_adapter_checkpoint(folder: Union[str, Path]) -> bool:
    """True when ``folder`` holds a PEFT adapter (``adapter_config.json``), as LoRA checkpoints do."""
    return (Path(folder) / ADAPTER_CONFIG).is_file()


def _targets(target_modules: Any) -> Union[str, list]:
    """``"all-linear"`` (or another single name/regex) stays a string; a list (or OmegaConf ListConfig) becomes a list
    of strings."""
    return target_modules if isinstance(target_modules, str) else [str(x) for x in target_modules]


def apply_lora(model: Any, r: int, alpha: float, dropout: float = 0.0,
               target_modules: Union[str, Sequence[str]] = "all-linear") -> Any:
    """Wrap a causal LM with fresh LoRA adapters (``peft.get_peft_model``); only the adapters are trainable.

    Args:
        model: a ``transformers`` causal LM (its own dropout already off, see :func:`.pretrained.disable_dropout`).
        r: rank (>= 1). alpha: scale numerator (the update is ``alpha / r · B·A``). dropout: PEFT's dropout on the
            adapter input (0: none). target_modules: ``"all-linear"`` (every linear layer but the output head) or
            module names such as ``["q_proj", "v_proj"]``.

    Returns:
        the ``peft.PeftModel`` (it shares the base model's tensors; the base is changed in place).

    Raises:
        ValueError: no module of the model matches ``target_modules`` (PEFT's message names them).
    """
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=int(r), lora_alpha=float(alpha), lora_dropout=float(dropout),
                        target_modules=_targets(target_modules), bias="none", task_type="CAUSAL_LM")
    return get_peft_model(model, config)


def load_adapter(model: Any, folder: Union[str, Path], trainable: bool = True) -> Any:
    """Wrap a base causal LM with the adapters saved in ``folder`` (``PeftModel.from_pretrained``).

    Raises:
        FileNotFoundError: ``folder`` has no ``adapter_config.json``.
    """
    from peft import PeftModel

    if not is_adapter_checkpoint(folder):
        raise FileNotFoundError(f"{folder} holds no LoRA adapter ({ADAPTER_CONFIG} is missing)")
    return PeftModel.from_pretrained(model, str(folder), is_trainable=trainable)


def parameter_counts(model: Any) -> Tuple[int, int]:
    """``(trainable, total)`` numbers of parameters of ``model`` (each shared tensor counted once)."""
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return trainable, sum(p.numel() for p in model.parameters())


def merged_state_dict(model: Any) -> Dict[str, Any]:
    """The base model's ``state_dict()`` with every active adapter folded in: ``W + (alpha / r) · B·A`` for each
    adapted layer (PEFT's ``get_delta_weight``), named as the plain model names its parameters (``model.layers.0.
    self_attn.q_proj.weight``, no ``base_model.model.`` / ``base_layer`` / ``lora_*``). Adapted weights are new
    tensors; all others are the live (frozen) ones. Tied parameters (e.g. ``lm_head.weight`` and the input embedding)
    all get the merged value.

    Args:
        model: a ``peft.PeftModel`` with LoRA adapters (not merged in place).

    Raises:
        ValueError: the adapters are already merged into the weights (``merge_adapter``): folding them in again
            would count them twice.
    """
    import torch
    from peft.tuners.lora import LoraLayer

    base = model.get_base_model()
    merged: Dict[str, torch.Tensor] = {}
    for name, tensor in base.state_dict().items():
        if ".lora_" in name:
            continue
        merged[name.replace(".base_layer.", ".")] = tensor
    aliases: Dict[int, list] = {}  # base tensor id → every parameter name that shares it (tied weights)
    for name, param in base.named_parameters(remove_duplicate=False):
        aliases.setdefault(id(param), []).append(name.replace(".base_layer.", "."))
    with torch.no_grad():
        for name, module in base.named_modules():
            if not isinstance(module, LoraLayer):
                continue
            if module.merged:
                raise ValueError(f"{name}: the adapter is merged into the weights already; call unmerge_adapter() "
                                 "first")
            weight = module.get_base_layer().weight
            value = weight.detach().clone()
            for adapter in module.active_adapters:
                if adapter in module.lora_A or adapter in getattr(module, "lora_embedding_A", {}):
                    value += module.get_delta_weight(adapter).to(value.dtype)
            for alias in aliases.get(id(weight), [f"{name}.weight"]):
                merged[alias] = value
    return merged


def save_merged_model(model: Any, folder: Union[str, Path], tokenizer: Optional[PreTrainedTokenizerBase] = None,
                      weights: Optional[Dict[str, Any]] = None) -> Path:
    """Write the merged model (base + adapters) to ``folder`` as a plain ``save_pretrained`` folder (config,
    safetensors, generation config, and the tokenizer when given) that ``AutoModelForCausalLM.from_pretrained`` and
    vLLM load without PEFT. ``weights``: a :func:`merged_state_dict` already computed (computed here otherwise).
    Returns ``folder``."""
    folder = Path(folder)
    base = model.get_base_model()
    base.save_pretrained(folder, safe_serialization=True,
                         state_dict=weights if weights is not None else merged_state_dict(model))
    if tokenizer is not None:
        tokenizer.save_pretrained(folder)
    return folder
