"""The YAML schema: one pydantic model per section, one field per key (prime-rl's style).

Each field holds the key's type (``Literal`` for a fixed set), default, range and a one-line description; a
:class:`~.fields.Rule` holds what ``validate-config`` says about a value outside it. Rules across keys of one section
are model validators; rules across sections and warnings are the check functions of :mod:`grpo_rollout.config`.
Loading (:mod:`~.loading`) turns pydantic's errors into the problem table; the JSON Schema, docs/config.md's config
reference and the server's settings all read these fields.
"""

from __future__ import annotations

from typing import Annotated, Any, Dict, List, Literal, Optional

from pydantic import AfterValidator, BaseModel, ConfigDict, model_validator
from pydantic_core import PydanticCustomError

from .fields import enums, section, setting

from .values import (BUILTIN_MODEL_PREFIX, DEVICES, DTYPES, IMPORTANCE_LEVELS, LOSS_TYPES, REPORT_TO,  # noqa: F401
                     SAMPLER_CORRECTIONS, SCALE_REWARDS, VLLM_MODES, WEIGHT_TRANSFERS, Device, DType, ImportanceLevel,
                     Logger, LossType, MinP, RepetitionPenalty, SamplerCorrection, ScaleRewards, TopK, TopP, VllmMode,
                     WeightTransfer, _save_rollouts)


class Section(BaseModel):
    """A section: unknown keys are errors, a number for a text key is taken as its text, NaN and inf are refused."""

    model_config = ConfigDict(extra="forbid", coerce_numbers_to_str=True, allow_inf_nan=False)


class LoraConfig(Section):
    """LoRA (Hu et al. 2021, arXiv:2106.09685) through PEFT: only low-rank adapters ``B·A`` (rank ``r``, scaled by
    ``alpha / r``) on ``target_modules`` train; the base weights stay frozen. Off while ``r`` is 0."""

    r: int = setting(0, "LoRA rank; 0 = LoRA off (every weight trains)", ge=0,
                     fix="e.g. 8 or 16 to train LoRA adapters, or 0 for full fine-tuning")
    alpha: float = setting(16.0, "Adapter outputs are scaled by alpha / r", gt=0, fix="e.g. 16 (often 2 × r)")
    dropout: float = setting(0.0, "PEFT's dropout on the adapters' input in training (makes log-probs random)",
                             ge=0, lt=1, fix="0.0 (deterministic log-probs) or e.g. 0.05")
    target_modules: Any = setting("all-linear", "`all-linear` (every linear layer but the output head) or a "
                                  "non-empty list of module names, e.g. [q_proj, v_proj]")


class ModelConfig(Section):
    """Which model to train, in which compute dtype, and whether with LoRA adapters."""

    name_or_path: str = setting("builtin:smollm2-135m-instruct", "A local folder, a hub id, or "
                                "`builtin:smollm2-135m-instruct` (embedded, no download)")
    dtype: DType = setting("float32", "Compute dtype of the trainer and vLLM; weights and optimizer stay float32")
    revision: Optional[str] = setting(None, "Hub revision (branch, tag or commit); null = the default branch")
    trust_remote_code: bool = setting(False, "Run the model repository's own Python code (transformers' option)")
    lora: LoraConfig = section(LoraConfig, "LoRA adapters instead of training every weight")


#: What a ``reasoning_gym:<task>`` prompt says after the question unless ``data.task_instruction`` replaces it: the
#: answer inside reasoning-gym's tags, where ``grpo_rollout.rewards.tasks:reasoning_gym_score`` reads it first
REASONING_GYM_INSTRUCTION = "Give your final answer between <answer> and </answer> tags."


class DataConfig(Section):
    """Where the training prompts come from."""

    train: str = setting("", "A .jsonl/.json/.csv/.parquet file, a hub dataset, `module:function` returning a "
                         "datasets.Dataset or a list of dicts, or `reasoning_gym:<task>` (`grpo-rollout tasks`)")
    split: str = setting("train", "The split of a hub dataset or of a function's DatasetDict")
    prompt_column: str = setting("prompt", "The column of each row's prompt: a string or a list of chat messages")
    shuffle: bool = setting(True, "Shuffle the prompt order each epoch (seeded by training.seed)")
    eval: str = setting("", "Held-out prompts for `evaluation` (the same sources as train); empty = none")
    eval_split: str = setting("test", "The split of data.eval for a hub dataset or a function's DatasetDict")
    task_kwargs: Dict[str, Any] = setting({}, "For `reasoning_gym:<task>` sources: create_dataset's arguments "
                                          "(size, seed and the task's settings: `grpo-rollout tasks <task>`); "
                                          "data.eval's rows never repeat data.train's")
    task_instruction: str = setting(REASONING_GYM_INSTRUCTION, "For `reasoning_gym:<task>` sources: the text after "
                                    "each question, training and held-out rows alike; your own replaces the default "
                                    "request for `<answer>` tags ('' for none)")


class RolloutConfig(Section):
    """The rollout function and the extra keyword arguments passed to it."""

    function: str = setting("", "`pkg.module:function` or `path/file.py:function`; empty = built-in sampling")
    kwargs: Dict[str, Any] = setting({}, "Extra keyword arguments for the rollout, passed as written")


class RewardConfig(Section):
    """One reward function, its weight in the weighted sum, and extra keyword arguments passed to it."""

    function: str = setting("", "`pkg.module:function` or `path/file.py:function`: one float per completion")
    weight: float = setting(1.0, "Its weight in the weighted sum of rewards")
    kwargs: Dict[str, Any] = setting({}, "Extra keyword arguments for the reward function, passed as written")


class SamplingConfig(Section):
    """Sampling settings, passed to the rollout function as keyword arguments (``n`` = ``num_generations``)."""

    num_generations: int = setting(
        8, "Completions per prompt: the GRPO group whose rewards are compared", ge=2,
        aliases=("n", "num_return_sequences"), fix="set it to 2 or more (4-16 is common)",
        problem="must be at least 2: GRPO scores each completion against the others of its group, so a group of one "
        "has zero advantage and learns nothing")
    temperature: float = setting(
        1.0, "Sampling temperature (the trainer's log-probs use it too)", gt=0,
        fix="use a sampling temperature such as 0.7-1.0", problem="must be > 0: at temperature 0 all completions of a "
        "group are identical, their rewards equal, and every advantage is zero")
    top_p: TopP = setting(1.0, "Nucleus sampling: the smallest set of tokens holding this probability; 1.0 = off",
                          fix="use 1.0 to disable nucleus sampling")
    top_k: TopK = setting(-1, "Sample among the k most likely tokens; -1 or 0 = off", fix="use -1 to disable top-k")
    min_p: MinP = setting(0.0, "Drop tokens below min_p × the most likely token's probability; 0.0 = off",
                          fix="use 0.0 to disable min-p")
    repetition_penalty: RepetitionPenalty = setting(1.0, "vLLM's penalty on tokens already present; 1.0 = none "
                                                    "(others turn the sampler correction off)", fix="use 1.0 for no "
                                                    "penalty")
    max_prompt_length: Optional[int] = setting(512, "Prompt tokens kept, cut from the left; null = no limit", ge=1,
                                               fix="use null for no limit")
    max_completion_length: int = setting(256, "Tokens a completion may have (a multi-turn episode's budget)", ge=1,
                                         aliases=("max_tokens", "max_new_tokens"))
    seed: Optional[int] = setting(None, "Seed of the sampler: step k's rollout gets seed + k, and each prompt its "
                                  "own seed from that and its tokens (sample j: + j); null = unseeded")


class DynamicSamplingConfig(Section):
    """DAPO's dynamic sampling (Yu et al. 2025, arXiv:2503.14476, section 3.2): groups whose rewards are all equal
    (no advantage, no policy gradient) are dropped and more prompts are rolled out until the step has
    ``prompts_per_step`` groups with reward variance, or ``max_rounds`` rollout calls are spent."""

    enabled: bool = setting(False, "Drop groups with equal rewards and roll out more prompts to refill the step")
    max_rounds: int = setting(3, "Rollout calls per step at most, the first included; then train on what there is",
                              ge=1)


class TrainingConfig(Section):
    """Optimisation settings. One step = one rollout batch of ``prompts_per_step`` × ``num_generations`` completions,
    followed by ``num_iterations`` optimizer updates on it."""

    output_dir: str = setting("outputs/run", "The run folder: checkpoints, metrics, logs (relative to the current "
                              "folder)")
    max_steps: int = setting(100, "Training steps", ge=1)
    num_epochs: Optional[float] = setting(None, "Passes over the dataset instead of max_steps: ceil(num_epochs × "
                                          "rows / prompts_per_step) steps", gt=0, fix="e.g. 1 or 2.5")
    prompts_per_step: int = setting(8, "Prompts rolled out per step, num_generations completions each", ge=1)
    micro_batch_size: int = setting(8, "Sequences per forward/backward pass; gradients accumulate over the step", ge=1)
    learning_rate: float = setting(1e-6, "AdamW's learning rate after warm-up; 0 = a diagnostic run", ge=0,
                                   fix="1e-6 to 1e-5 is usual for full fine-tuning")
    weight_decay: float = setting(0.0, "AdamW's decoupled weight decay", ge=0)
    warmup_steps: int = setting(0, "Steps of linear learning-rate warm-up from 0", ge=0)
    lr_scheduler: Literal["constant", "linear", "cosine"] = setting("constant", "The learning-rate schedule after "
                                                                    "warm-up (linear and cosine decay to 0)")
    max_grad_norm: float = setting(1.0, "Clip the gradient's global L2 norm to this; 0 = no clipping", ge=0)
    loss_type: LossType = setting("dapo", "How token losses are averaged: per sequence (grpo), over the step's "
                                  "tokens (dapo), per micro-batch (bnpo), by a constant (dr_grpo)")
    beta: float = setting(0.0, "KL coefficient against a frozen reference model (loaded only when > 0)", ge=0,
                          fix="e.g. 0.0 or 0.04")
    epsilon: float = setting(0.2, "Clip range: the importance ratio is clipped to [1 - epsilon, 1 + epsilon_high]",
                             gt=0, lt=1, fix="0.2 is the PPO/GRPO default")
    epsilon_high: Optional[float] = setting(None, "Upper clip range (DAPO's clip-higher); null = epsilon", gt=0,
                                            fix="DAPO uses 0.28; null = epsilon")
    importance_level: ImportanceLevel = setting("token", "token: PPO's ratio per token; sequence: GSPO's ratio per "
                                                "sequence (arXiv:2507.18071)")
    dynamic_sampling: DynamicSamplingConfig = section(DynamicSamplingConfig, "DAPO's dynamic sampling")
    num_iterations: int = setting(1, "Optimizer updates on each rollout batch (> 1: clipped off-policy updates)",
                                  ge=1, fix="1 = one update per generation batch")
    scale_rewards: ScaleRewards = setting("group", "Divide advantages by the reward std of the group, of the batch, "
                                          "or not at all (Dr. GRPO)")
    mask_truncated_completions: bool = setting(False, "Leave completions cut by max_completion_length out of the loss")
    sampler_correction: SamplerCorrection = setting("token_truncate", "Weights for the sampler's log-probs differing "
                                                    "from the trainer's: capped or masked, per token or sequence")
    sampler_correction_cap: float = setting(2.0, "The cap (truncate) or threshold (mask) of the sampler's weights",
                                            gt=0)
    logprob_chunk_size: int = setting(1024, "Positions per chunk of the log-prob computation (bounds the logits' "
                                      "memory)", ge=1)
    padding_free: bool = setting(True, "Pack a micro-batch's sequences into shared rows instead of padding them")
    compile: bool = setting(False, "torch.compile each decoder layer (minutes of compiling, then ~10% faster steps "
                            "on 2 CPU cores)")
    gradient_checkpointing: bool = setting(True, "Recompute each decoder layer's activations in the backward pass, "
                                           "as TRL's default: ~half the peak memory for 0-20% more training time on "
                                           "2 CPU cores (~1/3 more compute on a GPU)")
    save_steps: int = setting(0, "Save a checkpoint every N steps; 0 = only at the end", ge=0,
                              fix="e.g. 50 (0 = only at the end)")
    save_total_limit: Optional[int] = setting(None, "Keep only the newest N checkpoints; null = keep all", ge=1,
                                              fix="e.g. 2")
    save_only_model: bool = setting(False, "Checkpoints without optimizer state (smaller; a resume restarts AdamW)")
    save_merged: bool = setting(False, "With LoRA: also save the adapters merged into a whole model")
    max_nonfinite_steps: int = setting(3, "Steps in a row with a NaN/inf loss or gradient before the run stops",
                                       ge=1)
    async_generation: bool = setting(False, "Generate step t+1 while step t trains (one step off-policy; needs vLLM)")
    device: Device = setting("auto", "Where the trainer runs; auto = CUDA when available")
    logging_steps: int = setting(1, "Log metrics every N steps", ge=1)
    log_completions: int = setting(4, "Completions shown per logged step (best and worst of the first groups)", ge=0)
    save_rollouts: Annotated[str, AfterValidator(_save_rollouts)] = setting(
        "off", "every, N or off: each step's token ids, masks and log-probs (for grpo-rollout inspect)",
        fix="e.g. every")
    seed: int = setting(42, "Seed of the prompt order and of the dry run's sampling")

    @model_validator(mode="after")
    def _clip_range(self) -> "TrainingConfig":
        if self.epsilon_high is not None and self.epsilon_high < self.epsilon:
            raise PydanticCustomError("cross_key", f"is below training.epsilon ({self.epsilon})", {
                "key": "epsilon_high", "depends_on": ("epsilon", "epsilon_high"),
                "fix": "use a value >= epsilon (DAPO's clip-higher uses 0.28 with epsilon 0.2), or null"})
        return self


class EvaluationConfig(Section):
    """Held-out evaluation on ``data.eval`` with the run's own rollout and rewards and the current weights: pass@k
    (Chen et al. 2021, arXiv:2107.03374) of the success reward, each reward's mean, lengths. It changes nothing of
    training (weights, optimizer, prompt order, random state)."""

    every_steps: int = setting(0, "Evaluate every N steps; 0 = only at_start/at_end", ge=0)
    at_start: bool = setting(False, "Evaluate the model before step 1 (logged as step 0)")
    at_end: bool = setting(False, "Evaluate after the last step")
    num_generations: int = setting(1, "Completions per held-out prompt (the n of pass@k)", ge=1)
    temperature: float = setting(0.0, "Sampling temperature of the evaluation; 0 = greedy", ge=0)
    max_prompts: Optional[int] = setting(None, "Held-out prompts used, the first N; null = all", ge=1, fix="e.g. 64")
    success_reward: Optional[str] = setting(None, "The reward (its name in rewards/<name>) that decides success; "
                                            "null = the weighted total")
    success_threshold: float = setting(1.0, "A completion succeeds when that reward is at least this")
    pass_k: List[int] = setting([], "More k's for pass@k besides 1, 2, 4, ... and num_generations")

    @model_validator(mode="after")
    def _k_within_n(self) -> "EvaluationConfig":
        if any(k > self.num_generations or k < 1 for k in self.pass_k):
            raise PydanticCustomError("cross_key", f"asks for k > num_generations ({self.num_generations}) or k < 1",
                                      {"key": "pass_k", "depends_on": ("num_generations", "pass_k"),
                                       "fix": f"use k's from 1 to {self.num_generations}" if min(self.pass_k) < 1
                                       else f"raise evaluation.num_generations to {max(self.pass_k)}"})
        if self.temperature == 0 and self.num_generations > 1:
            raise PydanticCustomError("cross_key", "greedy decoding (temperature 0) gives the same completion "
                                      f"{self.num_generations} times, so pass@k for k > 1 would count one answer as "
                                      "several independent tries (and vLLM refuses n > 1 when greedy)",
                                      {"key": "num_generations", "depends_on": ("temperature", "num_generations"),
                                       "fix": "set evaluation.num_generations: 1 for greedy accuracy, or a "
                                       "temperature > 0 (e.g. 0.6-1.0) for pass@k"})
        return self


class VllmConfig(Section):
    """How generation reaches vLLM: ``spawn`` managed servers, ``attach`` to running ones, or ``off``
    (transformers in-process)."""

    mode: VllmMode = setting("spawn", "spawn managed servers, attach to url/urls, or off (transformers generates)")
    url: Optional[str] = setting(None, "attach: the server's base URL, e.g. http://127.0.0.1:8000")
    urls: List[str] = setting([], "attach: the base URLs of several servers")
    num_servers: int = setting(1, "spawn: how many servers (each its own port and log vllm-<i>.log)", ge=1)
    server_devices: List[str] = setting([], 'spawn: each server\'s CUDA_VISIBLE_DEVICES, e.g. ["4,5", "6,7"]; empty '
                                        "= inherited")
    weight_transfer: WeightTransfer = setting("auto", "folder (this machine), http (bytes, across hosts), nccl (GPU "
                                              "broadcast); auto = folder here, http elsewhere")
    host: str = setting("127.0.0.1", "The address a spawned or served server binds")
    port: int = setting(8000, "The server's port (spawn mode picks free ports itself)", ge=0, le=65535,
                        fix="e.g. 8000", problem="must be a TCP port (0-65535)")
    api_key: Optional[str] = setting(None, "The API key the server requires and the trainer sends")
    max_model_len: Optional[int] = setting(None, "The server's context length (tokens); null = max_prompt_length + "
                                           "max_completion_length", ge=1, fix="e.g. 2048")
    gpu_memory_utilization: float = setting(0.9, "The fraction of GPU memory vLLM may take; unset with a spawned "
                                            "server on the trainer's GPU: what it needs", gt=0, le=1)
    sleep_during_training: bool = setting(False, "Put the server to sleep (KV cache freed, weights offloaded; vLLM "
                                          "sleep level 1) while the trainer computes; wake it to sync and generate")
    kv_cache_space_gib: int = setting(2, "CPU build: the KV cache's size (GiB)", ge=1)
    enforce_eager: bool = setting(True, "Run vLLM without CUDA graphs (starts faster, decodes slower)")
    startup_timeout_s: float = setting(600.0, "Seconds a spawned server may take to answer", gt=0)
    sync_timeout_s: float = setting(600.0, "Seconds a weight sync may wait for a server before the run stops", gt=0)
    max_logprob_mismatch: Optional[float] = setting(0.5, "Stop when vLLM's log-probs are this far from the "
                                                    "trainer's (nats/token: stale weights); null = never", gt=0)
    extra_args: List[str] = setting([], "More vLLM command-line arguments, appended last")


class LoggingConfig(Section):
    """Where metrics go besides the console; ``jsonl`` writes ``output_dir/metrics.jsonl``."""

    report_to: List[Logger] = setting(["jsonl"], "Loggers: jsonl, trackio, wandb",
                                      fix="remove it or use jsonl, trackio or wandb",
                                      problem=f"unknown logger; allowed: {', '.join(REPORT_TO)}")
    project: str = setting("grpo-rollout", "The trackio/wandb project")
    run_name: Optional[str] = setting(None, "The trackio/wandb run name; null = the logger's own")


class Config(Section):
    """The whole run configuration, as loaded from YAML plus dotlist overrides."""

    model: ModelConfig = section(ModelConfig, "Which model to train")
    data: DataConfig = section(DataConfig, "The training prompts")
    rollout: RolloutConfig = section(RolloutConfig, "The rollout function")
    rewards: List[RewardConfig] = setting([], "Reward functions, summed with their weights (at least one)")
    sampling: SamplingConfig = section(SamplingConfig, "Sampling settings")
    training: TrainingConfig = section(TrainingConfig, "Optimisation settings")
    evaluation: EvaluationConfig = section(EvaluationConfig, "Held-out evaluation")
    vllm: VllmConfig = section(VllmConfig, "The generation servers")
    logging: LoggingConfig = section(LoggingConfig, "Metric loggers")


def default_of(model: type, key: str) -> Any:
    """The default of ``model``'s field ``key`` (``default_of(VllmConfig, "port")`` → 8000)."""
    return model.model_fields[key].get_default(call_default_factory=True)


ENUMS: Dict[str, tuple] = enums(Config)  #: allowed values of the keys that take one of a fixed set (their Literals)
