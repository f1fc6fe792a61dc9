"""The GRPO recipe: one class that sets a run up, runs its steps, saves and cleans up (torchtune's recipe shape).

One step (Shao et al. 2024, DeepSeekMath, Algorithm 1, one policy update per batch by default) is four stages,
each a method a reader can jump to, passing typed data (:mod:`grpo_rollout.orchestrator.batch`)::

    batch  = collect(step)         # ScoredBatch: this rank's groups, ids, masks, sampler log-probs, rewards, advantages
    result = update(step, batch)   # UpdateResult: loss parts, grad norm, clip/KL/IS statistics
    sync(result)                   # the new weights to every server, which confirms the version
    log(step, batch, result)       # metrics, sample records, token-level records

With ``vllm.sleep_during_training`` the servers sleep between ``collect`` and ``update`` and wake before ``sync``
(:meth:`GRPORecipe.rest_servers`): a server on the trainer's GPU leaves it the memory while it computes.

Step convention (:mod:`grpo_rollout.runs.names`): ``step`` is 0-based in every stage of the recipe; logs, messages,
``rollouts/step_<k>.jsonl`` and ``checkpoint-<k>`` count from 1 (``k = step + 1``: steps completed), and a method
that takes or gives the 1-based count says so.

With ``N`` training processes each takes its own whole groups of the step's prompts; N processes train exactly as
one would on the same batch (:mod:`grpo_rollout.distributed`, :mod:`.parallel.policy`); rank 0 alone writes and prints.

One sample's way, prompt → ``backward()``, is recorded by ``tests/integration/test_trace.py`` on a tiny run and
shown in docs/architecture.md ("The way of one sample"): 17 hops through 11 files synchronously, 22 through 14 streaming.
"""

from __future__ import annotations

import random
import time
from contextlib import nullcontext
from functools import partial
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import torch

from ..config import Config, to_yaml
from ..models.lora import MERGED_DIR, is_peft_model, save_merged_model
from ..runs.completion import CompletionRecord
from ..runs.names import CONFIG_FILE, TIME_STEP
from .update.advantages import step_advantages
from .update.surrogates import policy_term
from .update.turn_credit import with_turn_credit
from ..orchestrator.batch import CompletionScores, ScoredBatch, StepTimes
from ..orchestrator.stream_stats import StreamStats
from .checkpoint import TrainerState, reusable_weights, rng_state, save_checkpoint, weights_on_disk
from ..distributed import Dist
from ..orchestrator.dynamic_sampling import RefillCounts, even_out_groups, keep_groups_with_signal
from .evaluation.held_out import EvalResult, Evaluator, evaluation_on, write_eval_records
from .guards import NonFiniteGuard
from .parallel.memory import largest_rank_memory, start_step
from .parallel.policy import full_state_dict, optimizer_state, whole_weights
from .parallel.precision import Precision
from .reporting.progress import RichReporter
from ..runs.rollouts import save_now
from ..orchestrator.stage import RolloutStage
from .setup import build_optimizer, load_policy, open_clients, restore
from .reporting.step_metrics import save_rollouts, step_metrics
from .reporting.streaming_view import startup_lines
from .update.policy_update import PolicyUpdate, UpdateResult
from .update.no_signal import SignalWatch, skipped_update, step_has_signal
from .parallel.weight_sync import WeightSync


class GRPORecipe:
    """One training run: :meth:`setup`, then :meth:`train_step` per step (:func:`~.run.train` loops), then
    :meth:`cleanup`; :meth:`save_checkpoint` between them.

    Attributes:
        rollouts: the rollout stage (dataset, functions, client). policy, ref, optimizer, scheduler: set by
        :meth:`setup`. applied: steps whose optimizer updates are in the weights.
    """

    def __init__(self, config: Config, base_dir: Path, reporter: RichReporter, dist: Dist):
        self.cfg, self.base_dir, self.reporter, self.dist = config, base_dir, reporter, dist
        t, s = config.training, config.sampling
        random.seed(t.seed)
        torch.manual_seed(t.seed)
        self.rollouts = RolloutStage(config, base_dir, dist)  # data and functions first: no model for a bad config
        self.advantages = step_advantages(t, s.num_generations, base_dir)
        self.evaluator = Evaluator(config, base_dir, dist, self.rollouts) if evaluation_on(config) else None
        if t.staleness() > 0:  # streaming rollouts: say so, with the bound
            reporter.streaming(t.staleness(), startup_lines(t, dist.world_size))
        if self.evaluator is not None and self.evaluator.size_warning:
            reporter.message(self.evaluator.size_warning)
        self.output_dir = Path(t.output_dir).expanduser()
        self.precision = Precision.from_config(config.model.dtype, dist.device)  # float32 master weights
        if dist.is_main:
            self.output_dir.mkdir(parents=True, exist_ok=True)
            header = f"# precision: {self.precision.describe(config.model.lora.r > 0)}\n"
            (self.output_dir / CONFIG_FILE).write_text(header + to_yaml(config))
        # a repetition penalty changes the sampler's distribution per context in a way the trainer does not
        # reproduce: its log-probs are then logged but neither corrected for nor checked
        self.compare_with_sampler = s.repetition_penalty == 1.0
        self.nonfinite = NonFiniteGuard(t.max_nonfinite_steps, reporter.message)
        self.signal = SignalWatch(reporter.message)  # steps without signal said; weights changed counted
        self.policy = self.ref = self.optimizer = self.scheduler = self.tokenizer = None
        self.updater: Optional[PolicyUpdate] = None
        self.weights: Optional[WeightSync] = None
        self.applied = 0

    @property
    def dataset(self) -> Any:
        return self.rollouts.dataset

    # -- set-up ----------------------------------------------------------------------------------------------------
    def setup(self, resume: Optional[str]) -> int:
        """Load the models, optimizer and schedule, put back ``resume``'s checkpoint, open the generation client
        and send the weights to the servers; return the step to start from (:mod:`.setup`)."""
        cfg, dist, say = self.cfg, self.dist, self.reporter.message
        loaded = load_policy(cfg, dist, self.precision, self.output_dir, resume, say)
        self.policy, self.ref, self.tokenizer = loaded.policy, loaded.ref, loaded.tokenizer
        self.optimizer, self.scheduler = build_optimizer(cfg, self.policy, dist)
        self.updater = PolicyUpdate(cfg, self.policy, self.ref, self.optimizer, self.scheduler,
                                    precision=self.precision, dist=dist, pad_id=self.tokenizer.pad_token_id,
                                    padding_free=loaded.padding_free, shared_prefix=loaded.shared_prefix,
                                    compare_with_sampler=self.compare_with_sampler,
                                    surrogate=policy_term(cfg.training, self.base_dir))
        start = restore(loaded.state, self.policy, self.optimizer, self.scheduler, self.rollouts.prompt_order, cfg,
                        dist, say) if resume else 0
        client, nccl = open_clients(cfg, loaded, self.output_dir, dist, say, self.reporter.status)
        self.weights = WeightSync(self.policy, client, nccl, dist, self.precision, say)
        self.rollouts.connect(client, self.tokenizer, loaded.eos_ids, loaded.vocab_size)
        if cfg.vllm.sleep_during_training and not client.shares_weights:
            self.weights.rest(False)  # an attached server that a crashed run left asleep wakes up (idempotent)
        if not client.shares_weights:
            with self.reporter.status("Sending the current weights to vLLM"):
                self.weights.send()  # a resumed or non-base model must be what the servers sample from
        self.applied, self.signal.unchanged_since = start, weights_on_disk(self.output_dir, resume)
        return start

    # -- one step --------------------------------------------------------------------------------------------------
    def train_step(self, step: int) -> Tuple[Dict[str, Any], List[CompletionRecord]]:
        """Run step ``step`` (0-based; logs and checkpoints count from 1) on every rank; return the whole step's
        metrics and one :class:`~grpo_rollout.runs.completion.CompletionRecord` per completion (rollout order)."""
        times = StepTimes(time.perf_counter())
        start_step(self.dist.device)
        batch, refill = self.collect(step, times)
        self.rest_servers(True, times)  # vllm.sleep_during_training: the GPU is the trainer's while it computes
        result = self.update(step, batch, times)
        self.rest_servers(False, times)
        self.sync(result, times)
        return self.log(step, batch, result, refill, times)

    def collect(self, step: int, times: StepTimes) -> Tuple[ScoredBatch, Optional[RefillCounts]]:
        """This rank's scored groups of the step (with dynamic sampling: those with reward variance, the same number
        on every rank) and their group-relative advantages, computed over the whole step (``scale_rewards: batch``
        needs every rank's rewards)."""
        cfg, dist, stage, t = self.cfg, self.dist, self.rollouts, self.cfg.training
        batch = first = counts = error = None
        version = self.weights.version
        try:
            # in-process generation from a sharded policy: weights held whole, so no rank waits on another's rollout
            with whole_weights(self.policy) if stage.client.shares_weights else nullcontext():
                batch = first = stage.source.next_batch(step, version)
                times.generated = max(batch.generated_at, times.start)  # made in the background: no wait
                if t.dynamic_sampling.enabled and batch.stream is None:  # streaming drops them as they arrive
                    batch, counts = keep_groups_with_signal(
                        step, batch, stage.drawn(step), partial(stage.refill, step, version),
                        num_generations=cfg.sampling.num_generations, max_rounds=t.dynamic_sampling.max_rounds,
                        num_rows=len(stage.dataset), prompts_per_step=t.prompts_per_step, seed=t.seed)
                    times.generated = time.perf_counter()
        except Exception as exc:  # noqa: BLE001 - every rank must learn of it before the next collective
            error = exc
        dist.agree(error)
        stage.count_visits(step)  # data.curriculum: every rank's groups counted (a collective)
        if counts is not None:
            batch, counts = even_out_groups(dist, step, batch, first, counts,
                                            cfg.training.dynamic_sampling.max_rounds, self.reporter.message)
        batch = stage.failures.even_out(batch)  # rollout.on_error: the same groups on every rank
        everyone = [r for rewards in dist.gather(batch.scores.rewards) for r in rewards]
        advantages = self.advantages(torch.tensor(everyone, dtype=torch.float32))
        times.scored = time.perf_counter()
        batch = batch.with_advantages(advantages[dist.rank * len(batch):(dist.rank + 1) * len(batch)], advantages)
        if cfg.training.credit == "turn":  # each turn's tokens their own advantage (update/turn_credit.py)
            batch = with_turn_credit(batch, dist, cfg.sampling.num_generations, cfg.training.turn_discount)
        return batch, counts

    def update(self, step: int, batch: ScoredBatch, times: StepTimes) -> UpdateResult:
        """The policy update on this rank's groups (:class:`~.update.policy_update.PolicyUpdate`); none, not even its
        forward and backward passes, when the whole step has no signal (:mod:`.update.no_signal`: every trained
        token's advantage 0, no KL or entropy term, on every rank). Stops the run after
        ``training.max_nonfinite_steps`` skipped updates in a row. ``step`` 0-based; :attr:`applied` and the messages
        count from 1."""
        keep = self.keeps_rollouts(step)
        if step_has_signal(batch, self.cfg.training, self.dist):  # the same decision on every rank
            result = self.updater.update(batch, keep_tokens=keep)
        else:
            result = skipped_update(self.updater, batch, keep)
        self.applied = step + 1  # the weights now include this step, whatever happens next
        self.rollouts.source.trained()  # streaming: the step's prompts are used (a checkpoint will not roll them again)
        self.nonfinite.after_step(step, result.skipped)
        self.signal.after_update(step, result)
        times.trained = time.perf_counter()
        return result

    def rest_servers(self, asleep: bool, times: StepTimes) -> None:
        """With ``vllm.sleep_during_training``, put the servers to sleep (``asleep``: after the step's generation,
        before the update) or wake them (before the sync, which loads the new weights into the woken model);
        the seconds go to ``time/sleep_wake``."""
        if self.cfg.vllm.sleep_during_training and not self.rollouts.client.shares_weights:
            if not asleep and self.dist.device.type == "cuda":
                # memory the update freed stays in PyTorch's cache, where the waking server cannot allocate it
                torch.cuda.empty_cache()
            times.sleep_wake = (times.sleep_wake or 0.0) + self.weights.rest(asleep)

    def sync(self, result: UpdateResult, times: StepTimes) -> None:
        """Send the updated weights to the servers (none to send with shared weights or after no update)."""
        if not self.rollouts.client.shares_weights and not result.stats.no_signal:
            self.weights.send()
        times.synced = time.perf_counter()

    def log(self, step: int, batch: ScoredBatch, result: UpdateResult, refill: Optional[RefillCounts],
            times: StepTimes) -> Tuple[Dict[str, Any], List[CompletionRecord]]:
        """The whole step's metrics and completion records (a collective); rank 0 writes ``rollouts/step_<k>.jsonl``
        (``k = step + 1``)."""
        dist, g = self.dist, self.cfg.sampling.num_generations
        whole = CompletionScores.merge(dist.gather(batch.scores))
        self.say_notes(f"Step {step + 1}", whole.timeout_notes(g) + whole.untrained_notes(g))
        lag = None if self.rollouts.client.shares_weights else batch.sampler_lag
        metrics, records = step_metrics(whole, batch.step_advantages, result, times, g, lag)
        self.signal.after_step(step, metrics)  # K steps in a row without signal: said, with what to change
        if self.keeps_rollouts(step):
            tokens = [r for part in dist.gather(result.token_records) for r in part]
            if dist.is_main:
                save_rollouts(self.output_dir, step + 1, records, tokens, self.tokenizer, g)
        memory = largest_rank_memory(dist)
        if batch.stream is not None:
            stream = StreamStats.merge(dist.gather(batch.stream.with_gaps(result.stats.gaps, g, result.owners)))
            metrics.update(stream.metrics(metrics[TIME_STEP]))
            self.say_notes(f"Step {step + 1}", stream.notes(self.cfg.training.staleness()))
        return {**metrics, **(refill.metrics() if refill is not None else {}), **memory,
                **self.rollouts.metrics(step, self.reporter.message)}, records

    def evaluate(self, done: int) -> EvalResult:
        """The held-out evaluation after ``done`` completed steps (0: before the first; a collective); rank 0 writes
        ``eval/step_<done>.jsonl``. It reads the weights and changes nothing of training (:mod:`.evaluation.held_out`)."""
        with whole_weights(self.policy) if self.rollouts.client.shares_weights else nullcontext():
            result = self.evaluator.run(done)
        if self.dist.is_main:
            write_eval_records(self.output_dir, done, result)
        self.say_notes(f"Held-out evaluation {f'after step {done}' if done else 'before step 1'}", result.notes)
        return result

    def say_notes(self, when: str, notes: List[str], most: int = 5) -> None:
        """Print the first ``most`` of ``notes`` (e.g. completions a reward could not score in time), prefixed by
        ``when``, and how many more there were."""
        for note in notes[:most]:
            self.reporter.message(f"{when}: {note}")
        if len(notes) > most:
            self.reporter.message(f"{when}: … and {len(notes) - most} more such completion(s)")

    def keeps_rollouts(self, step: int) -> bool:
        """Whether step ``step`` (0-based) writes its token-level records (``training.save_rollouts``)."""
        t = self.cfg.training
        return save_now(t.save_rollouts, step + 1, step + 1 == t.max_steps)

    # -- saving and cleaning up --------------------------------------------------------------------------------------
    def save_checkpoint(self, step: int) -> Path:
        """Checkpoint after ``step`` completed steps (1-based: ``checkpoint-<step>``; a collective: every rank calls
        it; rank 0 writes). Weights no step changed since a save are not written again (:mod:`.checkpoint`)."""
        t, dist = self.cfg.training, self.dist
        lora = is_peft_model(self.policy.lm)  # a LoRA checkpoint holds the adapters (PeftModel.save_pretrained)
        unchanged = reusable_weights(self.signal.unchanged_since, dist)
        weights = None if lora or unchanged is not None else full_state_dict(self.policy, dist)
        extra = None
        if lora and t.save_merged and unchanged is None:
            def extra(folder: Path) -> None:
                save_merged_model(self.policy.lm, folder / MERGED_DIR, self.tokenizer)
        optimizer = None if t.save_only_model else optimizer_state(self.policy, self.optimizer, dist)
        rngs = dist.gather(rng_state())
        streams = dist.gather(self.rollouts.source.state())
        path = None
        if dist.is_main:
            state = TrainerState(step, optimizer, not t.save_only_model, self.scheduler.state_dict(), rngs,
                                 self.rollouts.prompt_order.position(step), to_yaml(self.cfg), dist.world_size,
                                 None if streams[0] is None else streams)
            path = save_checkpoint(self.output_dir, step, self.policy.lm, self.tokenizer, state, weights=weights,
                                   keep=t.save_total_limit, extra=extra, unchanged=unchanged)
        path = dist.broadcast(path)
        self.signal.saved(path, unchanged)
        return path

    def cleanup(self) -> None:
        """Stop the background rollout, the NCCL channel, the generation client (and any server it spawned); an
        attached server this run put to sleep is woken for whoever uses it next."""
        if self.weights is not None:
            if self.cfg.vllm.sleep_during_training and self.cfg.vllm.mode == "attach" and self.dist.is_main:
                try:
                    self.rollouts.client.wake_up()
                except Exception:  # noqa: BLE001 - best effort on the way out; the run's own error matters more
                    pass
            self.weights.close()
        self.rollouts.close()

