"""Held-out evaluation (``evaluation:``): the run's own rollout and rewards on ``data.eval`` with the current weights,
scored as pass@k of a success reward (Chen et al. 2021, arXiv:2107.03374), each reward's mean and the completions'
lengths, under ``eval/`` names (:mod:`grpo_rollout.runs.names`).

It changes nothing of training: it reads the weights, never the optimizer or the prompt order, and it runs inside a
saved and restored random state (Python's, numpy's and torch's), seeded the same way every time, so evaluation at step 0 of a
run gives the numbers ``grpo-rollout eval`` gives for the same model. With ``N`` training processes each evaluates
every ``N``-th prompt and the records are gathered.
"""

from __future__ import annotations

import json
import math
import random
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

import torch

from ...runs import names as rn
from ...runs.completion import group_columns
from ...config import Config
from ...data import load_section
from ...preflight.evaluation import evaluation_asked, held_out_size_warning
from ...rewards.scores import mean_std
from ...orchestrator.batch import CompletionScores
from ...distributed import Dist
from .pass_at_k import default_ks, pass_at_k, pass_at_k_with_stderr
from ...orchestrator.stage import RolloutStage
from ...orchestrator.stats import episode_metrics, extras_means, tool_metrics


@dataclass
class EvalResult:
    """One evaluation: ``metrics`` (``eval/...`` names), ``records`` (one per held-out prompt, in dataset order:
    its completions, rewards, successes and pass@k) and ``notes`` (a line per completion a reward could not score
    in time)."""

    metrics: Dict[str, float]
    records: List[Dict[str, Any]]
    notes: List[str] = field(default_factory=list)


def evaluation_on(config: Config) -> bool:
    """Whether the config asks for any evaluation (``data.eval`` set, and at least one of at_start, at_end,
    every_steps)."""
    return bool(config.data.eval) and evaluation_asked(config)


def load_eval_dataset(config: Config, base_dir: Path) -> Tuple[Any, Optional[str]]:
    """``data.eval`` (split ``data.eval_split``), its first ``evaluation.max_prompts`` rows; and a warning when they
    are fewer than asked for or too few to tell a change from noise (:func:`held_out_size_warning`), else ``None``.

    Raises:
        DatasetError: it does not load (the message says why).
    """
    ds = load_section(config.data, base_dir, held_out=True)
    limit = config.evaluation.max_prompts
    small = held_out_size_warning(len(ds), limit)
    warning = f"Held-out set: {small[0]} {small[1]}; {small[2]}" if small else None
    return (ds.select(range(min(limit, len(ds)))) if limit else ds), warning


class Evaluator:
    """Evaluates the model the rollout stage samples from on the held-out prompts.

    Attributes:
        dataset: the held-out rows. stage: the run's rollout stage (its rollout, rewards and client).
        size_warning: what to tell the user when the held-out rows are fewer than asked for or than
            :data:`~grpo_rollout.preflight.evaluation.MIN_HELD_OUT_PROMPTS` (``None`` when they are enough).
    """

    def __init__(self, config: Config, base_dir: Path, dist: Dist, stage: RolloutStage):
        self.cfg, self.dist, self.stage = config, dist, stage
        self.dataset, self.size_warning = load_eval_dataset(config, base_dir)

    def due(self, done: int, last: bool) -> bool:
        """Whether to evaluate after ``done`` completed steps (0: before the first; ``last``: after the last)."""
        e = self.cfg.evaluation
        return (done == 0 and e.at_start) or (last and e.at_end) or (done > 0 and e.every_steps > 0
                                                                       and done % e.every_steps == 0)

    def run(self, done: int = 0) -> EvalResult:
        """Evaluate after ``done`` completed steps (the ``step`` a rollout or reward that names it receives; a
        collective: every rank calls it); every rank gets the whole result.

        Raises:
            RolloutError / RewardError: the rollout or a reward broke its contract on a held-out prompt.
        """
        e, dist = self.cfg.evaluation, self.dist
        mine = list(range(dist.rank, len(self.dataset), dist.world_size))
        sampling = replace(self.stage.sampling_settings(done), n=e.num_generations, temperature=e.temperature,
                           seed=self.cfg.training.seed)  # the same seed every time: step 0 equals `grpo-rollout eval`
        batch, error = None, None
        with _own_random_state(self.cfg.training.seed):
            try:
                rows = [self.dataset[i] for i in mine]
                batch = self.stage.generate_and_score(done, rows, sampling, shaping=False).scores if rows else None
            except Exception as exc:  # noqa: BLE001 - every rank must learn of it before the next collective
                error = exc
        dist.agree(error)
        parts = [(idx, b) for idx, b in zip(dist.gather(mine), dist.gather(batch)) if b is not None]
        whole = CompletionScores.merge([b for _, b in parts])
        order = [i for idx, _ in parts for i in idx]
        return eval_result(whole, order, e.num_generations, e.success_reward, e.success_threshold, e.pass_k)


@contextmanager
def _own_random_state(seed: int) -> Iterator[None]:
    """Run the block seeded with ``seed`` and put every global random state back afterwards: Python's, numpy's
    (a user's reward may draw from ``np.random``) and torch's (CPU and every CUDA device)."""
    import numpy as np

    saved, saved_np = random.getstate(), np.random.get_state()
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=devices):
        random.seed(seed)
        np.random.seed(seed % 2 ** 32)
        torch.manual_seed(seed)
        try:
            yield
        finally:
            random.setstate(saved)
            np.random.set_state(saved_np)


def eval_result(whole: CompletionScores, order: List[int], n: int, success_reward: Any, threshold: float,
                extra_ks: List[int]) -> EvalResult:
    """The metrics and per-prompt records of ``whole`` (``len(order)`` prompts × ``n`` completions, prompt ``j`` of
    it being held-out row ``order[j]``); success: ``success_reward``'s value (``None``: the total) >= ``threshold``."""
    values = whole.per_function[success_reward] if success_reward else whole.rewards
    success = [v is not None and v >= threshold for v in values]
    groups = [success[j * n:(j + 1) * n] for j in range(len(order))]
    ks = default_ks(n, extra_ks)
    metrics: Dict[str, float] = {rn.EVAL_PROMPTS: len(order)}
    if order:
        lengths = whole.lengths
        for k in ks:
            metrics[rn.pass_at(k)], metrics[rn.pass_at_stderr(k)] = pass_at_k_with_stderr(groups, k)
        metrics[rn.mean_at(n)] = sum(success) / len(success)
        stats = {rn.REWARD: mean_std(whole.rewards)[0], **whole.stats(),
                 rn.MEAN_LENGTH: sum(lengths) / len(lengths),
                 rn.TRUNCATED_FRACTION: sum(whole.truncated) / len(lengths), **extras_means(whole.extras),
                 **tool_metrics(whole.extras), **episode_metrics(whole.extras)}
        metrics.update({rn.eval_metric(k): v for k, v in stats.items()})
    records = []
    completions = whole.records()
    for j, index in enumerate(order):
        records.append({"index": index, **group_columns(completions[j * n:(j + 1) * n]),
                        "success": groups[j], **{f"pass@{k}": pass_at_k(n, sum(groups[j]), k) for k in ks}})
    return EvalResult(metrics, sorted(records, key=lambda r: r["index"]), whole.timeout_notes(n))


def eval_summary(metrics: Dict[str, float]) -> str:
    """One line of an evaluation's metrics: prompts, pass@k's (± one standard error over prompts), mean reward."""
    ks = sorted(int(k.split("@")[1]) for k in metrics if k.startswith(rn.EVAL_PREFIX + "pass@"))
    parts = [f"{metrics.get(rn.EVAL_PROMPTS, 0):.0f} prompts"] + [f"pass@{k} {metrics[rn.pass_at(k)]:.3f}"
                                                                   + plus_minus(metrics.get(rn.pass_at_stderr(k)))
                                                                   for k in ks]
    if rn.eval_metric(rn.REWARD) in metrics:
        parts.append(f"reward {metrics[rn.eval_metric(rn.REWARD)]:.3f}")
    return ", ".join(parts)


def plus_minus(stderr: Any) -> str:
    """`` ± 0.041`` (one standard error) for a finite ``stderr``, else an empty string."""
    return f" ± {stderr:.3f}" if isinstance(stderr, float) and math.isfinite(stderr) else ""


def write_eval_records(output_dir: Path, done: int, result: EvalResult) -> Path:
    """``eval/step_<done>.jsonl`` (``done``: completed steps, 0 before training), one line per held-out prompt."""
    path = output_dir / rn.EVAL_DIR / rn.rollout_file(done)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, default=str) + "\n" for r in result.records))
    return path
