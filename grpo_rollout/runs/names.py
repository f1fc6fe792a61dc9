"""The one registry of what a run folder holds and what a step logs: file names and metric names.

Every module that writes or reads these names (the trainer's stages, the console, ``grpo-rollout plot`` /
``inspect``, the CLI's summary) takes them from here, so a rename cannot silently empty a plot panel. This module
imports nothing of :mod:`grpo_rollout`.

Step convention: the ``step`` written to ``metrics.jsonl``, ``completions.jsonl``, ``rollouts/step_<k>.jsonl`` and
``checkpoint-<k>`` is 1-based (the k-th step trained; checkpoint ``k`` holds ``k`` completed steps); inside
:class:`grpo_rollout.trainer.recipe.GRPORecipe` a step is 0-based, and the recipe adds 1 where it logs or saves.
"""

from __future__ import annotations

# -- the run folder (training.output_dir) ------------------------------------------------------------------------------
CONFIG_FILE = "config.yaml"            # the resolved config, written when training starts
METRICS_FILE = "metrics.jsonl"         # one JSON object per logged step (logging.report_to: jsonl)
COMPLETIONS_FILE = "completions.jsonl"  # one JSON line per sampled completion of a logged step
ROLLOUTS_DIR = "rollouts"              # token-level records, rollouts/step_<k>.jsonl (training.save_rollouts)
ROLLOUT_FILE_PREFIX = "step_"
VLLM_LOG = "vllm.log"                  # a spawned vLLM server's output (vllm-<i>.log with several servers)
FAILURES_FILE = "failures.jsonl"       # one JSON line per episode attempt that failed outside the model (on_error)
STEP = "step"                          # the 1-based step of every line of the .jsonl files


def rollout_file(step: "int | str") -> str:
    """The name of step ``step``'s (1-based) token-level file in :data:`ROLLOUTS_DIR`: ``step_<step>.jsonl``
    (``"*"`` gives the glob of them all)."""
    return f"{ROLLOUT_FILE_PREFIX}{step}.jsonl"


def server_log(index: int, num_servers: int) -> str:
    """The log file of spawned server ``index`` (0-based) of ``num_servers``: ``vllm.log`` for a lone server."""
    return VLLM_LOG if num_servers == 1 else f"vllm-{index}.log"


# -- reward ----------------------------------------------------------------------------------------------------------
REWARD = "reward"                      # the step's mean total reward
REWARD_STD = "reward_std"
REWARD_MIN = "reward_min"
REWARD_MAX = "reward_max"
FRAC_REWARD_ZERO_STD = "frac_reward_zero_std"  # share of groups whose rewards are all equal
REWARDS_PREFIX = "rewards/"            # + function name (+ /mean, /std, /timeouts); also a sample record's key
TIMEOUTS = "timeouts"                  # rewards/<name>/timeouts: completions the function gave up on for lack of time


def reward_fn(name: str, stat: str = "mean") -> str:
    """``rewards/<name>/<stat>``: the step's ``mean`` (or ``std``, or :data:`TIMEOUTS`: a count) of reward function
    ``name``."""
    return f"{REWARDS_PREFIX}{name}/{stat}"


def reward_fn_of_mean(key: str):
    """The function name of a ``rewards/<name>/mean`` key, or ``None`` for any other key."""
    if key.startswith(REWARDS_PREFIX) and key.endswith("/mean") and len(key) > len(REWARDS_PREFIX) + len("/mean"):
        return key[len(REWARDS_PREFIX):-len("/mean")]
    return None


# -- loss and update -------------------------------------------------------------------------------------------------
LOSS = "loss"
GRAD_NORM = "grad_norm"
KL = "kl"
ENTROPY = "entropy"                  # the policy's mean entropy per trained token (nats), first iteration
ENTROPY_SEQ_MIN = "entropy/seq_min"  # the lowest / highest mean entropy of one sequence's trained tokens
ENTROPY_SEQ_MAX = "entropy/seq_max"
CLIP_LOW = "clip_ratio/low"
CLIP_HIGH = "clip_ratio/high"
CLIP_REGION = "clip_ratio/region"
RATIO_MAX = "ratio/max"
NUM_TOKENS = "num_tokens"
NONFINITE_SKIPPED = "nonfinite_skipped"
NO_SIGNAL_SKIPPED = "no_signal_skipped"
LEARNING_RATE = "learning_rate"
TOKENS_FORWARD = "tokens/forward"
TOKENS_PADDED = "tokens/padded"


def per_iteration(metric: str, k: int) -> str:
    """``<metric>/iteration_<k>`` (k from 1): :data:`LOSS` or :data:`GRAD_NORM` of one of ``num_iterations`` > 1
    updates."""
    return f"{metric}/iteration_{k}"


# -- sampler vs trainer ----------------------------------------------------------------------------------------------
SAMPLER_LOGPROB_ABS_DIFF = "sampler/logprob_abs_diff"
# streaming: the same gap over the samples drawn by the trainer's current weights (fresh), and by older ones (stale)
SAMPLER_LOGPROB_ABS_DIFF_FRESH = "sampler/logprob_abs_diff_fresh"
SAMPLER_LOGPROB_ABS_DIFF_STALE = "sampler/logprob_abs_diff_stale"
SAMPLER_IS_WEIGHT_MEAN = "sampler/is_weight_mean"
SAMPLER_IS_WEIGHT_MIN = "sampler/is_weight_min"
SAMPLER_IS_WEIGHT_MAX = "sampler/is_weight_max"
SAMPLER_WEIGHT_VERSION_LAG = "sampler/weight_version_lag"

# -- completions -----------------------------------------------------------------------------------------------------
MEAN_LENGTH = "completions/mean_length"
MAX_LENGTH = "completions/max_length"
MIN_LENGTH = "completions/min_length"
TRUNCATED_FRACTION = "completions/truncated_fraction"
UNTRAINED = "completions/untrained"  # completions with no token to train on (completion_mask all 0, or empty): count

# -- rollout extras, episodes and tools ------------------------------------------------------------------------------
# The extras the built-in rollouts return (one value per completion), read by the trainer's statistics, logs and
# console: each key once, here.
END_REASON_EXTRA = "end_reason"          # why a multi-turn episode ended (rollouts/episodes.py END_REASONS)
END_DETAIL_EXTRA = "end_detail"          # the same, in words
FIRST_PROMPT_EXTRA = "first_prompt"      # what the model saw first (an environment's reset), shown as the prompt
NUM_TURNS_EXTRA = "num_turns"
TURN_STARTS_EXTRA = "turn_starts"        # per completion: the completion-token index where each sampled turn starts
TURN_REWARDS_EXTRA = "turn_rewards"      # per completion: the environment's reward after each turn (None for none)
NUM_TOOL_CALLS_EXTRA = "num_tool_calls"
NUM_TOOL_ERRORS_EXTRA = "num_tool_errors"
TOOL_RESULTS_EXTRA = "tool_results"
FINAL_RESPONSE_EXTRA = "final_response"
TRUNCATED_EXTRA = "truncated"            # cut by the budget (overrides the trainer's own reading)
ENV_REWARD_EXTRA = "env_reward"
ENV_DONE_EXTRA = "env_done"
ENVIRONMENTS_EXTRA = "environments"      # the episodes' environment objects (TRL's environment_factory)
CALL_VERSIONS_EXTRA = "call_weight_versions"  # per completion: each model call's [oldest, newest] weight version
#: extras that are live objects: handed to the reward functions, then dropped (never saved, logged or gathered)
LIVE_EXTRAS = (ENVIRONMENTS_EXTRA,)
TOOL_CALLS_PREFIX, TOOL_ERRORS_PREFIX = "tool_calls/", "tool_errors/"  # + a configured tool's name: its counts

EXTRAS_PREFIX = "extras/"


def extra(name: str) -> str:
    """``extras/<name>``: the step's mean of a numeric rollout extra."""
    return f"{EXTRAS_PREFIX}{name}"


NUM_TURNS = extra(NUM_TURNS_EXTRA)
ENV_DONE = extra(ENV_DONE_EXTRA)           # older environment runs' "episode ended by done" share
CUT_BY_BUDGET = "episodes/cut_by_budget"  # episodes of the step that the token budget ended (count)
EPISODES_FAILED = "episodes/failed"      # episodes that failed outside the model (on_error), every attempt
EPISODES_RETRIED = "episodes/retried"    # of those, played again (rollout.on_error: retry)
EPISODES_DROPPED = "episodes/dropped"    # left out of the step, their groups with them
EPISODES_PROMPTS_DROPPED = "episodes/prompts_dropped"  # groups (prompts) left out of the step: dropped ÷ n
EPISODES_EPOCH_PROMPTS_DROPPED = "episodes/epoch_prompts_dropped"  # prompts the epoch lost so far (0 at its start)
TURNS_CAPPED = "episodes/turns_capped"    # sampled turns of the step cut by max_turn_tokens (count)
ENDED_PREFIX = "episodes/ended/"          # + reason: the step's share of episodes that ended so


def ended(reason: str) -> str:
    """``episodes/ended/<reason>``."""
    return f"{ENDED_PREFIX}{reason}"


TOOL_CALLS = "tools/calls"
TOOL_ERRORS = "tools/errors"
TOOL_SUCCESS_RATE = "tools/success_rate"


def per_tool(name: str, what: str) -> str:
    """``tools/<name>/<what>``: ``calls`` of tool ``name`` in the step, or its ``success_rate``."""
    return f"tools/{name}/{what}"


# -- time (seconds) --------------------------------------------------------------------------------------------------
TIME_GENERATION = "time/generation"
TIME_REWARDS = "time/rewards"
TIME_TRAINING = "time/training"
TIME_SYNC = "time/sync"
TIME_STEP = "time/step"
TIME_SLEEP_WAKE = "time/sleep_wake"  # vllm.sleep_during_training: putting the servers to sleep and waking them
TIME_WAITING_FOR_ROLLOUTS = "time/waiting_for_rollouts"  # streaming: the trainer idle, waiting for finished groups

# -- streaming rollouts (training.max_staleness >= 1), per step -------------------------------------------------------
STALENESS_MEAN = "async/staleness_mean"  # weight versions the trained groups were behind the trainer
STALENESS_MAX = "async/staleness_max"
GROUPS_DROPPED_STALE = "async/groups_dropped_stale"  # more than max_staleness behind: dropped and rolled again
GROUPS_SKIPPED_STALE = "async/groups_skipped_stale"  # dropped as stale on every attempt: left out of the epoch
GROUPS_IN_FLIGHT = "async/groups_in_flight"  # rolling out when the step took its groups
BUFFER_GROUPS = "async/buffer_groups"  # finished groups left for later steps
ROLLOUTS_IDLE_SHARE = "async/rollouts_idle_share"  # share of the step with no group rolling out: servers idle
TRAINER_BUSY_SHARE = "async/trainer_busy_share"  # share of the step the trainer computed (not waiting for rollouts)

# -- dynamic sampling ------------------------------------------------------------------------------------------------
DS_ROUNDS = "dynamic_sampling/rounds"
DS_GROUPS_DROPPED = "dynamic_sampling/groups_dropped"
DS_GROUPS_TRAINED = "dynamic_sampling/groups_trained"
DS_FILLED = "dynamic_sampling/filled"

# -- the pass-rate curriculum (data.curriculum: pass_rate), per step --------------------------------------------------
CURRICULUM_ALL_SOLVED = "curriculum/groups_all_solved"    # groups rolled out whose completions were all solved
CURRICULUM_NONE_SOLVED = "curriculum/groups_none_solved"  # ... none solved
CURRICULUM_MIXED = "curriculum/groups_mixed"              # ... some solved: the groups with something to learn
CURRICULUM_SKIPPED = "curriculum/skipped"                 # turns in the prompt order that paused prompts sat out
CURRICULUM_PAUSED = "curriculum/paused"                   # prompts paused when the step's prompts were drawn

# -- held-out evaluation (evaluation.*): every metric of a step's evaluation is eval/ + a name above or below ----------
EVAL_PREFIX = "eval/"                  # eval/reward, eval/rewards/<name>/mean, eval/completions/mean_length, ...
EVAL_DIR = "eval"                      # eval/step_<k>.jsonl: one line per held-out prompt (step 0: before training)
EVAL_PROMPTS = "eval/prompts"          # held-out prompts evaluated


def eval_metric(name: str) -> str:
    """``eval/<name>``: a training metric's name (``reward``, ``completions/mean_length``) for the evaluation."""
    return EVAL_PREFIX + name


def pass_at(k: int) -> str:
    """``eval/pass@<k>``: the chance that one of ``k`` completions of a held-out prompt succeeds (Chen et al. 2021)."""
    return f"{EVAL_PREFIX}pass@{k}"


def pass_at_stderr(k: int) -> str:
    """``eval/stderr/pass@<k>``: the standard error of :func:`pass_at` over the held-out prompts (their pass@k's
    sample std / √prompts; ``nan`` for one prompt)."""
    return f"{EVAL_PREFIX}stderr/pass@{k}"


def mean_at(n: int) -> str:
    """``eval/mean@<n>``: the share of the ``n`` completions of a held-out prompt that succeed, over prompts."""
    return f"{EVAL_PREFIX}mean@{n}"

# -- memory (GiB) ------------------------------------------------------------------------------------------------------
MEMORY_RSS = "memory/rss_gib"              # the trainer process's resident set after the step
MEMORY_PEAK_RSS = "memory/peak_rss_gib"    # its peak resident set so far (the OS's high-water mark)
MEMORY_CUDA_PEAK = "memory/cuda_peak_gib"  # on CUDA: the step's peak of allocated tensor memory
