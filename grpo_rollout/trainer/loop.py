"""The GRPO step loop: prompts → rollout → rewards → advantages → loss → optimizer → weight sync → metrics/checkpoint.

One step (Shao et al. 2024, DeepSeekMath, Algorithm 1, with one policy update per batch by default):

1. take ``prompts_per_step`` prompts (:class:`~.prompt_order.PromptSampler`); with ``N`` training processes each
   takes its own ``prompts_per_step / N`` of them (whole groups),
2. call the rollout once with them (``n = num_generations`` completions each),
3. score every completion (:func:`~grpo_rollout.rewards.calling.compute_rewards`) and turn the scores of the whole
   step into group-relative advantages (:func:`~.advantages.group_advantages`),
4. ``num_iterations`` times: micro-batches of ``micro_batch_size`` sequences → policy log-probs at completion positions
   → clipped surrogate (+ KL) (:mod:`.losses`), normalised by the whole step's totals → backward (FSDP2 averages the
   gradients over processes); then clip the gradient norm, AdamW step, LR schedule step,
5. sync the new weights to the generation servers, log metrics, maybe checkpoint (rank 0 alone writes and prints).

``N`` processes train exactly as one process would on the same batch (:mod:`.distributed`, :mod:`.policy`).
"""

from __future__ import annotations

import copy
import math
import random
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

from ..config import Config, ConfigError, config_dict, resolve_callable, to_yaml, validate
from ..data import load_train_dataset
from ..generation.backend import attach_urls, connect, open_backend, prompt_limit
from ..generation.versions import confirm_version, record_versions
from ..generation.vllm_client import ServerError
from ..models.loading import eos_token_ids, load_model_and_tokenizer
from ..models.lora import (MERGED_DIR, apply_lora, is_adapter_checkpoint, is_peft_model, load_adapter,
                           parameter_counts, save_merged_model)
from ..rewards.calling import RewardError, RewardFunction, RewardResult, compute_rewards, unique_names
from ..rollouts import builtin_rollout
from ..rollouts.calling import call_rollout
from ..rollouts.contract import RolloutError, RolloutOutput
from .advantages import group_advantages, zero_std_fraction
from .checkpoint import (checkpoint_step, find_checkpoint, load_trainer_state, restore_rng, rng_state,
                         save_checkpoint)
from .distributed import Dist, RankError
from .dynamic_sampling import refill_indices
from .importance import importance_weights
from .logprobs import CompletionLogprobs, completion_logprobs, packing_isolates
from .losses import BatchTotals, aggregate, per_token_loss
from .metrics import MetricsLogger
from .policy import (decoder_layers, full_state_dict, initialise_sharding, load_optimizer_state, optimizer_state,
                     shard, whole_weights)
from .progress import RichReporter, pick_samples
from .precision import MASTER_DTYPE, Precision
from .prompt_order import PromptSampler
from .resume_hint import resume_hint
from .rollout_stats import episode_metrics, extras_means, shown_prompts, tool_metrics, truncated_flags
from .rollout_log import save_now, token_record, write_rollouts
from .update import MicroBatch, UpdateStats, build_micro_batches
from .weight_versions import progress_lines, version_lag_problem


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


@dataclass
class StepShard:
    """What one rank's share of a step produced, per completion (gathered on every rank for metrics and logs).

    Attributes:
        prompts: the dataset prompt of each completion. texts: the decoded completions. rewards: weighted sums.
        per_function: reward name → scores (``nan`` for ``None``). lengths: completion tokens. truncated: cut by the
        budget. extras: the rollout's extras (name → one value per completion).
    """

    prompts: List[Any]
    texts: List[str]
    rewards: List[float]
    per_function: Dict[str, List[float]]
    lengths: List[int]
    truncated: List[bool]
    extras: Dict[str, List[Any]]

    def select(self, rows: Sequence[int]) -> "StepShard":
        """The given completions, in that order."""
        rows = list(rows)
        return StepShard([self.prompts[i] for i in rows], [self.texts[i] for i in rows],
                         [self.rewards[i] for i in rows], {k: [v[i] for i in rows] for k, v in self.per_function.items()},
                         [self.lengths[i] for i in rows], [self.truncated[i] for i in rows],
                         {k: [v[i] for i in rows] for k, v in self.extras.items()})

    @staticmethod
    def merge(shards: List["StepShard"]) -> "StepShard":
        """The whole step, in rank order (an extra missing on some rank is ``None`` for its completions)."""
        def cat(name: str) -> List[Any]:
            return [x for sh in shards for x in getattr(sh, name)]

        def by_key(name: str) -> Dict[str, List[Any]]:
            keys = list(dict.fromkeys(k for sh in shards for k in getattr(sh, name)))
            return {k: [x for sh in shards for x in getattr(sh, name).get(k, [None] * len(sh.rewards))] for k in keys}

        return StepShard(cat("prompts"), cat("texts"), cat("rewards"), by_key("per_function"), cat("lengths"),
                         cat("truncated"), by_key("extras"))


class _Run:
    """State of one training run (built by :func:`train`): set-up, one step, the update, weight sync, saving."""

    def __init__(self, config: Config, base_dir: Path, reporter: RichReporter, dist: Dist):
        self.cfg, self.base_dir, self.reporter, self.dist = config, base_dir, reporter, dist
        t, s = config.training, config.sampling
        random.seed(t.seed)
        torch.manual_seed(t.seed)
        self.dataset = load_train_dataset(config.data.train, config.data.split, base_dir)
        self.rollout_fn = resolve_callable(config.rollout.function, base_dir) if config.rollout.function \
            else builtin_rollout()
        fns = [resolve_callable(r.function, base_dir) for r in config.rewards]
        self.rewards = [RewardFunction(name, fn, r.weight, dict(r.kwargs))
                        for name, fn, r in zip(unique_names(fns), fns, config.rewards)]
        self.prompt_order = PromptSampler(len(self.dataset), t.prompts_per_step, t.seed, config.data.shuffle)
        self.output_dir = Path(t.output_dir).expanduser()
        if dist.is_main:
            self.output_dir.mkdir(parents=True, exist_ok=True)
            (self.output_dir / "config.yaml").write_text(to_yaml(config))
        self.policy: Optional[CompletionLogprobs] = None
        self.ref: Optional[CompletionLogprobs] = None
        self.tokenizer = self.client = self.nccl = self.background = None
        self.pending: Dict[int, Any] = {}  # async_generation: the next step's rollout, running in the background
        self._first_round: Optional[Tuple[RolloutOutput, StepShard]] = None  # dynamic sampling's fallback
        self.applied = 0  # steps whose optimizer updates are in the weights
        self.nonfinite_streak = 0  # steps in a row whose update was skipped for a NaN/inf loss or gradient
        self.num_generations = s.num_generations
        self.precision = Precision.from_config(config.model.dtype, dist.device)  # float32 master weights
        # the trainer scores tokens under the same filtering the sampler used, so the two log-probs compare
        self.sampling_filter = {"top_k": s.top_k, "top_p": s.top_p, "min_p": s.min_p}
        # a repetition penalty changes the sampler's distribution per context in a way the trainer does not
        # reproduce: its log-probs are then logged but neither corrected for nor checked
        self.compare_with_sampler = s.repetition_penalty == 1.0
        self.weight_version = 0  # weight syncs the servers confirmed (every rank counts them)
        self.sampler_lag = 0  # versions the current batch's sampler was behind the trainer (async: 1 by design)

    # -- set-up --------------------------------------------------------------------------------------------------
    def load(self, resume: Optional[str]) -> int:
        """Load the policy (sharded over the processes; with ``model.lora.r > 0`` wrapped with LoRA adapters, of
        which only the adapters train), reference model, optimizer, scheduler and generation client, restore a
        checkpoint, send the weights to the servers; return the step to start from.

        Raises:
            ValueError: ``resume`` names a LoRA checkpoint while LoRA is off, or a full-model one while it is on.
        """
        from transformers import get_scheduler

        m, t, dist = self.cfg.model, self.cfg.training, self.dist
        say = self.reporter.message
        say(f"Loading {m.name_or_path}" + (f" on {dist.world_size} processes" if dist.world_size > 1 else ""))
        lora = m.lora.r > 0
        lm, self.tokenizer, self.model_path = load_model_and_tokenizer(
            m.name_or_path, self.precision.load_dtype(lora), m.revision, m.trust_remote_code, progress=say)
        mp_policy = self.precision.fsdp_policy()
        if t.beta > 0 and not lora:  # the reference is the model before any update, also when resuming
            ref_lm = copy.deepcopy(lm).to(dist.device).eval().requires_grad_(False)
            self.ref = shard(CompletionLogprobs(ref_lm), dist, mp_policy)
        # LoRA: the reference is the same model with its adapters switched off (reference_logprobs), no copy
        state = None
        if resume:
            ckpt = find_checkpoint(self.output_dir, resume)
            say(f"Resuming from {ckpt}")
            if lora != is_adapter_checkpoint(ckpt):
                raise ValueError(
                    f"{ckpt} is a {'LoRA adapter' if not lora else 'full-model'} checkpoint but model.lora.r is "
                    f"{m.lora.r}: resume it with the setting it was trained with (model.lora.r "
                    f"{'> 0' if not lora else '= 0'}), or start a new run in another training.output_dir")
            if lora:  # the frozen base from model.name_or_path, the trained adapters from the checkpoint
                lm = load_adapter(lm, ckpt)
            else:
                lm, _, _ = load_model_and_tokenizer(str(ckpt), MASTER_DTYPE, trust_remote_code=m.trust_remote_code)
            state = load_trainer_state(ckpt) if dist.is_main else None
        elif lora:
            lm = apply_lora(lm, m.lora.r, m.lora.alpha, m.lora.dropout, m.lora.target_modules)
        if lora:
            trainable, total = parameter_counts(lm)
            say(f"LoRA r={m.lora.r}: training {trainable:,} adapter parameters; the {total - trainable:,} base "
                "parameters stay frozen")
            if t.gradient_checkpointing:  # the frozen embedding's output must carry gradients into checkpointed layers
                lm.enable_input_require_grads()
        if t.gradient_checkpointing:
            lm.gradient_checkpointing_enable()
        lm.to(dist.device).train()
        # padding-free micro-batches need a model that keeps sequences sharing a row apart (checked, not assumed)
        self.padding_free = t.padding_free and packing_isolates(lm)
        if t.padding_free and not self.padding_free:
            self.reporter.message(f"training.padding_free: {m.name_or_path} lets sequences packed into one row see "
                                  "each other (its attention ignores position_ids); padding each sequence instead")
        self.policy = shard(CompletionLogprobs(lm), dist, mp_policy)
        initialise_sharding(self.policy, self.tokenizer.pad_token_id or 0)
        if t.compile:  # each decoder layer on its own (the pattern FSDP2 expects); state-dict names do not change
            for layer in decoder_layers(lm):
                layer.compile(dynamic=True)
        # fused AdamW: one kernel over all parameters (measured 0.39 → 0.10 s per step for 135M parameters on CPU);
        # sharded (DTensor) parameters on CPU take the multi-tensor (foreach) path
        fused = dist.world_size == 1 or dist.device.type == "cuda"
        self.optimizer = torch.optim.AdamW([p for p in self.policy.parameters() if p.requires_grad],
                                           lr=t.learning_rate, weight_decay=t.weight_decay,
                                           **({"fused": True} if fused else {"foreach": True}))
        self.scheduler = get_scheduler(t.lr_scheduler, self.optimizer,
                                       num_warmup_steps=t.warmup_steps * t.num_iterations,
                                       num_training_steps=t.max_steps * t.num_iterations)
        start = self.restore(state) if resume else 0
        self.eos_ids = eos_token_ids(lm, self.tokenizer)
        self.vocab_size = lm.get_input_embeddings().num_embeddings
        self.open_client()
        if not self.client.shares_weights:
            with self.reporter.status("Sending the current weights to vLLM"):
                self.sync_weights()  # a resumed or non-base model must be what the servers sample from
        return start

    def restore(self, state: Optional[Dict[str, Any]]) -> int:
        """Put back optimizer, scheduler and RNG from rank 0's trainer state (saved under any number of
        processes); return its step."""
        dist = self.dist
        small = None
        if dist.is_main:  # everything but the (large) optimizer state goes to every rank
            small = {k: v for k, v in state.items() if k != "optimizer"}
            small["optimizer_saved"] = state.get("optimizer") is not None
        small = dist.broadcast(small)
        if small["optimizer_saved"]:
            load_optimizer_state(self.policy, self.optimizer, state["optimizer"] if state else None, dist)
        else:
            self.reporter.message("The checkpoint has no optimizer state (training.save_only_model): AdamW's moments "
                                  "restart")
        self.scheduler.load_state_dict(small["scheduler"])
        self.continue_schedule(int(small["step"]))
        if small.get("data_position") is not None:  # the next prompt after the saved run's last one
            self.prompt_order.continue_from(int(small["step"]), small["data_position"])
        rngs = small.get("rng_by_rank") or [small["rng"]]
        if len(rngs) == dist.world_size:
            restore_rng(rngs[dist.rank])
        else:
            self.reporter.message(f"The checkpoint was saved by {len(rngs)} process(es), this run has "
                                  f"{dist.world_size}: random states are re-seeded, the rest carries over")
        return int(small["step"])

    def continue_schedule(self, step: int) -> None:
        """Set the learning rate of the first resumed update from this run's schedule (``training.learning_rate``,
        ``max_steps``, warm-up, all possibly changed since the save) at ``step``: the optimizer state restored the
        saved run's last rate (0.0 at the end of a decaying schedule), which would otherwise train the first resumed
        step."""
        saved = self.optimizer.param_groups[0]["lr"]
        self.scheduler.base_lrs = [self.cfg.training.learning_rate] * len(self.optimizer.param_groups)
        self.scheduler.last_epoch -= 1
        self.scheduler.step()  # recomputes every group's rate at the restored position
        now = self.optimizer.param_groups[0]["lr"]
        if not math.isclose(now, saved, rel_tol=1e-6, abs_tol=1e-12):
            self.reporter.message(f"Learning rate at step {step + 1}: {now:.3g} on this run's schedule "
                                  f"(training.max_steps {self.cfg.training.max_steps}; the checkpoint's had reached "
                                  f"{saved:.3g})")

    def open_client(self) -> None:
        """Rank 0 opens the configured backend (spawning servers); the others connect to the same servers."""
        lm, dist, cfg = self.policy.lm, self.dist, self.cfg
        if cfg.vllm.mode == "off" or dist.is_main:
            client = open_backend(cfg, lm, self.tokenizer, self.model_path, self.output_dir,
                                  say=self.reporter.message, status=self.reporter.status)
        else:
            client = None
        urls = None
        if cfg.vllm.mode != "off":
            urls = dist.broadcast(getattr(client, "urls", None) or [getattr(client, "url", None)])
            if not dist.is_main:
                client = connect(urls, cfg, self.tokenizer, prompt_limit(cfg, lm)[0], first=dist.rank)
        self.client = client
        if cfg.vllm.weight_transfer == "nccl" and urls:
            from ..generation.nccl_sync import NcclWeightSync

            self.nccl = NcclWeightSync(urls, lm, dist.rank, api_key=cfg.vllm.api_key)

    # -- one step ------------------------------------------------------------------------------------------------
    def sampling_kwargs(self, step: int) -> Dict[str, Any]:
        """The sampling settings handed to the rollout (``seed`` advances with the step when set)."""
        s = self.cfg.sampling
        return {"n": s.num_generations, "temperature": s.temperature, "top_p": s.top_p, "top_k": s.top_k,
                "min_p": s.min_p, "repetition_penalty": s.repetition_penalty,
                "max_completion_length": s.max_completion_length,
                "seed": None if s.seed is None else s.seed + step}

    def generate_and_score(self, step: int, rows: List[Dict[str, Any]]) -> Tuple[RolloutOutput, StepShard, float]:
        """This rank's rollout and rewards for its ``rows``; returns the rollout (its ``weight_version``: the oldest
        one the servers' answers carried), its shard, and when generation ended (``time.perf_counter()``)."""
        cfg, g = self.cfg, self.num_generations
        prompts = [row.get(cfg.data.prompt_column) for row in rows]  # None: a rollout that makes its own (uses_prompts)
        started = self.weight_version  # what the servers held when it started (if no answer says otherwise)
        with record_versions() as seen:
            out = call_rollout(self.rollout_fn, prompts, self.sampling_kwargs(step), dict(cfg.rollout.kwargs),
                               {"client": self.client, "tokenizer": self.tokenizer, "rows": rows, "step": step,
                                "base_dir": str(self.base_dir)},
                               self.vocab_size)
        if not self.client.shares_weights:  # shared weights are always the trainer's current ones
            out.weight_version = seen.oldest if seen.oldest is not None else started
        generated = time.perf_counter()
        n = len(out)
        texts = self.tokenizer.batch_decode(out.completion_ids, skip_special_tokens=True)
        per_completion_prompts = shown_prompts(prompts, out.extras, g, n)  # what the model saw (env: reset's)
        completions = [[{"role": "assistant", "content": text}] if isinstance(p, list) else text
                       for p, text in zip(per_completion_prompts, texts)]
        columns = {c: [rows[i // g][c] for i in range(n)] for c in self.dataset.column_names
                   if c != cfg.data.prompt_column}
        scored = compute_rewards(self.rewards, prompts=per_completion_prompts, completions=completions,
                                 completion_ids=out.completion_ids, columns=columns, extras=out.extras, step=step)
        shard_ = StepShard(per_completion_prompts, texts, list(scored.total), scored.per_function,
                           [len(c) for c in out.completion_ids],
                           truncated_flags(out.completion_ids, out.extras, self.eos_ids), out.extras)
        return out, shard_, generated

    def my_rows(self, step: int) -> List[Dict[str, Any]]:
        """This rank's share (whole groups) of step ``step``'s prompts."""
        dist = self.dist
        indices = self.prompt_order.indices(step)
        share = len(indices) // dist.world_size  # validate() checked that it divides
        return [self.dataset[i] for i in indices[dist.rank * share:(dist.rank + 1) * share]]

    def rollout(self, step: int) -> Tuple[RolloutOutput, StepShard, float]:
        """Step ``step``'s rollout and rewards. With ``training.async_generation`` the next step's are started in the
        background before this one trains (one step off-policy: sampled from the weights before this step's
        update; the sampler-correction weights account for it), so generation overlaps training.

        Sets ``sampler_lag``: how many weight versions the batch's sampler was behind the trainer.

        Raises:
            StaleWeightsError: the batch was sampled with older weights than that (or newer: another trainer).
        """
        t = self.cfg.training
        if not t.async_generation:
            return self.checked_version(step, self.generate_and_score(step, self.my_rows(step)), allowed=0)
        if self.background is None:
            from concurrent.futures import ThreadPoolExecutor

            self.background = ThreadPoolExecutor(max_workers=1, thread_name_prefix="grpo-rollout-next-step")
        future = self.pending.pop(step, None)
        if future is None:
            future = self.background.submit(self.generate_and_score, step, self.my_rows(step))
        result = future.result()
        if step + 1 < t.max_steps:  # the servers still hold this step's weights: the next rollout is one step behind
            self.pending[step + 1] = self.background.submit(self.generate_and_score, step + 1, self.my_rows(step + 1))
        return self.checked_version(step, result, allowed=1)

    def checked_version(self, step: int, result: Tuple[RolloutOutput, StepShard, float],
                        allowed: int) -> Tuple[RolloutOutput, StepShard, float]:
        """``result`` unchanged, once its weight version is at most ``allowed`` versions behind the trainer's.

        Raises:
            StaleWeightsError: it is further behind, or ahead (the message names both versions).
        """
        sampled = result[0].weight_version
        problem = version_lag_problem(step, sampled, self.weight_version, allowed)
        if problem:
            raise StaleWeightsError(problem)
        self.sampler_lag = 0 if sampled is None else self.weight_version - sampled
        return result

    def step(self, step: int) -> Tuple[Dict[str, Any], List[Dict[str, Any]]]:
        """Run step ``step`` (0-based) on every rank; return the whole step's metrics and one record per completion."""
        cfg, g, dist = self.cfg, self.num_generations, self.dist
        t0 = time.perf_counter()
        out = mine = error = None
        t1 = t0
        refill: Dict[str, float] = {}
        try:
            # in-process generation from a sharded policy: weights held whole, so no rank waits on another's rollout
            with whole_weights(self.policy) if self.client.shares_weights else nullcontext():
                out, mine, t1 = self.rollout(step)
                t1 = max(t1, t0)  # a rollout finished in the background counts as no wait
                if cfg.training.dynamic_sampling.enabled:
                    out, mine, refill = self.keep_groups_with_signal(step, out, mine)
                    t1 = time.perf_counter()
        except Exception as exc:  # noqa: BLE001 - every rank must learn of it before the next collective
            error = exc
        dist.agree(error)
        if refill:
            out, mine, refill = self.even_out_groups(step, out, mine, refill)
        # advantages over the whole step (scale_rewards: batch needs every rank's rewards)
        everyone = [r for rewards in dist.gather(mine.rewards) for r in rewards]
        advantages = group_advantages(torch.tensor(everyone, dtype=torch.float32), g, cfg.training.scale_rewards)
        offset = dist.rank * len(out)
        t2 = time.perf_counter()
        keep = save_now(cfg.training.save_rollouts, step + 1, step + 1 == cfg.training.max_steps)
        signal = cfg.training.beta > 0 or bool(advantages.abs().max() > 0)  # the same on every rank
        train_stats, tokens = self.update(out, advantages[offset:offset + len(out)], mine.truncated, keep, signal)
        self.applied = step + 1  # the weights now include this step, whatever happens next
        self.guard_nonfinite(step, train_stats["nonfinite_skipped"])
        if not signal:
            self.reporter.message(f"Step {step + 1}: every group's rewards were equal (all advantages 0, beta 0): no "
                                  "update this step; the weights, AdamW's moments and the learning-rate schedule are "
                                  "unchanged")
        t3 = time.perf_counter()
        if not self.client.shares_weights and signal:
            self.sync_weights()
        t4 = time.perf_counter()
        whole = StepShard.merge(dist.gather(mine))
        if keep:
            self.save_rollouts(step + 1, whole, advantages, [r for part in dist.gather(tokens) for r in part])
        metrics, samples = self.step_metrics(whole, advantages, train_stats, (t0, t1, t2, t3, t4))
        return {**metrics, **refill}, samples

    # -- dynamic sampling (DAPO) ---------------------------------------------------------------------------------
    def extra_rows(self, step: int, round_: int, drawn: List[int]) -> List[Dict[str, Any]]:
        """This rank's share of the prompts for refill round ``round_`` (1, 2, ...) of step ``step``: rows the step
        has not drawn yet (``drawn``, the whole step's, grows with each round), in an order seeded by the round
        (:func:`~.dynamic_sampling.refill_indices`), so a resumed run draws the same ones."""
        t, dist = self.cfg.training, self.dist
        indices = refill_indices(step, round_, len(self.dataset), t.prompts_per_step, t.seed, drawn)
        drawn += indices
        share = len(indices) // dist.world_size
        return [self.dataset[i] for i in indices[dist.rank * share:(dist.rank + 1) * share]]

    def keep_groups_with_signal(self, step: int, out: RolloutOutput,
                                mine: StepShard) -> Tuple[RolloutOutput, StepShard, Dict[str, float]]:
        """Drop this rank's groups whose rewards are all equal and roll out more prompts until it holds its share of
        groups with reward variance or ``training.dynamic_sampling.max_rounds`` rollout calls are spent (DAPO, Yu
        et al. 2025, arXiv:2503.14476, section 3.2: dynamic sampling). Returns the kept groups (at most the share)
        and counts for :meth:`even_out_groups`."""
        g, max_rounds = self.num_generations, self.cfg.training.dynamic_sampling.max_rounds
        target = len(out) // g
        first = (out, mine)
        kept_out: List[RolloutOutput] = []
        kept_shards: List[StepShard] = []
        have = dropped = 0
        rounds = 1
        drawn = list(self.prompt_order.indices(step))  # the whole step's rows so far: never drawn twice
        while True:
            rewards = torch.tensor(mine.rewards, dtype=torch.float32).view(-1, g)
            signal = [i for i in range(rewards.shape[0]) if rewards[i].max() > rewards[i].min()]
            dropped += rewards.shape[0] - len(signal)
            signal = signal[:target - have]
            kept_out.append(out.select_groups(signal))
            kept_shards.append(mine.select([i * g + j for i in signal for j in range(g)]))
            have += len(signal)
            if have >= target or rounds >= max_rounds:
                break
            rows = self.extra_rows(step, rounds, drawn)
            if not rows:  # every row of the dataset was drawn in this step already
                break
            out, mine, _ = self.generate_and_score(step, rows)
            rounds += 1
        self._first_round = first  # the fallback when no rank found any group with signal
        return (RolloutOutput.concat(kept_out), StepShard.merge(kept_shards),
                {"dynamic_sampling/rounds": rounds, "dynamic_sampling/groups_dropped": dropped,
                 "dynamic_sampling/groups_kept": have, "dynamic_sampling/groups_wanted": target})

    def even_out_groups(self, step: int, out: RolloutOutput, mine: StepShard,
                        counts: Dict[str, float]) -> Tuple[RolloutOutput, StepShard, Dict[str, float]]:
        """Give every rank the same number of groups (the fewest any rank kept: FSDP needs the same micro-batches
        on every rank), report a step that could not be filled, and sum the counts over ranks. When no group had
        any reward variance, train on the first round's groups as they are (their advantages are 0)."""
        g, dist = self.num_generations, self.dist
        [fewest] = dist.min([counts["dynamic_sampling/groups_kept"]])
        rounds, dropped, kept, wanted = dist.sum([counts[k] for k in ("dynamic_sampling/rounds",
                                                                      "dynamic_sampling/groups_dropped",
                                                                      "dynamic_sampling/groups_kept",
                                                                      "dynamic_sampling/groups_wanted")])
        [max_rounds_used] = dist.max([counts["dynamic_sampling/rounds"]])
        fewest = int(fewest)
        if fewest == 0:  # logged as sampled; the update is skipped (no advantage anywhere)
            out, mine = self._first_round
            trained = 0
        else:
            out, mine = out.select_groups(range(fewest)), mine.select(range(fewest * g))
            trained = fewest * dist.world_size
        limit = self.cfg.training.dynamic_sampling.max_rounds
        if trained < wanted or fewest == 0:
            what = (f"{trained} of {int(wanted)} groups" if fewest else
                    "no group with reward variance, so no update (the first round's groups are logged)")
            self.reporter.message(f"Step {step + 1}: dynamic sampling reached training.dynamic_sampling.max_rounds "
                                  f"= {limit} rollout calls with {int(kept)} group(s) with reward variance: "
                                  f"{what}")
        self._first_round = None
        return out, mine, {"dynamic_sampling/rounds": max_rounds_used, "dynamic_sampling/groups_dropped": dropped,
                           "dynamic_sampling/groups_trained": trained,
                           "dynamic_sampling/filled": float(fewest > 0 and trained >= wanted)}

    def save_rollouts(self, step: int, whole: StepShard, advantages: torch.Tensor,
                      tokens: List[Dict[str, Any]]) -> None:
        """Rank 0 writes ``rollouts/step_<step>.jsonl``: every completion's tokens, mask, sampler and trainer
        log-probs, importance weights, advantage, rewards and extras (:mod:`.rollout_log`)."""
        if not self.dist.is_main:
            return
        g = self.num_generations
        records = [{"index": i, "group": i // g, "prompt": whole.prompts[i],
                    "prompt_text": self.tokenizer.decode(tok["prompt_ids"], skip_special_tokens=False),
                    **tok, "advantage": round(advantages[i].item(), 4), "reward": whole.rewards[i],
                    "rewards": {k: v[i] for k, v in whole.per_function.items()},
                    "extras": {k: v[i] for k, v in whole.extras.items()}} for i, tok in enumerate(tokens)]
        write_rollouts(self.output_dir, step, records)

    def step_metrics(self, whole: StepShard, advantages: torch.Tensor, train_stats: Dict[str, float],
                     times: Tuple[float, ...]) -> Tuple[Dict[str, Any], List[Dict[str, Any]]]:
        """The logged numbers of a step (rewards, lengths, extras, update statistics, times) and its sample records."""
        t0, t1, t2, t3, t4 = times
        n, g = len(whole.rewards), self.num_generations
        rewards = torch.tensor(whole.rewards, dtype=torch.float32)
        lengths = whole.lengths
        metrics: Dict[str, Any] = {
            "reward": rewards.mean().item(),
            "reward_std": rewards.std().item() if n > 1 else 0.0,
            "reward_min": rewards.min().item(), "reward_max": rewards.max().item(),  # the plot's band stays inside
            **RewardResult(whole.rewards, whole.per_function).stats(),
            "frac_reward_zero_std": zero_std_fraction(rewards, g),
            **train_stats,
            **extras_means(whole.extras),
            **tool_metrics(whole.extras),
            **episode_metrics(whole.extras),
            "completions/mean_length": sum(lengths) / n,
            "completions/max_length": max(lengths),
            "completions/min_length": min(lengths),
            "completions/truncated_fraction": sum(whole.truncated) / n,
            **({} if self.client.shares_weights else {"sampler/weight_version_lag": self.sampler_lag}),
            "time/generation": t1 - t0, "time/rewards": t2 - t1, "time/training": t3 - t2, "time/sync": t4 - t3,
            "time/step": t4 - t0,
        }
        multi_turn = {k: whole.extras[name] for k, name in (("turns", "num_turns"), ("tool_calls", "num_tool_calls"),
                                                            ("ended", "end_reason"), ("end_detail", "end_detail"))
                      if name in whole.extras}
        samples = [{"prompt": whole.prompts[i], "completion": whole.texts[i], "reward": whole.rewards[i],
                    **{f"rewards/{k}": v[i] for k, v in whole.per_function.items()},
                    "advantage": advantages[i].item(), "truncated": whole.truncated[i],
                    **{k: v[i] for k, v in multi_turn.items()}} for i in range(n)]
        return metrics, samples

    # -- the update ----------------------------------------------------------------------------------------------
    def logprobs(self, model: CompletionLogprobs, mb: MicroBatch) -> torch.Tensor:
        """``(B, C)`` log-probs of a micro-batch's completion tokens under ``model`` (sampler's temperature and
        filtering)."""
        s, t = self.cfg.sampling, self.cfg.training
        with self.precision.autocast():
            return completion_logprobs(model, mb.packed, s.temperature, t.logprob_chunk_size, **self.sampling_filter)

    def reference_logprobs(self, mb: MicroBatch) -> torch.Tensor:
        """``(B, C)`` log-probs under the reference model (for the KL term): the frozen copy, or, for a LoRA policy,
        the policy itself with its adapters switched off (the base model; ``PeftModel.disable_adapter``)."""
        if self.ref is not None:
            return self.logprobs(self.ref, mb)
        with self.policy.lm.disable_adapter():
            return self.logprobs(self.policy, mb)

    def update(self, out: RolloutOutput, advantages: torch.Tensor, truncated: List[bool],
               keep_tokens: bool = False, signal: bool = True) -> Tuple[Dict[str, float], List[Dict[str, Any]]]:
        """``num_iterations`` optimizer updates on this rank's share of the step; the loss of every ``loss_type`` is
        normalised by the whole step's totals, so N processes make the update one process would make on the same
        batch. Returns loss/KL/clip/importance-weight/grad statistics of the whole step and, with ``keep_tokens``,
        each of this rank's sequences' token values (:func:`~.rollout_log.token_record`) from the first iteration.
        ``signal`` false (the whole step's advantages are all 0 and there is no KL term): everything is measured,
        but neither the optimizer nor the learning-rate schedule steps."""
        t, s, dist = self.cfg.training, self.cfg.sampling, self.dist
        masks = [[0] * len(m) if (t.mask_truncated_completions and tr) else m
                 for m, tr in zip(out.completion_mask, truncated)]
        batches = build_micro_batches(out.prompt_ids, out.completion_ids, masks, out.logprobs, advantages,
                                      t.micro_batch_size, self.tokenizer.pad_token_id, dist.device,
                                      self.padding_free)
        sequences, tokens, micro, real, padded = dist.sum([
            len(out), sum(mb.mask.sum().item() for mb in batches), len(batches),
            sum(mb.packed.num_tokens for mb in batches),
            sum(mb.packed.input_ids.numel() for mb in batches)])
        totals = BatchTotals(int(sequences), int(tokens), int(micro), s.max_completion_length)
        with torch.no_grad():
            for mb in batches:
                if t.num_iterations > 1:
                    mb.old_logprobs = self.logprobs(self.policy, mb)
                if t.beta > 0:
                    mb.ref_logprobs = self.reference_logprobs(mb)
        stats = UpdateStats()
        kept: List[Tuple[List[float], Optional[List[float]]]] = []  # per sequence: trainer log-probs, IS weights
        for iteration in range(t.num_iterations):
            loss_sum = 0.0
            for mb in batches:
                logps = self.logprobs(self.policy, mb)
                old = mb.old_logprobs if mb.old_logprobs is not None else logps.detach()
                if mb.sampler_logprobs is not None and mb.is_weights is None:
                    mode = t.sampler_correction if self.compare_with_sampler else "none"
                    mb.is_weights = importance_weights(old, mb.sampler_logprobs, mb.mask, mode,
                                                       t.sampler_correction_cap)
                result = per_token_loss(logps, old, mb.advantages, epsilon=t.epsilon, epsilon_high=t.epsilon_high,
                                        beta=t.beta, ref_logps=mb.ref_logprobs, token_weights=mb.is_weights,
                                        importance_level=t.importance_level, mask=mb.mask)
                loss = aggregate(result["loss"], mb.mask, t.loss_type, totals)
                (loss * dist.world_size).backward()  # FSDP averages gradients over ranks: undo it, sums are wanted
                loss_sum += loss.item()
                stats.add(result, mb, old, first_iteration=iteration == 0)
                if keep_tokens and iteration == 0:
                    kept += [(old[row, :n].tolist(), None if mb.is_weights is None else mb.is_weights[row, :n].tolist())
                             for row, n in enumerate(mb.packed.completion_valid.sum(dim=1).tolist())]
            if iteration == 0 and out.logprobs is not None and self.compare_with_sampler:
                [lp_diff] = dist.sum([stats.lp_diff])
                if math.isfinite(lp_diff):  # non-finite: the trainer's own log-probs; the update is skipped below
                    self.check_sampler_mismatch(lp_diff / max(totals.num_tokens, 1))
            [loss_sum] = dist.sum([loss_sum])
            grad_norm = self.clip_gradients()
            stats.losses.append(loss_sum)
            stats.grad_norms.append(grad_norm)
            if iteration == 0:
                stats.learning_rate = self.optimizer.param_groups[0]["lr"]  # before the schedule moves on
            if not signal:  # AdamW would still move every weight through its momentum (and weight decay)
                stats.no_signal = True
            elif math.isfinite(loss_sum) and math.isfinite(grad_norm):
                self.optimizer.step()
                self.scheduler.step()
            else:  # a NaN/inf loss or gradient would poison the weights and the optimizer's moments: skip
                stats.skipped += 1
            self.optimizer.zero_grad(set_to_none=True)
        metrics = {**stats.reduce(dist).metrics(totals.num_tokens, t.num_iterations, out.logprobs is not None),
                   # what each forward/backward pass processed: real tokens (prompt + completion) and with padding
                   "tokens/forward": int(real), "tokens/padded": int(padded)}
        tokens = [token_record(out.prompt_ids[i], out.completion_ids[i], masks[i],
                               None if out.logprobs is None else out.logprobs[i], lp, w)
                  for i, (lp, w) in enumerate(kept)]
        return metrics, tokens

    def clip_gradients(self) -> float:
        """Clip the gradient norm to ``training.max_grad_norm`` (0: no clipping); return the norm before clipping
        (over the whole model, also when it is sharded)."""
        t = self.cfg.training
        params = [p for p in self.policy.parameters() if p.requires_grad]
        norm = torch.nn.utils.clip_grad_norm_(params, t.max_grad_norm if t.max_grad_norm > 0 else math.inf)
        return float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)

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
        means the server is not sampling from the weights it was sent (a failed or partial weight sync). A batch
        sampled with older weights by design (``sampler_lag`` > 0, async generation) is not compared.

        Raises:
            StaleWeightsError: ``mean_abs_diff`` (nats per token) exceeds ``vllm.max_logprob_mismatch``.
        """
        limit = self.cfg.vllm.max_logprob_mismatch
        if self.sampler_lag:  # sampled one version behind by design (async): the trainer's weights moved since
            return
        if self.cfg.vllm.mode != "off" and limit is not None and not mean_abs_diff <= limit:  # NaN fails too
            raise StaleWeightsError(
                f"vLLM's log-probs differ from the trainer's by {mean_abs_diff:.3f} nats per token on average "
                f"(limit vllm.max_logprob_mismatch = {limit}) right after a weight sync: the server is not sampling "
                "from the trainer's current weights. Check the server log (output_dir/vllm.log); if the two "
                "legitimately differ (e.g. bfloat16 sampler), raise the limit or set it to null")

    # -- weights out ---------------------------------------------------------------------------------------------
    def sync_weights(self) -> None:
        """Gather the full weights (a collective) and have rank 0 send them to every server (or broadcast them over
        NCCL); every rank learns whether that worked.

        While a server has not answered, a line every 30 s says how long the sync has waited; one that does not
        answer for ``vllm.sync_timeout_s`` seconds stops it. On success every rank's client records the new version.

        Raises:
            ServerError (one process) / RankError (several): a server failed, answered another version, or did not
                answer in time.
        """
        error = None
        urls = ", ".join(getattr(self.client, "urls", None) or [str(getattr(self.client, "url", "vLLM"))])
        waiting = progress_lines(lambda: f"Waiting for the weight sync to {urls}", self.reporter.message)
        if self.nccl is not None:  # GPU to GPU; every rank takes part in gathering the shards
            try:
                with waiting:
                    self.nccl.send()
            except ServerError as exc:
                error = exc
        else:
            weights = self.precision.for_server(full_state_dict(self.policy, self.dist))  # in the servers' dtype
            if self.dist.is_main:
                try:
                    with waiting:
                        self.client.update_weights(weights)
                except ServerError as exc:
                    error = exc
        self.dist.agree(error)
        sender = self.nccl if self.nccl is not None else self.client
        self.weight_version = self.dist.broadcast(getattr(sender, "weight_version", self.weight_version + 1))
        confirm_version(self.client, self.weight_version)  # other ranks' and NCCL's clients did not sync themselves

    def save(self, step: int) -> Path:
        """Checkpoint after ``step`` completed steps (a collective: every rank calls it; rank 0 writes)."""
        t, dist = self.cfg.training, self.dist
        lora = is_peft_model(self.policy.lm)  # a LoRA checkpoint holds the adapters (PeftModel.save_pretrained)
        weights = None if lora else full_state_dict(self.policy, dist)
        extra = None
        if lora and t.save_merged:
            def extra(folder: Path) -> None:
                save_merged_model(self.policy.lm, folder / MERGED_DIR, self.tokenizer)
        optimizer = None if t.save_only_model else optimizer_state(self.policy, self.optimizer, dist)
        rngs = dist.gather(rng_state())
        path = None
        if dist.is_main:
            path = save_checkpoint(self.output_dir, step, self.policy.lm, self.tokenizer,
                                   {"optimizer": optimizer, "optimizer_saved": not t.save_only_model,
                                    "scheduler": self.scheduler.state_dict(), "rng_by_rank": rngs,
                                    "data_position": self.prompt_order.position(step), "config": to_yaml(self.cfg),
                                    "world_size": dist.world_size},
                                   weights=weights, keep=t.save_total_limit, extra=extra)
        return dist.broadcast(path)

    def close(self) -> None:
        """Stop the background rollout, the generation client (and any server it spawned)."""
        if self.background is not None:
            self.background.shutdown(wait=False, cancel_futures=True)
        if self.nccl is not None:
            self.nccl.close()
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
        ValueError: ``resume`` names a checkpoint of the other kind (LoRA adapter vs full model, see ``model.lora``).
    """
    base_dir = Path(base_dir or Path.cwd())
    t = config.training
    dist = Dist.from_env(t.device)
    try:
        # rank 0 alone prints and writes; the others keep quiet
        reporter = (reporter or RichReporter()) if dist.is_main else RichReporter(quiet=True)
        return _train(config, base_dir, resume, reporter, check, dist)
    finally:
        dist.close()


def steps_for_epochs(num_epochs: float, num_rows: int, prompts_per_step: int) -> int:
    """Steps that ``num_epochs`` passes over ``num_rows`` prompts take at ``prompts_per_step`` prompts a step
    (``ceil``: a last partial step is taken; the prompt order runs on into the next epoch's permutation)."""
    return max(1, math.ceil(num_epochs * num_rows / prompts_per_step - 1e-9))


def _train(config: Config, base_dir: Path, resume: Optional[str], reporter: RichReporter, check: bool,
           dist: Dist) -> TrainResult:
    if check:
        problems = validate(config, base_dir)
        if any(p.is_error for p in problems):
            raise ConfigError(problems)
    if config.training.num_epochs is not None:  # the run's length in steps, from the dataset's size
        config = copy.deepcopy(config)
        rows = len(load_train_dataset(config.data.train, config.data.split, base_dir))
        config.training.max_steps = steps_for_epochs(config.training.num_epochs, rows,
                                                     config.training.prompts_per_step)
    t = config.training
    if resume:
        ckpt = find_checkpoint(Path(t.output_dir).expanduser(), resume)
        reached = checkpoint_step(ckpt)
        if reached >= t.max_steps:  # nothing to do: load nothing, save nothing
            reporter.message(f"{ckpt} is already at step {reached} and training.max_steps is {t.max_steps}: nothing "
                             f"to train. To continue, raise it (e.g. training.max_steps={reached + t.max_steps})")
            return TrainResult(Path(t.output_dir).expanduser(), ckpt, reached)
    run = _Run(config, base_dir, reporter, dist)
    logger = MetricsLogger(run.output_dir, config.logging.report_to if dist.is_main else [],
                           config.logging.project, config.logging.run_name, config=config_dict(config),
                           write=dist.is_main)
    history: List[Dict[str, Any]] = []
    done = 0
    last_saved: Optional[Path] = None
    try:
        done = run.applied = run.load(resume)
        logger.truncate_after(done)
        reporter.start(t.max_steps, done, steps_per_epoch=len(run.dataset) / t.prompts_per_step)
        for step in range(done, t.max_steps):
            metrics, samples = run.step(step)
            done = step + 1
            history.append(metrics)
            logger.log(done, metrics)
            logger.log_completions(done, samples)
            log_now = done % t.logging_steps == 0 or done == t.max_steps
            reporter.step(done, metrics, log_now, pick_samples(samples, config.sampling.num_generations,
                                                               t.log_completions))
            if t.save_steps and done % t.save_steps == 0 and done < t.max_steps:
                last_saved = run.save(done)
                reporter.message(f"Saved {last_saved}")
        if done > 0:
            last_saved = run.save(done)
    except KeyboardInterrupt:
        if dist.world_size == 1:  # several processes are all interrupted at different points: no collective save
            _save_on_stop(run, last_saved, reporter)
        raise
    except (RolloutError, RewardError, StaleWeightsError, NonFiniteError, ServerError, RankError):
        _save_on_stop(run, last_saved, reporter)
        raise
    finally:
        reporter.stop()
        run.close()
        logger.close()
    return TrainResult(run.output_dir, last_saved, done, history)


def _save_on_stop(run: _Run, last_saved: Optional[Path], reporter: RichReporter) -> None:
    """Keep the steps whose update is in the weights (may be one more than were logged) when a run stops early."""
    applied = run.applied
    if applied > 0 and (last_saved is None or not last_saved.name.endswith(f"-{applied}")):
        reporter.stop()
        saved = run.save(applied)
        reporter.message(f"Stopped after {applied} step(s); saved {saved}")
    if applied > 0 or last_saved is not None:
        reporter.message(resume_hint(reporter, run.output_dir))
