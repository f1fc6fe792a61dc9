"""The YAML schema: one pydantic model per section, one field per key (prime-rl's style).

Each field holds the key's type (``Literal`` for a fixed set), default, range and a one-line description; a
:class:`~.fields.Rule` holds what ``validate-config`` says about a value outside it. Rules across keys of one section
are model validators; rules across sections and warnings are the check functions of :mod:`grpo_rollout.config`.
The ``training`` section, the largest, is in :mod:`.training_section`. Loading (:mod:`~.loading`) turns pydantic's errors into the problem table; the JSON Schema, docs/config.md's config
reference and the server's settings all read these fields.
"""

from __future__ import annotations

from typing import Any, Dict, List, Literal, Optional

from pydantic import model_validator
from pydantic_core import PydanticCustomError

from .fields import Section, enums, section, setting
from .training_section import DynamicSamplingConfig, TrainingConfig  # noqa: F401 - sections of Config, re-exported
from .values import (BUILTIN_MODEL_PREFIX, DEVICES, DTYPES, IMPORTANCE_LEVELS, LOSS_TYPES, REPORT_TO,  # noqa: F401
                     SAMPLER_CORRECTIONS, SCALE_REWARDS, VLLM_MODES, WEIGHT_TRANSFERS, Device, DType, ImportanceLevel,
                     Logger, LossType, MinP, RepetitionPenalty, SamplerCorrection, ScaleRewards, TopK, TopP, VllmMode,
                     WeightTransfer, _save_rollouts)


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
                         "datasets.Dataset or a list of dicts, `reasoning_gym:<task>` (`grpo-rollout tasks`), or "
                         "`verifiers:<taskset>` (an installed verifiers 0.4 taskset's id, or its .py file)")
    split: str = setting("train", "The split of a hub dataset or of a function's DatasetDict")
    prompt_column: str = setting("prompt", "The column of each row's prompt: a string or a list of chat messages")
    shuffle: bool = setting(True, "Shuffle the prompt order each epoch (seeded by training.seed)")
    curriculum: Literal["none", "pass_rate"] = setting(
        "none", "pass_rate: a prompt that every or no completion solved in curriculum_patience visits in a row sits "
        "out its next curriculum_pause turns in the order, then is tried again; none: every prompt in its turn")
    curriculum_patience: int = setting(2, "With curriculum pass_rate: visits in a row solved by every or no "
                                       "completion before a prompt is paused", ge=1, le=1000)
    curriculum_pause: int = setting(1, "With curriculum pass_rate: turns in the prompt order (one per epoch) a "
                                    "paused prompt sits out", ge=1, le=1000)
    curriculum_success_reward: float = setting(1.0, "With curriculum pass_rate: a completion whose total reward is "
                                               "at least this counts as solved", allow_inf_nan=False,
                                               fix="e.g. 1.0 (a correctness reward's value for a right answer)")
    eval: str = setting("", "Held-out prompts for `evaluation` (the same sources as train); empty = none")
    eval_split: str = setting("test", "The split of data.eval for a hub dataset or a function's DatasetDict")
    task_kwargs: Dict[str, Any] = setting({}, "For `reasoning_gym:<task>` sources: create_dataset's arguments "
                                          "(size, seed and the task's settings: `grpo-rollout tasks <task>`); "
                                          "data.eval's rows never repeat data.train's; for `verifiers:<taskset>` "
                                          "sources: the taskset's config fields")
    task_instruction: str = setting(REASONING_GYM_INSTRUCTION, "For `reasoning_gym:<task>` sources: the text after "
                                    "each question, training and held-out rows alike; your own replaces the default "
                                    "request for `<answer>` tags ('' for none)")


#: ``rollout.failure_errors``' default: Python's connection and timeout errors (``socket.timeout`` is TimeoutError),
#: and httpx's network, timeout and server-hung-up errors (not all of ``httpx.TransportError``: its
#: ``UnsupportedProtocol``, ``LocalProtocolError`` and ``ProxyError`` are mistakes in the calling code or its setup)
FAILURE_ERRORS = ("ConnectionError", "TimeoutError", "httpx.NetworkError", "httpx.TimeoutException",
                  "httpx.RemoteProtocolError")


class RolloutConfig(Section):
    """The rollout function and the extra keyword arguments passed to it."""

    function: str = setting("", "`pkg.module:function` or `path/file.py:function`; empty = built-in sampling")
    kwargs: Dict[str, Any] = setting({}, "Extra keyword arguments for the rollout, passed as written")
    on_error: Literal["stop", "retry", "drop"] = setting(
        "stop", "An episode failing outside the model (EpisodeFailure or a failure_errors type: a server gone, a "
        "sandbox crashed): stop the run, play its group again (up to max_retries, then leave it out), or leave the "
        "group out of the step; a group left out is counted, and its error kept in failures.jsonl")
    max_retries: int = setting(2, "With on_error retry: how many times a failed group is played again", ge=0, le=10)
    failure_errors: List[str] = setting(
        list(FAILURE_ERRORS), "With on_error retry or drop: exception types (builtin names or dotted paths) that "
        "count as a failed episode when a rollout, environment or reward raises them, besides EpisodeFailure; any "
        "other error stops the run as a bug")
    env_timeout_s: float = setting(
        300.0, "Seconds each call an episode makes outside the model may take: an environment's reset, step, "
        "get_reward, an agent's or a verifiers taskset's whole episode (tools: "
        "rollout.kwargs.tool_timeout_s); past it the episode fails (rollout.on_error)", gt=0, le=86400,
        fix="e.g. 300; raise it for an environment that really needs longer (a sandbox that starts slowly)")


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
    api_key: Optional[str] = setting(None, "The API key the server requires on every route but /health and the "
                                     "trainer sends; null: spawn mode makes a random one per run")
    trusted_network: bool = setting(False, "serve without api_key: let anyone who reaches the port update the "
                                    "weights and call vLLM's control routes (refused otherwise)")
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
