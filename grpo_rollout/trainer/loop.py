"""The GRPO step loop: prompts → rollout → rewards → advantages → loss → optimizer → weight sync → metrics/checkpoint.

One step (Shao et al. 2024, DeepSeekMath, Algorithm 1, with one policy update per batch by default):

1. take ``prompts_per_step`` prompts (:class:`~.sampler.PromptSampler`),
2. call the rollout once with all of them (``n = num_generations`` completions each),
3. score every completion (:func:`~grpo_rollout.rewards.calling.compute_rewards`) and turn the scores into
   group-relative advantages (:func:`~.advantages.group_advantages`),
4. ``num_iterations`` times: micro-batches of ``micro_batch_size`` sequences → policy log-probs at completion positions
   → clipped surrogate (+ KL) (:mod:`.losses`) → backward; then clip the gradient norm, AdamW step, LR schedule step,
5. sync the new weights to the generation backend, log metrics, maybe checkpoint.
"""

from __future__ import annotations

import copy
import math
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import torch

from ..config import Config, ConfigError, resolve_callable, to_yaml, validate
from ..data import load_train_dataset
from ..generation.backend import open_backend
from ..generation.vllm_client import ServerError
from ..models.loading import load_model_and_tokenizer
from ..rewards.calling import RewardError, RewardFunction, compute_rewards, unique_names
from ..rollouts import builtin_rollout
from ..rollouts.calling import call_rollout
from ..rollouts.contract import RolloutError, RolloutOutput
from .advantages import group_advantages, zero_std_fraction
from .importance import importance_weights
from .checkpoint import checkpoint_step, find_checkpoint, load_trainer_state, restore_rng, save_checkpoint
from .logprobs import completion_logprobs, pack
from .losses import BatchTotals, aggregate, per_token_loss
from .metrics import MetricsLogger
from .progress import RichReporter
from .prompt_order import PromptSampler
from .rollout_stats import extras_means, tool_metrics, truncated_flags


class StaleWeightsError(RuntimeError):
    """The generation server's log-probs say it is not on the trainer's weights."""


class NonFiniteError(RuntimeError):
    """The loss or gradient was NaN/inf in ``training.max_nonfinite_steps`` steps in a row."""


@dataclass
class TrainResult:
    """What a finished run leaves behind.

    Attributes:
        output_dir: the run folder. checkpoint: the final checkpoint folder (model + tokenizer + trainer state).
        history: one metrics dict per step run in this process (resumed runs: only the new steps).
        steps: the step counter at the end.
    """

    output_dir: Path
    checkpoint: Optional[Path]
    steps: int
    history: List[Dict[str, Any]] = field(default_factory=list)

    def mean_reward(self, first: bool, k: int = 5) -> float:
        """Mean of ``reward`` over the first (or last) ``k`` steps of ``history``."""
        rows = self.history[:k] if first else self.history[-k:]
        vals = [r["reward"] for r in rows if r.get("reward") is not None]
        return sum(vals) / len(vals) if vals else float("nan")


class _Run:
    """State of one training run (built by :func:`train`)."""

    def __init__(self, config: Config, base_dir: Path, reporter: RichReporter):
        self.cfg, self.base_dir, self.reporter = config, base_dir, reporter
        t, s = config.training, config.sampling
        random.seed(t.seed)
        torch.manual_seed(t.seed)
        self.dataset = load_train_dataset(config.data.train, config.data.split, base_dir)
        self.rollout_fn = resolve_callable(config.rollout.function, base_dir) if config.rollout.function \
            else builtin_rollout()
        fns = [resolve_callable(r.function, base_dir) for r in config.rewards]
        self.rewards = [RewardFunction(name, fn, r.weight, dict(r.kwargs))
                        for name, fn, r in zip(unique_names(fns), fns, config.rewards)]
        self.sampler = PromptSampler(len(self.dataset), t.prompts_per_step, t.seed, config.data.shuffle)
        self.output_dir = Path(t.output_dir).expanduser()
        self.output_dir.mkdir(parents=True, exist_ok=True)
        (self.output_dir / "config.yaml").write_text(to_yaml(config))
        self.model = self.tokenizer = self.ref_model = self.client = None
        self.applied = 0  # steps whose optimizer updates are in the weights
        self.nonfinite_streak = 0  # steps in a row whose update was skipped for a NaN/inf loss or gradient
        self.num_generations = s.num_generations
        # the trainer scores tokens under the same filtering the sampler used, so the two log-probs compare
        self.sampling_filter = {"top_k": s.top_k, "top_p": s.top_p, "min_p": s.min_p}
        # a repetition penalty changes the sampler's distribution per context in a way the trainer does not
        # reproduce: its log-probs are then logged but neither corrected for nor checked
        self.sampler_comparable = s.repetition_penalty == 1.0

    # -- set-up --------------------------------------------------------------------------------------------------
    def load(self, resume: Optional[str]) -> int:
        """Load models, optimizer, scheduler, generation client; return the step to start from."""
        from transformers import get_scheduler

        m, t = self.cfg.model, self.cfg.training
        say = self.reporter.message
        say(f"Loading {m.name_or_path}")
        self.model, self.tokenizer, self.model_path = load_model_and_tokenizer(
            m.name_or_path, m.dtype, m.revision, m.trust_remote_code, progress=say)
        if t.beta > 0:
            self.ref_model = copy.deepcopy(self.model).eval().requires_grad_(False)
        state = None
        if resume:
            ckpt = find_checkpoint(self.output_dir, resume)
            say(f"Resuming from {ckpt}")
            self.model, _, _ = load_model_and_tokenizer(str(ckpt), m.dtype, trust_remote_code=m.trust_remote_code)
            state = load_trainer_state(ckpt)
        if t.gradient_checkpointing:
            self.model.gradient_checkpointing_enable()
        self.model.train()
        self.optimizer = torch.optim.AdamW([p for p in self.model.parameters() if p.requires_grad],
                                           lr=t.learning_rate, weight_decay=t.weight_decay)
        self.scheduler = get_scheduler(t.lr_scheduler, self.optimizer, num_warmup_steps=t.warmup_steps * t.num_iterations,
                                       num_training_steps=t.max_steps * t.num_iterations)
        if state is not None:
            if state["optimizer"] is not None:
                self.optimizer.load_state_dict(state["optimizer"])
            else:
                say("The checkpoint has no optimizer state (training.save_only_model): AdamW's moments restart")
            self.scheduler.load_state_dict(state["scheduler"])
            restore_rng(state)
        eos = self.model.generation_config.eos_token_id if self.model.generation_config else None
        eos = eos if eos is not None else self.tokenizer.eos_token_id
        self.eos_ids = set(eos if isinstance(eos, (list, tuple)) else [eos])
        self.vocab_size = self.model.get_input_embeddings().num_embeddings
        self.client = open_backend(self.cfg, self.model, self.tokenizer, self.model_path, self.output_dir,
                                   say=say, status=self.reporter.status)
        return state["step"] if state is not None else 0

    # -- one step ------------------------------------------------------------------------------------------------
    def sampling_kwargs(self, step: int) -> Dict[str, Any]:
        """The sampling settings handed to the rollout (``seed`` advances with the step when set)."""
        s = self.cfg.sampling
        return {"n": s.num_generations, "temperature": s.temperature, "top_p": s.top_p, "top_k": s.top_k,
                "min_p": s.min_p, "repetition_penalty": s.repetition_penalty,
                "max_completion_length": s.max_completion_length,
                "seed": None if s.seed is None else s.seed + step}

    def step(self, step: int) -> Tuple[Dict[str, Any], List[Dict[str, Any]]]:
        """Run step ``step`` (0-based); return its metrics and one record per completion."""
        cfg, g = self.cfg, self.num_generations
        t0 = time.perf_counter()
        rows = [self.dataset[i] for i in self.sampler.indices(step)]
        prompts = [row[cfg.data.prompt_column] for row in rows]
        out = call_rollout(self.rollout_fn, prompts, self.sampling_kwargs(step), dict(cfg.rollout.kwargs),
                           {"client": self.client, "tokenizer": self.tokenizer, "rows": rows, "step": step,
                            "base_dir": str(self.base_dir)},
                           self.vocab_size)
        t1 = time.perf_counter()
        n = len(out)
        texts = self.tokenizer.batch_decode(out.completion_ids, skip_special_tokens=True)
        per_completion_prompts = [prompts[i // g] for i in range(n)]
        completions = [[{"role": "assistant", "content": text}] if isinstance(p, list) else text
                       for p, text in zip(per_completion_prompts, texts)]
        columns = {c: [rows[i // g][c] for i in range(n)] for c in self.dataset.column_names
                   if c != cfg.data.prompt_column}
        scored = compute_rewards(self.rewards, prompts=per_completion_prompts, completions=completions,
                                 completion_ids=out.completion_ids, columns=columns, extras=out.extras, step=step)
        rewards = torch.tensor(scored.total, dtype=torch.float32)
        advantages = group_advantages(rewards, g, cfg.training.scale_rewards)
        t2 = time.perf_counter()
        truncated = truncated_flags(out.completion_ids, out.extras, self.eos_ids)
        train_stats = self.update(out, advantages, truncated)
        self.applied = step + 1  # the weights now include this step, whatever happens next
        self.guard_nonfinite(step, train_stats["nonfinite_skipped"])
        t3 = time.perf_counter()
        self.client.update_weights(self.model)
        t4 = time.perf_counter()
        lengths = [len(c) for c in out.completion_ids]
        metrics: Dict[str, Any] = {
            "reward": rewards.mean().item(),
            "reward_std": rewards.std().item() if n > 1 else 0.0,
            **scored.stats(),
            "frac_reward_zero_std": zero_std_fraction(rewards, g),
            **train_stats,
            **extras_means(out.extras),
            **tool_metrics(out.extras),
            "completions/mean_length": sum(lengths) / n,
            "completions/max_length": max(lengths),
            "completions/min_length": min(lengths),
            "completions/truncated_fraction": sum(truncated) / n,
            "learning_rate": self.scheduler.get_last_lr()[0],
            "time/generation": t1 - t0, "time/rewards": t2 - t1, "time/training": t3 - t2, "time/sync": t4 - t3,
            "time/step": t4 - t0,
        }
        samples = [{"prompt": per_completion_prompts[i], "completion": texts[i], "reward": scored.total[i],
                    **{f"rewards/{k}": v[i] for k, v in scored.per_function.items()},
                    "advantage": advantages[i].item(), "truncated": truncated[i]} for i in range(n)]
        return metrics, samples

    def update(self, out: RolloutOutput, advantages: torch.Tensor, truncated: List[bool]) -> Dict[str, float]:
        """``num_iterations`` optimizer updates on one rollout batch; returns loss/KL/clip/grad statistics."""
        t, s = self.cfg.training, self.cfg.sampling
        n, mbs = len(out), t.micro_batch_size
        masks = [[0] * len(m) if (t.mask_truncated_completions and tr) else m
                 for m, tr in zip(out.completion_mask, truncated)]
        batches = []
        for start in range(0, n, mbs):
            idx = list(range(start, min(start + mbs, n)))
            packed = pack([out.prompt_ids[i] for i in idx], [out.completion_ids[i] for i in idx],
                          self.tokenizer.pad_token_id)
            mask = torch.zeros_like(packed.completion_valid, dtype=torch.float32)
            sampler_lp = torch.zeros_like(mask) if out.logprobs is not None else None
            for row, i in enumerate(idx):
                mask[row, : len(masks[i])] = torch.tensor(masks[i], dtype=torch.float32)
                if sampler_lp is not None:
                    sampler_lp[row, : len(out.logprobs[i])] = torch.tensor(out.logprobs[i])
            batches.append({"packed": packed, "mask": mask, "adv": advantages[idx], "sampler": sampler_lp})
        totals = BatchTotals(n, int(sum(b["mask"].sum().item() for b in batches)), len(batches),
                             s.max_completion_length)
        with torch.no_grad():
            for b in batches:
                if t.num_iterations > 1:
                    b["old"] = completion_logprobs(self.model, b["packed"], s.temperature, t.logprob_chunk_size,
                                                   **self.sampling_filter)
                if self.ref_model is not None:
                    b["ref"] = completion_logprobs(self.ref_model, b["packed"], s.temperature, t.logprob_chunk_size,
                                                   **self.sampling_filter)
        sums = {"kl": 0.0, "clip_low": 0.0, "clip_high": 0.0, "ratio_max": 0.0, "lp_diff": 0.0}
        trained_tokens = max(totals.num_tokens, 1)
        params = [p for p in self.model.parameters() if p.requires_grad]
        skipped = 0
        for iteration in range(t.num_iterations):
            loss_total = 0.0
            for b in batches:
                logps = completion_logprobs(self.model, b["packed"], s.temperature, t.logprob_chunk_size,
                                            **self.sampling_filter)
                old = b.get("old", logps.detach())
                if b["sampler"] is not None and "is_weights" not in b:
                    mode = t.sampler_correction if self.sampler_comparable else "none"
                    b["is_weights"] = importance_weights(old, b["sampler"], b["mask"], mode, t.sampler_correction_cap)
                res = per_token_loss(logps, old, b["adv"], epsilon=t.epsilon, epsilon_high=t.epsilon_high,
                                     beta=t.beta, ref_logps=b.get("ref"), token_weights=b.get("is_weights"))
                loss = aggregate(res["loss"], b["mask"], t.loss_type, totals)
                loss.backward()
                loss_total += loss.item()
                # statistics over trained tokens only (indexing, not a product: placeholders may be -inf), on every
                # iteration: the ratio moves away from 1 only after the first update (num_iterations > 1)
                m = b["mask"].bool()
                ratio = res["ratio"].detach()[m]
                sums["kl"] += res["kl"].detach()[m].sum().item()
                sums["clip_low"] += res["clipped_low"][m].sum().item()
                sums["clip_high"] += res["clipped_high"][m].sum().item()
                sums["ratio_max"] = max(sums["ratio_max"], ratio.max().item() if ratio.numel() else 0.0)
                if iteration == 0 and b["sampler"] is not None:
                    sums["lp_diff"] += (old - b["sampler"])[m].abs().sum().item()
                    w = b["is_weights"][m]
                    if w.numel():
                        sums["is_min"] = min(sums.get("is_min", math.inf), w.min().item())
                        sums["is_max"] = max(sums.get("is_max", 0.0), w.max().item())
                        sums["is_sum"] = sums.get("is_sum", 0.0) + w.sum().item()
            if iteration == 0 and out.logprobs is not None and self.sampler_comparable \
                    and math.isfinite(sums["lp_diff"]):  # non-finite: the trainer's own log-probs; skipped below
                self.check_sampler_mismatch(sums["lp_diff"] / trained_tokens)
            max_norm = t.max_grad_norm if t.max_grad_norm > 0 else math.inf
            grad_norm = torch.nn.utils.clip_grad_norm_(params, max_norm).item()
            if math.isfinite(loss_total) and math.isfinite(grad_norm):
                self.optimizer.step()
                self.scheduler.step()
            else:  # a NaN/inf loss or gradient would poison the weights and the optimizer's moments: skip
                skipped += 1
            self.optimizer.zero_grad(set_to_none=True)
        measured = trained_tokens * t.num_iterations
        stats = {"loss": loss_total, "grad_norm": grad_norm, "kl": sums["kl"] / measured,
                 "clip_ratio/low": sums["clip_low"] / measured, "clip_ratio/high": sums["clip_high"] / measured,
                 "clip_ratio/region": (sums["clip_low"] + sums["clip_high"]) / measured,
                 "ratio/max": sums["ratio_max"], "num_tokens": totals.num_tokens, "nonfinite_skipped": skipped}
        if out.logprobs is not None:
            stats["sampler/logprob_abs_diff"] = sums["lp_diff"] / trained_tokens
            stats["sampler/is_weight_mean"] = sums.get("is_sum", 0.0) / trained_tokens
            stats["sampler/is_weight_min"] = sums.get("is_min", float("nan"))
            stats["sampler/is_weight_max"] = sums.get("is_max", float("nan"))
        return stats

    def guard_nonfinite(self, step: int, skipped: int) -> None:
        """Count steps in a row whose update was skipped for a NaN/inf loss or gradient; warn, and stop at
        ``training.max_nonfinite_steps``.

        Raises:
            NonFiniteError: that many steps in a row were skipped.
        """
        if not skipped:
            self.nonfinite_streak = 0
            return
        self.nonfinite_streak += 1
        limit = self.cfg.training.max_nonfinite_steps
        if self.nonfinite_streak >= limit:
            raise NonFiniteError(
                f"the loss or gradient was NaN/inf in {self.nonfinite_streak} steps in a row (steps "
                f"{step + 2 - self.nonfinite_streak}-{step + 1}; training.max_nonfinite_steps = {limit}); those updates "
                "were skipped, the weights are the last finite ones. Lower training.learning_rate, keep "
                "training.max_grad_norm > 0, or check rewards and sampler log-probs for extreme values")
        self.reporter.message(f"Step {step + 1}: the loss or gradient was NaN/inf; {skipped} update(s) skipped, the "
                              f"weights are unchanged ({self.nonfinite_streak} step(s) in a row; the run stops at {limit})")

    def check_sampler_mismatch(self, mean_abs_diff: float) -> None:
        """Fail fast when the sampler's log-probs are far from the trainer's on the same weights: with vLLM that
        means the server is not sampling from the weights it was sent (a failed or partial weight sync).

        Raises:
            StaleWeightsError: ``mean_abs_diff`` (nats per token) exceeds ``vllm.max_logprob_mismatch``.
        """
        limit = self.cfg.vllm.max_logprob_mismatch
        if self.cfg.vllm.mode != "off" and limit is not None and not mean_abs_diff <= limit:  # NaN fails too
            raise StaleWeightsError(
                f"vLLM's log-probs differ from the trainer's by {mean_abs_diff:.3f} nats per token on average "
                f"(limit vllm.max_logprob_mismatch = {limit}) right after a weight sync: the server is not sampling "
                "from the trainer's current weights. Check the server log (output_dir/vllm.log); if the two "
                "legitimately differ (e.g. bfloat16 sampler), raise the limit or set it to null")

    def save(self, step: int) -> Path:
        """Checkpoint after ``step`` completed steps."""
        t = self.cfg.training
        return save_checkpoint(self.output_dir, step, self.model, self.tokenizer, self.optimizer, self.scheduler,
                               {"data_position": self.sampler.position(step), "config": to_yaml(self.cfg)},
                               save_optimizer=not t.save_only_model, keep=t.save_total_limit)

    def close(self) -> None:
        if self.client is not None:
            self.client.close()


def train(config: Config, base_dir: Optional[Path] = None, resume: Optional[str] = None,
          reporter: Optional[RichReporter] = None, check: bool = True) -> TrainResult:
    """Run GRPO as ``config`` says.

    Args:
        config: a loaded config (:func:`grpo_rollout.load_config`).
        base_dir: folder that relative paths in the config are also resolved against (the config file's folder).
        resume: ``None``, ``"latest"`` or a checkpoint folder: continue from its step, optimizer, scheduler and RNG.
        reporter: console output (default: a :class:`RichReporter` on stdout).
        check: run :func:`grpo_rollout.config.validate` first (callers that just did may skip it).

    Returns:
        a :class:`TrainResult`.

    Raises:
        ConfigError: the config has errors (all of them are listed). RolloutError / RewardError: a user function
        broke its contract; completed steps are checkpointed first (also for StaleWeightsError, NonFiniteError,
        ServerError — the vLLM server died or refused — and Ctrl-C). FileNotFoundError: ``resume`` names no checkpoint.
    """
    base_dir = Path(base_dir or Path.cwd())
    reporter = reporter or RichReporter()
    if check:
        problems = validate(config, base_dir)
        if any(p.is_error for p in problems):
            raise ConfigError(problems)
    t = config.training
    if resume:
        ckpt = find_checkpoint(Path(t.output_dir).expanduser(), resume)
        reached = checkpoint_step(ckpt)
        if reached >= t.max_steps:  # nothing to do: load nothing, save nothing
            reporter.message(f"{ckpt} is already at step {reached} and training.max_steps is {t.max_steps}: nothing "
                             f"to train. To continue, raise it (e.g. training.max_steps={reached + t.max_steps})")
            return TrainResult(Path(t.output_dir).expanduser(), ckpt, reached)
    run = _Run(config, base_dir, reporter)
    logger = MetricsLogger(run.output_dir, config.logging.report_to, config.logging.project, config.logging.run_name)
    history: List[Dict[str, Any]] = []
    done = 0
    last_saved: Optional[Path] = None
    try:
        done = run.applied = run.load(resume)
        logger.truncate_after(done)
        reporter.start(t.max_steps, done)
        for step in range(done, t.max_steps):
            metrics, samples = run.step(step)
            done = step + 1
            history.append(metrics)
            logger.log(done, metrics)
            logger.log_completions(done, samples)
            log_now = done % t.logging_steps == 0 or done == t.max_steps
            sample = samples[0]["completion"][:120].replace("\n", " ") if t.log_completions and samples else None
            reporter.step(done, metrics, log_now, sample)
            if t.save_steps and done % t.save_steps == 0 and done < t.max_steps:
                last_saved = run.save(done)
                reporter.message(f"Saved {last_saved}")
        if done > 0:
            last_saved = run.save(done)
    except (KeyboardInterrupt, RolloutError, RewardError, StaleWeightsError, NonFiniteError, ServerError):
        applied = run.applied  # may be done + 1 when stopped between the update and the end of a step
        if applied > 0 and (last_saved is None or not last_saved.name.endswith(f"-{applied}")):
            reporter.stop()
            saved = run.save(applied)
            reporter.message(f"Stopped after {applied} step(s); saved {saved} (continue with --resume latest)")
        raise
    finally:
        reporter.stop()
        run.close()
        logger.close()
    return TrainResult(run.output_dir, last_saved, done, history)
