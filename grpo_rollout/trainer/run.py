"""Running GRPO from a config: :func:`train` checks it, sets the run's length, then drives a
:class:`~.recipe.GRPORecipe` step by step with metrics, progress, checkpoints, and a save when it stops early."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from ..config import Config, ConfigError, config_dict
from ..config.batch_checks import steps_for_epochs
from ..preflight import validate
from ..data import load_section
from ..generation.vllm_client import ServerError
from ..rewards.calling import RewardError
from ..rollouts.contract import RolloutError
from ..runs.names import REWARD, STEP
from .checkpoint import checkpoint_step, find_checkpoint, list_checkpoints
from .evaluation.held_out import eval_summary
from ..distributed import Dist, RankError
from .guards import NonFiniteError, StaleWeightsError
from ..runs.metrics_writer import MetricsLogger
from .reporting.progress import RichReporter, pick_samples
from .recipe import GRPORecipe
from .reporting.resume_hint import resume_hint
from .reporting.summary import summary_panel, summary_text


@dataclass
class TrainResult:
    """What a finished run leaves behind (docs/python_api.md describes every field).

    Attributes:
        output_dir: the run folder. checkpoint: the final checkpoint folder (model + tokenizer + trainer state;
        ``None`` when no step was trained). steps: the step counter at the end (a resumed run counts the steps before
        it too). history: one metrics dict per step trained by this call, in order, each with ``step`` (1-based, the
        ``step`` of its ``metrics.jsonl`` line; a resumed run's rows start after the checkpoint's step) and the
        step's metrics (names: :mod:`grpo_rollout.runs.names`). evaluations: ``(completed steps, eval/ metrics)`` of
        each held-out evaluation of this call (``evaluation:``), in order; 0 = before step 1.
    """

    output_dir: Path
    checkpoint: Optional[Path]
    steps: int
    history: List[Dict[str, Any]] = field(default_factory=list, repr=False)
    evaluations: List[Tuple[int, Dict[str, float]]] = field(default_factory=list, repr=False)

    @property
    def summary(self) -> str:
        """The final panel :func:`train` printed, as plain text: steps, the reward of the first and last steps,
        held-out pass@1, time per step by phase, where the model and metrics are."""
        return summary_text(self)

    def mean_reward(self, first: bool, k: int = 5) -> float:
        """Mean of ``reward`` over the first (or last) ``k`` steps of ``history``."""
        rows = self.history[:k] if first else self.history[-k:]
        vals = [r[REWARD] for r in rows if r.get(REWARD) is not None]
        return sum(vals) / len(vals) if vals else float("nan")



def train(config: Config, base_dir: Optional[Path] = None, resume: Optional[str] = None,
          reporter: Optional[RichReporter] = None, check: bool = True) -> TrainResult:
    """Run GRPO as ``config`` says.

    Args:
        config: a loaded config (:func:`grpo_rollout.load_config`).
        base_dir: folder that relative paths in the config are also resolved against (the config file's folder).
        resume: ``None``, ``"latest"`` or a checkpoint folder: continue from its step, optimizer, scheduler and RNG.
        reporter: console output (default: a :class:`RichReporter` on stdout).
        check: run :func:`grpo_rollout.preflight.validate` first (callers that just did may skip it).

    Returns:
        a :class:`TrainResult`; its summary (``result.summary``) was printed as the final panel.

    Raises:
        ConfigError: the config has errors (all of them are listed). RolloutError / RewardError: a user function
        broke its contract; completed steps are checkpointed first (also for StaleWeightsError, NonFiniteError,
        ServerError — the vLLM server died or refused — and Ctrl-C). FileNotFoundError: ``resume`` names no checkpoint.
        ValueError: ``resume`` names a checkpoint of the other kind (LoRA adapter vs full model, see ``model.lora``).
    """
    base_dir = Path(base_dir or Path.cwd())
    t = config.training
    dist = Dist.from_env(t.device)
    finished = False
    try:
        # rank 0 alone prints and writes; the others keep quiet
        reporter = (reporter or RichReporter()) if dist.is_main else RichReporter(quiet=True)
        result = _train(config, base_dir, resume, reporter, check, dist)
        reporter.summary(summary_panel(result))
        finished = True
        return result
    finally:
        dist.close(wait_for_all=finished)


def _checked_config(config: Config, base_dir: Path, check: bool) -> Config:
    """``config`` once :func:`validate` found no error in it (when ``check``); with ``training.num_epochs`` set, a copy
    whose ``training.max_steps`` is the run's length in steps from the dataset's size. Raises ConfigError."""
    if check:
        problems = validate(config, base_dir)
        if any(p.is_error for p in problems):
            raise ConfigError(problems)
    if config.training.num_epochs is not None:  # the run's length in steps, from the dataset's size
        config = copy.deepcopy(config)
        rows = len(load_section(config.data, base_dir))
        config.training.max_steps = steps_for_epochs(config.training.num_epochs, rows,
                                                     config.training.prompts_per_step)
    return config


def _resumed_at_the_end(config: Config, resume: Optional[str], reporter: RichReporter) -> Optional[TrainResult]:
    """When ``resume`` names a checkpoint already at ``training.max_steps``: say so and return its result (nothing is
    loaded or saved); else ``None``. Raises FileNotFoundError when ``resume`` names no checkpoint."""
    t = config.training
    if not resume:
        return None
    ckpt = find_checkpoint(Path(t.output_dir).expanduser(), resume)
    reached = checkpoint_step(ckpt)
    if reached < t.max_steps:
        return None
    reporter.message(f"{ckpt} is already at step {reached} and training.max_steps is {t.max_steps}: nothing "
                     f"to train. To continue, raise it (e.g. training.max_steps={reached + t.max_steps})")
    return TrainResult(Path(t.output_dir).expanduser(), ckpt, reached)


def earlier_run_note(output_dir: Path) -> Optional[str]:
    """What a fresh run (no ``--resume``) should know when ``output_dir`` holds checkpoints of an earlier run, or
    ``None``: it trains from step 0 beside them, replacing files as it writes them, and ``--resume latest`` would then
    pick the newest checkpoint, which may be the earlier run's."""
    found = list_checkpoints(output_dir)
    if not found:
        return None
    return (f"{output_dir} already holds an earlier run (its {found[-1].name}): this run starts at step 0 beside "
            f"it, and --resume latest would pick the newest checkpoint of either. To keep runs apart, set another "
            f"training.output_dir or delete the folder first; to continue the earlier run, add --resume latest")


def _train(config: Config, base_dir: Path, resume: Optional[str], reporter: RichReporter, check: bool,
           dist: Dist) -> TrainResult:
    config = _checked_config(config, base_dir, check)
    t = config.training
    at_the_end = _resumed_at_the_end(config, resume, reporter)
    if at_the_end is not None:
        return at_the_end
    if not resume and dist.is_main and (earlier := earlier_run_note(Path(t.output_dir).expanduser())):
        reporter.message(earlier)
    run = GRPORecipe(config, base_dir, reporter, dist)
    logger = MetricsLogger(run.output_dir, config.logging.report_to if dist.is_main else [],
                           config.logging.project, config.logging.run_name, config=config_dict(config),
                           write=dist.is_main)
    history: List[Dict[str, Any]] = []
    evaluations: List[Tuple[int, Dict[str, float]]] = []
    done = 0
    last_saved: Optional[Path] = None
    try:
        done = run.setup(resume)
        logger.truncate_after(done)
        if run.evaluator is not None and done == 0 and run.evaluator.due(0, False):
            evaluations.append((0, _evaluate(run, 0, reporter)))
            logger.log(0, evaluations[-1][1])
        reporter.start(t.max_steps, done, steps_per_epoch=len(run.dataset) / t.prompts_per_step)
        for step in range(done, t.max_steps):
            metrics, records = run.train_step(step)
            done = step + 1
            failed = None
            if run.evaluator is not None and run.evaluator.due(done, done == t.max_steps):
                try:
                    evaluations.append((done, _evaluate(run, done, reporter)))
                    metrics = {**metrics, **evaluations[-1][1]}
                except (RolloutError, RewardError) as exc:  # log the step first: its update is in the weights
                    failed = exc
            history.append({STEP: done, **metrics})
            logger.log(done, metrics)
            samples = [r.sample_row() for r in records]
            logger.log_completions(done, samples)
            log_now = done % t.logging_steps == 0 or done == t.max_steps
            reporter.step(done, metrics, log_now, pick_samples(samples, config.sampling.num_generations,
                                                               t.log_completions))
            if failed is not None:
                raise failed
            if t.save_steps and done % t.save_steps == 0 and done < t.max_steps:
                last_saved = run.save_checkpoint(done)
                reporter.message(f"Saved {last_saved}")
        if done > 0:
            last_saved = run.save_checkpoint(done)
    except KeyboardInterrupt:
        if dist.world_size == 1:  # several processes are all interrupted at different points: no collective save
            _save_on_stop(run, last_saved, reporter)
        raise
    except (RolloutError, RewardError, StaleWeightsError, NonFiniteError, ServerError, RankError):
        _save_on_stop(run, last_saved, reporter)
        raise
    finally:
        reporter.stop()
        run.cleanup()
        logger.close()
    return TrainResult(run.output_dir, last_saved, done, history, evaluations)


def _evaluate(run: GRPORecipe, done: int, reporter: RichReporter) -> Dict[str, float]:
    """The held-out evaluation after ``done`` steps, said in one line; its ``eval/`` metrics."""
    with reporter.status(f"Held-out evaluation after step {done}" if done else "Held-out evaluation before step 1"):
        metrics = run.evaluate(done).metrics
    reporter.message(f"Held-out evaluation {'after step ' + str(done) if done else 'before step 1'}: "
                     + eval_summary(metrics))
    return metrics


def _save_on_stop(run: GRPORecipe, last_saved: Optional[Path], reporter: RichReporter) -> None:
    """Keep the steps whose update is in the weights (may be one more than were logged) when a run stops early."""
    applied = run.applied
    if applied > 0 and (last_saved is None or not last_saved.name.endswith(f"-{applied}")):
        reporter.stop()
        saved = run.save_checkpoint(applied)
        reporter.message(f"Stopped after {applied} step(s); saved {saved}")
    if applied > 0 or last_saved is not None:
        reporter.message(resume_hint(reporter, run.output_dir))
