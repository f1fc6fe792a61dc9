"""Static checks of the training algorithm's settings: combinations that run, but not as the user likely means.

Every check here appends :class:`~grpo_rollout.config.problems.Problem` objects (warnings: each of these configs is
legal, except ``model.dtype: float16``, an error); :func:`grpo_rollout.preflight.validate` runs them with the
others.
"""

from __future__ import annotations

from typing import List

from .problems import Problem, add_error, add_warning
from .schema import Config, DataConfig, RolloutConfig, TrainingConfig, default_of

GSPO_PAPER = "GSPO (Zheng et al. 2025, arXiv:2507.18071)"


def check_importance_level(config: Config, problems: List[Problem]) -> None:
    """Warnings for ``training.importance_level: sequence`` (GSPO, arXiv:2507.18071): the token-level default clip
    range, ``num_iterations: 1`` (under which every ratio is exactly 1 and the level changes nothing), and a
    token-summed ``loss_type`` (``dapo``, ``bnpo``, ``dr_grpo``), which weights each sequence by its length where GSPO
    averages the loss per sequence, then over the group (``loss_type: grpo``)."""
    t = config.training
    if t.importance_level != "sequence":
        return
    if t.epsilon == default_of(TrainingConfig, "epsilon"):
        add_warning(problems, "training.epsilon", t.epsilon,
                    "is the token-level PPO clip range; the sequence ratio (a geometric mean of token ratios) stays far "
                    "closer to 1, so it would almost never be clipped",
                    "GSPO (arXiv:2507.18071 v2, section 5.1) used training.epsilon: 3.0e-4 and "
                    "training.epsilon_high: 4.0e-4")
    if t.num_iterations == 1:
        add_warning(problems, "training.importance_level", t.importance_level,
                    "changes nothing with training.num_iterations 1: the batch is scored by the policy being updated, "
                    "so every ratio is exactly 1", "set training.num_iterations to 2 or more, or use importance_level: "
                    "token")
    if t.loss_type in ("dapo", "bnpo", "dr_grpo"):
        add_warning(problems, "training.loss_type", t.loss_type,
                    f"sums the loss over tokens, so with importance_level sequence each sequence counts as many times "
                    f"as it has trained tokens (a 20-token completion 10 times a 2-token one); {GSPO_PAPER} averages "
                    "the loss over each sequence's tokens, then over the group",
                    "set training.loss_type: grpo (GSPO's objective, eq. 5), or importance_level: token",
                    depends_on=("training.loss_type", "training.importance_level"))


def check_algorithm(config: Config, problems: List[Problem]) -> None:
    """Warnings for settings that quietly turn part of the algorithm off: ``training.learning_rate: 0`` (a
    diagnostic run: rollouts, rewards, loss and gradients, but no weight changes) and ``sampling.repetition_penalty``
    other than 1 (the sampler correction and the stale-weights check are then off, see
    :attr:`grpo_rollout.trainer.recipe.GRPORecipe.compare_with_sampler`); an error for an ``overlong_buffer`` as
    long as the completions."""
    t, s = config.training, config.sampling
    if t.learning_rate == 0:
        add_warning(problems, "training.learning_rate", t.learning_rate,
                    "is 0: the run generates, scores and computes the loss and gradients, but no weight ever changes "
                    "(fine as a diagnostic)", "set training.learning_rate to e.g. 1e-6 to train",
                    depends_on=("training.learning_rate",))
    if isinstance(s.repetition_penalty, (int, float)) and s.repetition_penalty > 0 and s.repetition_penalty != 1:
        add_warning(problems, "sampling.repetition_penalty", s.repetition_penalty,
                    "is not 1, which turns off the sampler correction (training.sampler_correction acts as none) and "
                    "the stale-weights check (vllm.max_logprob_mismatch): the sampler's log-probs come from the "
                    "penalised distribution, which the trainer does not reproduce, so they are only logged",
                    "set sampling.repetition_penalty: 1.0 to keep both (penalise repetition with a reward instead), "
                    "or accept that a server on stale weights goes unnoticed",
                    depends_on=("sampling.repetition_penalty",))
    for i, r in enumerate(config.rewards):
        if t.credit == "turn" and r.function.endswith(":env_reward") and r.weight != 1:
            add_warning(problems, f"rewards[{i}].weight", r.weight, "scales env_reward but not the environment's turn "
                        "rewards that training.credit: turn compares with it: the last turn takes the difference",
                        "keep env_reward's weight at 1 with credit: turn", depends_on=("training.credit",))
        if t.overlong_buffer and r.function.rsplit(":", 1)[-1] == "overlong_penalty":
            add_error(problems, f"rewards[{i}].function", r.function, "has the name of training.overlong_buffer's "
                      "built-in penalty (logged as rewards/overlong_penalty): the two would be logged, and left out "
                      "of held-out evaluation, as one", "rename your function (e.g. length_penalty), or set "
                      "training.overlong_buffer: 0 and keep yours", depends_on=(f"rewards[{i}].function",))
    if isinstance(t.overlong_buffer, int) and isinstance(s.max_completion_length, int) \
            and t.overlong_buffer >= s.max_completion_length > 0:
        add_error(problems, "training.overlong_buffer", t.overlong_buffer,
                  f"is not below sampling.max_completion_length ({s.max_completion_length}): every completion would "
                  "be in the penalised buffer", f"e.g. {max(1, s.max_completion_length // 4)} (a quarter of it)",
                  depends_on=("training.overlong_buffer", "sampling.max_completion_length"))


def check_precision(config: Config, problems: List[Problem]) -> None:
    """An error for ``model.dtype: float16``: mixed precision in float16 needs loss scaling (a gradient scaler, as
    ``torch.amp.GradScaler``), which this trainer does not have. Its largest value is 65504 and its smallest normal
    6.1e-5, so without scaling small gradients flush to zero and large activations overflow to inf (skipped steps)
    with no word. bfloat16 has float32's range and needs no scaler."""
    if config.model.dtype == "float16":
        add_error(problems, "model.dtype", config.model.dtype,
                  "trains without loss scaling (no gradient scaler): float16 stops at 65504 and its smallest normal "
                  "is 6.1e-5, so gradients below it flush to zero and large activations overflow to inf",
                  "set model.dtype: bfloat16 (float32's range, no scaler needed; CPUs and GPUs from NVIDIA Ampere "
                  "on), or float32 on an older GPU")


def check_unused_settings(config: Config, problems: List[Problem]) -> None:
    """Warnings for keys set away from their default that change nothing under the rest of the config (a CISPO bound
    without ``loss_type: cispo``, a curriculum setting without the curriculum, turn-level credit with a rollout that
    has one turn, ...): the run would train as if they were not there."""
    t, d, r = config.training, config.data, config.rollout
    single_turn = not r.function  # the built-in single-turn rollout: no turn_starts
    # a loss_function replaces the policy term of every loss_type
    cispo, sapo = (f"training.loss_type: {kind}" + (" (and no training.loss_function)" if t.loss_function else "")
                   for kind in ("cispo", "sapo"))
    unused = [  # (section, key, the config that uses it, whether this config does)
        (TrainingConfig, "cispo_epsilon_low", cispo, t.loss_type == "cispo" and not t.loss_function),
        (TrainingConfig, "cispo_epsilon_high", cispo, t.loss_type == "cispo" and not t.loss_function),
        (TrainingConfig, "sapo_tau_positive", sapo, t.loss_type == "sapo" and not t.loss_function),
        (TrainingConfig, "sapo_tau_negative", sapo, t.loss_type == "sapo" and not t.loss_function),
        (TrainingConfig, "turn_discount", "training.credit: turn", t.credit == "turn"),
        (TrainingConfig, "overlong_penalty", "training.overlong_buffer > 0", t.overlong_buffer != 0),
        (RolloutConfig, "max_retries", "rollout.on_error: retry", r.on_error == "retry"),
        (RolloutConfig, "failure_errors", "rollout.on_error: retry or drop", r.on_error != "stop"),
        (DataConfig, "curriculum_patience", "data.curriculum: pass_rate", d.curriculum == "pass_rate"),
        (DataConfig, "curriculum_pause", "data.curriculum: pass_rate", d.curriculum == "pass_rate"),
        (DataConfig, "curriculum_success_reward", "data.curriculum: pass_rate", d.curriculum == "pass_rate"),
    ]
    sections = {TrainingConfig: ("training", t), RolloutConfig: ("rollout", r), DataConfig: ("data", d)}
    for model, key, needs, used in unused:
        name, values = sections[model]
        value = getattr(values, key)
        if not used and value != default_of(model, key):
            add_warning(problems, f"{name}.{key}", value, f"changes nothing without {needs}",
                        f"set {needs}, or leave {name}.{key} out", depends_on=(f"{name}.{key}",))
    if t.num_epochs is not None and t.max_steps != default_of(TrainingConfig, "max_steps"):
        add_warning(problems, "training.max_steps", t.max_steps, f"is replaced by training.num_epochs "
                    f"({t.num_epochs:g}): the run's length is then in passes over the data",
                    "leave training.max_steps out, or training.num_epochs out to train max_steps steps",
                    depends_on=("training.max_steps", "training.num_epochs"))
    if t.credit == "turn" and single_turn:
        add_warning(problems, "training.credit", t.credit, "changes nothing with a rollout that gives no turn starts "
                    f"({r.function or 'the built-in single-turn sampling'}): each completion is one turn, credited "
                    "with its episode's advantage", "use credit: episode, or a multi-turn rollout (an environment, "
                    "tool calling)", depends_on=("training.credit",))
