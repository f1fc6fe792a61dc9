"""``grpo-rollout eval``: the held-out evaluation of :mod:`.held_out` on the base model or a checkpoint, outside a
training run. It loads the model as training would (a full checkpoint's weights, or a LoRA checkpoint's adapters on
the base), spawns or attaches to vLLM the same way, and runs the same :class:`~.held_out.Evaluator`, so its numbers
equal the ``at_start`` evaluation of a run on the same model and seed."""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path
from typing import Optional

from ...config import Config, ConfigError, Problem
from ...preflight import validate
from ...distributed import Dist
from .held_out import EvalResult, Evaluator
from ..parallel.policy import whole_weights
from ..parallel.precision import Precision
from ..reporting.progress import RichReporter
from ...orchestrator.stage import RolloutStage
from ..setup import load_policy, open_clients
from ..parallel.weight_sync import WeightSync


def evaluate(config: Config, base_dir: Optional[Path] = None, checkpoint: Optional[str] = None,
             reporter: Optional[RichReporter] = None, check: bool = True) -> EvalResult:
    """Evaluate ``model.name_or_path`` (or ``checkpoint``: a folder, or ``latest`` in ``training.output_dir``) on
    ``data.eval`` as ``evaluation:`` says (``check``: run :func:`grpo_rollout.preflight.validate` first; callers
    that just did may skip it).

    Raises:
        ConfigError: the config has errors, or no ``data.eval``. FileNotFoundError: no such checkpoint.
        ValueError: the checkpoint is of the other kind (LoRA adapter vs full model). RolloutError / RewardError: a
        user function broke its contract.
    """
    base_dir = Path(base_dir or Path.cwd())
    problems = [p for p in validate(config, base_dir) if p.is_error] if check else []
    if not config.data.eval:
        problems.append(Problem("data.eval", "", "no held-out prompts to evaluate on",
                                "set data.eval to a file, hub dataset, function or reasoning_gym:<task>"))
    if problems:
        raise ConfigError(problems)
    dist = Dist.from_env(config.training.device)
    reporter = (reporter or RichReporter()) if dist.is_main else RichReporter(quiet=True)
    stage = RolloutStage(config, base_dir, dist)
    evaluator = Evaluator(config, base_dir, dist, stage)
    if evaluator.size_warning:
        reporter.message(evaluator.size_warning)
    output_dir = Path(config.training.output_dir).expanduser()
    output_dir.mkdir(parents=True, exist_ok=True)  # a spawned server's log goes there
    weights, finished = None, False
    try:
        precision = Precision.from_config(config.model.dtype, dist.device)
        loaded = load_policy(config, dist, precision, output_dir, checkpoint, reporter.message, evaluating=True)
        client, nccl = open_clients(config, loaded, output_dir, dist, reporter.message, reporter.status)
        weights = WeightSync(loaded.policy, client, nccl, dist, precision, reporter.message)
        stage.connect(client, loaded.tokenizer, loaded.eos_ids, loaded.vocab_size)
        if not client.shares_weights:  # as a run's setup does: the servers sample from the trainer's weights
            with reporter.status("Sending the weights to vLLM"):
                weights.send()
        with reporter.status(f"Evaluating on {len(evaluator.dataset)} held-out prompts"):
            with whole_weights(loaded.policy) if client.shares_weights else nullcontext():
                result = evaluator.run()
        finished = True
        return result
    finally:
        if weights is not None:
            weights.close()
        stage.close()
        dist.close(wait_for_all=finished)
