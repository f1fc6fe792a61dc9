"""``model.lora``: the adapter settings and what LoRA rules out (several processes, NCCL weight transfer)."""

from __future__ import annotations

import importlib.util
from typing import List, Optional

from ..config.problems import Problem, add_error as _err, add_warning as _warn
from ..config.schema import Config
from .processes import world_size


def check_lora(config: Config, problems: List[Problem], processes: Optional[int] = None) -> None:
    """``model.lora``: ``target_modules`` is ``"all-linear"`` or a list of module names; with LoRA on (``r > 0``)
    the run is one process (FSDP2 sharding of a PEFT model is not supported), weights reach vLLM as merged files (not
    NCCL), and the usual full fine-tuning learning rate is flagged as too small. ``training.save_merged`` without
    LoRA is flagged as doing nothing."""
    lora, t = config.model.lora, config.training
    targets = lora.target_modules
    names_ok = isinstance(targets, list) and targets and all(isinstance(x, str) and x.strip() for x in targets)
    if not (isinstance(targets, str) and targets.strip()) and not names_ok:
        _err(problems, "model.lora.target_modules", targets,
             "must be \"all-linear\" or a non-empty list of module names",
             'e.g. all-linear, or [q_proj, k_proj, v_proj, o_proj] (names of linear layers inside the model)')
    on = isinstance(lora.r, int) and lora.r > 0
    if not on:
        if t.save_merged:
            _warn(problems, "training.save_merged", True, "does nothing without LoRA (model.lora.r is 0): every "
                  "checkpoint already is a whole model", "remove it, or set model.lora.r > 0")
        return
    if importlib.util.find_spec("peft") is None:
        _err(problems, "model.lora.r", lora.r, "LoRA needs the `peft` package, which is not installed",
             "pip install peft (a dependency of grpo-rollout), or set model.lora.r: 0")
    n = processes or world_size()
    if n > 1:
        _err(problems, "model.lora.r", lora.r, f"LoRA runs in one training process, but this run has {n} "
             "(FSDP2 sharding of a PEFT model is not supported)",
             "run one process (python -m grpo_rollout train ..., no torchrun), or set model.lora.r: 0")
    if config.vllm.weight_transfer == "nccl":
        _err(problems, "vllm.weight_transfer", "nccl", "with LoRA the weights are merged into files for vLLM; the "
             "NCCL broadcast sends the trainer's raw parameters", "use auto (or folder/http), or set model.lora.r: 0")
    if isinstance(lora.dropout, float) and 0 < lora.dropout < 1:
        _warn(problems, "model.lora.dropout", lora.dropout,
              "makes the trainer's log-probs random: the importance ratio, the KL and the check against vLLM's "
              "log-probs then carry dropout noise", "0.0 keeps them exact (GRPO's own regulariser is the clip)")
    if isinstance(t.learning_rate, float) and 0 < t.learning_rate < 1e-5:
        _warn(problems, "training.learning_rate", t.learning_rate,
              "is a full fine-tuning rate; LoRA adapters start at zero and barely move at it",
              "LoRA usually needs 1e-4 to 5e-4 (configs/quickstart_lora.yaml uses 2e-4)")
