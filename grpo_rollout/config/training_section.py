"""The ``training`` section of the YAML schema (:mod:`.schema` holds the others): optimisation, the loss, dynamic
sampling, checkpoints and logging cadence. One field per key, as in :mod:`.schema`."""

from __future__ import annotations

from typing import Annotated, Literal, Optional, Tuple

from pydantic import AfterValidator, model_validator
from pydantic_core import PydanticCustomError

from .fields import Section, section, setting
from .values import Advantage, Device, ImportanceLevel, LossType, SamplerCorrection, ScaleRewards, _save_rollouts


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
    max_steps: int = setting(100, "Training steps (replaced by num_epochs when that is set)", ge=1,
                             fix="e.g. 100; or set training.num_epochs for passes over the data (with max_steps "
                                 "left out, or null)")
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
                                  "tokens (dapo), per micro-batch (bnpo), by a constant (dr_grpo); or another policy "
                                  "term: cispo (clipped importance weights, MiniMax-M1), sapo (a soft gate, Gao et "
                                  "al. 2025)")
    cispo_epsilon_low: float = setting(1.0, "loss_type cispo: importance weights are clipped to [1 - this, 1 + "
                                       "cispo_epsilon_high]; 1 = no lower bound (MiniMax-M1's choice)", ge=0, le=1)
    cispo_epsilon_high: float = setting(5.0, "loss_type cispo: the upper bound of the importance weight is 1 + this",
                                        gt=0, fix="e.g. 5 (SkyRL's CISPO example)")
    sapo_tau_positive: float = setting(1.0, "loss_type sapo: the soft gate's temperature for positive advantages",
                                       gt=0)
    sapo_tau_negative: float = setting(1.05, "loss_type sapo: the soft gate's temperature for negative advantages "
                                       "(higher: off-policy tokens fade faster)", gt=0)
    loss_function: str = setting("", "Your own policy term instead: path/file.py:function called with LossInputs "
                                 "(logps, old_logps, ratio, advantages, mask), returning (B, C) per-token losses, "
                                 "averaged by loss_type (docs/grpo.md)")
    entropy_coef: float = setting(0.0, "Entropy bonus: the loss subtracts this × each trained token's policy "
                                  "entropy (nats); 0 = off (the entropy is logged either way)", ge=0, le=1,
                                  fix="e.g. 0.001; 0 = off")
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
    advantage: Advantage = setting("grpo", "The baseline: grpo (the group's mean reward, scaled by scale_rewards), "
                                   "rloo (the mean of the group's other completions; Ahmadian et al. 2024), "
                                   "reinforce_pp (the batch's mean, over the batch's std; REINFORCE++, Hu et al. 2025)")
    advantage_function: str = setting("", "Your own advantages instead: path/file.py:function or module:function, "
                                      "called as fn(rewards, num_generations) with the step's (N,) rewards; returns "
                                      "(N,) advantages")
    credit: Literal["episode", "turn"] = setting(
        "episode", "episode: every token of an episode gets its advantage; turn: each turn's tokens get the group-"
        "normalised return from that turn on (the environment's turn rewards; DeepSeekMath's process supervision)")
    turn_discount: float = setting(1.0, "With credit turn: the discount of later turns' rewards in a turn's return",
                                   ge=0, le=1)
    scale_rewards: ScaleRewards = setting("group", "With advantage grpo: divide advantages by the reward std of the "
                                          "group, of the batch, or not at all (Dr. GRPO)")
    overlong_buffer: int = setting(0, "DAPO's soft overlong punishment: the last this many tokens before "
                                   "max_completion_length are penalised linearly, from 0 to -overlong_penalty at the "
                                   "limit (logged as rewards/overlong_penalty); 0 = off", ge=0,
                                   fix="e.g. a quarter of sampling.max_completion_length (DAPO: 4096 of 20480)")
    overlong_penalty: float = setting(1.0, "The overlong punishment's largest penalty (its weight in the reward sum)",
                                      ge=0)
    mask_truncated_completions: bool = setting(False, "Leave completions cut by max_completion_length out of the loss")
    sampler_correction: SamplerCorrection = setting("token_truncate", "Weights for the sampler's log-probs differing "
                                                    "from the trainer's: capped or masked, per token or sequence")
    sampler_correction_cap: float = setting(2.0, "The cap (truncate) or threshold (mask) of the sampler's weights",
                                            gt=0)
    logprob_chunk_size: int = setting(1024, "Positions per chunk of the log-prob computation (bounds the logits' "
                                      "memory)", ge=1)
    padding_free: bool = setting(True, "Pack a micro-batch's sequences into shared rows instead of padding them")
    shared_prefix: bool = setting(False, "Forward the prefix a micro-batch's sequences share (a group's prompt, an "
                                  "agent's system prompt) once, its completions attending to it through a 4D mask: "
                                  "the same log-probs and gradients, fewer tokens (off until every path holds)")
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
    async_generation: bool = setting(False, "An alias of max_staleness: 1 (streaming rollouts, each group at most one "
                                     "weight version behind; needs vLLM)")
    max_staleness: Optional[int] = setting(
        None, "Streaming rollouts: groups roll out continuously, and each is trained at most this many weight versions "
        "after the weights that sampled it (older: dropped, rolled again); 0 = synchronous steps; null = 0, or 1 with "
        "async_generation. Needs vLLM", ge=0, le=64,
        fix="e.g. 2 (4 for long-tailed multi-turn episodes); 0 = synchronous steps")
    max_inflight_groups: Optional[int] = setting(
        None, "Streaming: groups rolling out at once per training process; null = two steps' groups", ge=1,
        fix="e.g. 2 × prompts_per_step")
    device: Device = setting("auto", "Where the trainer runs; auto = CUDA when available")
    logging_steps: int = setting(1, "Log metrics every N steps", ge=1)
    log_completions: int = setting(4, "Completions shown per logged step (best and worst of the first groups)", ge=0)
    save_rollouts: Annotated[str, AfterValidator(_save_rollouts)] = setting(
        "off", "every, N or off: each step's token ids, masks and log-probs (for grpo-rollout inspect)",
        fix="e.g. every")
    seed: int = setting(42, "Seed of the prompt order and of the dry run's sampling")

    def staleness(self) -> int:
        """The staleness bound in effect: ``max_staleness``, else 1 with ``async_generation``, else 0."""
        if self.max_staleness is not None:
            return self.max_staleness
        return 1 if self.async_generation else 0

    def streaming_setting(self) -> Tuple[str, str]:
        """For messages about streamed rollouts: the setting that turned them on as written (``training.max_staleness
        2`` or ``training.async_generation true``) and the value that turns them off."""
        if self.max_staleness is not None:
            return f"training.max_staleness {self.max_staleness}", "max_staleness: 0"
        return "training.async_generation true", "async_generation: false"

    @model_validator(mode="before")
    @classmethod
    def _max_steps_unset(cls, data: object) -> object:
        """``max_steps: null`` next to ``num_epochs`` unsets it (a key of the file cannot be left out on the command
        line); alone it stays an error, whose fix names num_epochs."""
        if isinstance(data, dict) and data.get("max_steps", 0) is None and data.get("num_epochs") is not None:
            return {k: v for k, v in data.items() if k != "max_steps"}
        return data

    @model_validator(mode="after")
    def _one_async_key(self) -> "TrainingConfig":
        if self.async_generation and self.max_staleness is not None:
            raise PydanticCustomError("cross_key", "is set together with training.async_generation, its alias for "
                                      "max_staleness: 1", {
                                          "key": "max_staleness", "depends_on": ("async_generation", "max_staleness"),
                                          "fix": "keep one: max_staleness (any bound) or async_generation: true "
                                                 "(the bound 1)"})
        return self

    @model_validator(mode="after")
    def _one_baseline(self) -> "TrainingConfig":
        if self.scale_rewards != "group" and (self.advantage != "grpo" or self.advantage_function):
            chosen = "advantage_function" if self.advantage_function else f"advantage: {self.advantage}"
            raise PydanticCustomError("cross_key", f"applies to advantage: grpo only, and training.{chosen} is set", {
                "key": "scale_rewards", "depends_on": ("advantage", "advantage_function", "scale_rewards"),
                "fix": "remove training.scale_rewards (rloo divides by no std, reinforce_pp by the batch's; your "
                       "function scales as it likes)"})
        if self.credit == "turn" and (self.advantage != "grpo" or self.advantage_function or
                                      self.scale_rewards != "group"):
            key = "advantage_function" if self.advantage_function else \
                "advantage" if self.advantage != "grpo" else "scale_rewards"
            raise PydanticCustomError("cross_key", "is set together with training.credit: turn, whose advantages "
                                      "are the group-normalised turn returns", {
                                          "key": key, "depends_on": ("credit", key),
                                          "fix": "keep credit: turn with the default advantage settings, or use "
                                                 "credit: episode"})
        if self.advantage_function and self.advantage != "grpo":
            raise PydanticCustomError("cross_key", "is set together with training.advantage_function, which replaces it",
                                      {"key": "advantage", "depends_on": ("advantage", "advantage_function"),
                                       "fix": "keep one: a built-in advantage or your advantage_function"})
        return self

    @model_validator(mode="after")
    def _clip_range(self) -> "TrainingConfig":
        if self.epsilon_high is not None and self.epsilon_high < self.epsilon:
            raise PydanticCustomError("cross_key", f"is below training.epsilon ({self.epsilon})", {
                "key": "epsilon_high", "depends_on": ("epsilon", "epsilon_high"),
                "fix": "use a value >= epsilon (DAPO's clip-higher uses 0.28 with epsilon 0.2), or null"})
        return self
