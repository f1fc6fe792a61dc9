"""The YAML schema: one dataclass per top-level section.

OmegaConf builds a structured config from these dataclasses, so an unknown key or a value of the wrong type is
rejected. Value ranges and cross-key rules live in :mod:`grpo_rollout.config.checks`; this file only names the keys,
their types and their defaults.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

DTYPES = ("float32", "bfloat16", "float16")
LOSS_TYPES = ("grpo", "dr_grpo", "dapo", "bnpo")
IMPORTANCE_LEVELS = ("token", "sequence")
SCALE_REWARDS = ("group", "batch", "none")
VLLM_MODES = ("spawn", "attach", "off")
WEIGHT_TRANSFERS = ("auto", "folder", "http", "nccl")
SAMPLER_CORRECTIONS = ("none", "token_truncate", "token_mask", "sequence_truncate", "sequence_mask")
DEVICES = ("auto", "cpu", "cuda")
REPORT_TO = ("jsonl", "trackio", "wandb")
BUILTIN_MODEL_PREFIX = "builtin:"


@dataclass
class LoraConfig:
    """LoRA (Hu et al. 2021, arXiv:2106.09685) through PEFT: only low-rank adapters ``B·A`` (rank ``r``, scaled by
    ``alpha / r``) on ``target_modules`` train; the base weights stay frozen. Off while ``r`` is 0.

    ``target_modules``: ``"all-linear"`` (every linear layer but the output head) or a list of module names
    (e.g. ``[q_proj, k_proj, v_proj, o_proj]``). ``dropout``: PEFT's dropout on the adapter's input, active in the
    trainer's forward passes (the model's own dropout is always off, see ``models.loading.disable_dropout``)."""

    r: int = 0
    alpha: float = 16.0
    dropout: float = 0.0
    target_modules: Any = "all-linear"


@dataclass
class ModelConfig:
    """Which model to train. ``name_or_path``: a local folder, a hub id, or ``builtin:smollm2-135m-instruct``.
    ``lora``: train LoRA adapters instead of every weight (see :class:`LoraConfig`)."""

    name_or_path: str = "builtin:smollm2-135m-instruct"
    dtype: str = "float32"
    revision: Optional[str] = None
    trust_remote_code: bool = False
    lora: LoraConfig = field(default_factory=LoraConfig)


@dataclass
class DataConfig:
    """Where prompts come from. ``train``: a .jsonl/.json/.csv/.parquet file, a hub dataset name, or a dotted path to
    a function returning a ``datasets.Dataset``."""

    train: str = ""
    split: str = "train"
    prompt_column: str = "prompt"
    shuffle: bool = True


@dataclass
class RolloutConfig:
    """The rollout function (empty = built-in single-turn sampling) and extra keyword arguments passed to it."""

    function: str = ""
    kwargs: Dict[str, Any] = field(default_factory=dict)


@dataclass
class RewardConfig:
    """One reward function, its weight in the weighted sum, and extra keyword arguments passed to it."""

    function: str = ""
    weight: float = 1.0
    kwargs: Dict[str, Any] = field(default_factory=dict)


@dataclass
class SamplingConfig:
    """Sampling settings, passed to the rollout function as keyword arguments (``n`` = ``num_generations``)."""

    num_generations: int = 8
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    max_prompt_length: Optional[int] = 512
    max_completion_length: int = 256
    seed: Optional[int] = None


@dataclass
class DynamicSamplingConfig:
    """DAPO's dynamic sampling (Yu et al. 2025, arXiv:2503.14476, section 3.2): groups whose rewards are all equal
    (no advantage, no policy gradient) are dropped and more prompts are rolled out until the step has
    ``prompts_per_step`` groups with reward variance, or ``max_rounds`` rollout calls (the first included) are spent;
    then the step trains on the groups it has and says so."""

    enabled: bool = False
    max_rounds: int = 3


@dataclass
class TrainingConfig:
    """Optimisation settings. One step = one rollout batch of ``prompts_per_step`` × ``num_generations`` completions,
    followed by ``num_iterations`` optimizer updates on it. ``num_epochs`` (when set) replaces ``max_steps``: the run
    takes ``ceil(num_epochs × dataset rows / prompts_per_step)`` steps."""

    output_dir: str = "outputs/run"
    max_steps: int = 100
    num_epochs: Optional[float] = None
    prompts_per_step: int = 8
    micro_batch_size: int = 8
    learning_rate: float = 1e-6
    weight_decay: float = 0.0
    warmup_steps: int = 0
    lr_scheduler: str = "constant"
    max_grad_norm: float = 1.0
    loss_type: str = "dapo"
    beta: float = 0.0
    epsilon: float = 0.2
    epsilon_high: Optional[float] = None
    importance_level: str = "token"
    dynamic_sampling: DynamicSamplingConfig = field(default_factory=DynamicSamplingConfig)
    num_iterations: int = 1
    scale_rewards: str = "group"
    mask_truncated_completions: bool = False
    sampler_correction: str = "token_truncate"
    sampler_correction_cap: float = 2.0
    logprob_chunk_size: int = 1024
    padding_free: bool = True
    compile: bool = False
    gradient_checkpointing: bool = False
    save_steps: int = 0
    save_total_limit: Optional[int] = None
    save_only_model: bool = False
    save_merged: bool = False
    max_nonfinite_steps: int = 3
    async_generation: bool = False
    device: str = "auto"
    logging_steps: int = 1
    log_completions: int = 4
    save_rollouts: str = "off"
    seed: int = 42


@dataclass
class VllmConfig:
    """How generation reaches vLLM: ``spawn`` managed servers, ``attach`` to ``url``/``urls``, or ``off``
    (transformers). ``num_servers``: servers to spawn (each its own port and log ``vllm-<i>.log``; one server logs to
    ``vllm.log``). ``server_devices``: per spawned server, the ``CUDA_VISIBLE_DEVICES`` it gets (e.g. ``["4,5",
    "6,7"]``: two servers with tensor parallelism 2 each; empty: they inherit this process's). ``weight_transfer``:
    ``folder`` (a path on this machine), ``http`` (bytes streamed, works across hosts), ``nccl`` (GPU broadcast), or
    ``auto`` (``folder`` for servers on this machine, else ``http``). ``sync_timeout_s``: seconds a weight sync may
    wait for a server's answer before the run stops naming it (a line says how long it has waited every 30 s)."""

    mode: str = "spawn"
    url: Optional[str] = None
    urls: List[str] = field(default_factory=list)
    num_servers: int = 1
    server_devices: List[str] = field(default_factory=list)
    weight_transfer: str = "auto"
    host: str = "127.0.0.1"
    port: int = 8000
    api_key: Optional[str] = None
    max_model_len: Optional[int] = None
    gpu_memory_utilization: float = 0.9
    kv_cache_space_gib: int = 2
    enforce_eager: bool = True
    startup_timeout_s: float = 600.0
    sync_timeout_s: float = 600.0
    max_logprob_mismatch: Optional[float] = 0.5
    extra_args: List[str] = field(default_factory=list)


@dataclass
class LoggingConfig:
    """Where metrics go besides the console. ``jsonl`` writes ``output_dir/metrics.jsonl``."""

    report_to: List[str] = field(default_factory=lambda: ["jsonl"])
    project: str = "grpo-rollout"
    run_name: Optional[str] = None


@dataclass
class Config:
    """The whole run configuration, as loaded from YAML plus dotlist overrides."""

    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    rewards: List[RewardConfig] = field(default_factory=list)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    vllm: VllmConfig = field(default_factory=VllmConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)


# Allowed values of the string keys that take one of a fixed set.
ENUMS: Dict[str, tuple] = {
    "model.dtype": DTYPES,
    "training.loss_type": LOSS_TYPES,
    "training.importance_level": IMPORTANCE_LEVELS,
    "training.scale_rewards": SCALE_REWARDS,
    "training.lr_scheduler": ("constant", "linear", "cosine"),
    "vllm.mode": VLLM_MODES,
    "vllm.weight_transfer": WEIGHT_TRANSFERS,
    "training.device": DEVICES,
    "training.sampler_correction": SAMPLER_CORRECTIONS,
}
