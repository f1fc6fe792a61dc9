"""The rollout stage: a step's prompts → the user's rollout → rewards, as a :class:`~.batch.ScoredBatch`.

Each training process takes its own whole groups of the step's prompts (:meth:`RolloutStage.my_rows`), calls the
rollout once with them (``n = num_generations`` completions each, :func:`~grpo_rollout.rollouts.rollout_call.call_rollout`
checks the result against the contract) and scores every completion
(:func:`~grpo_rollout.rewards.calling.compute_rewards`). The dry run calls the same
:meth:`RolloutStage.generate_and_score` on its two prompts.

Each batch carries the weight versions that sampled it, per completion, taken from the data: the rollout's
``weight_versions``, else the answers of the client view each call is handed (:func:`~.versions.completion_versions`),
whatever thread, loop or process generated them; a batch further behind than expected stops the run
(:func:`~.versions.version_lag_problem`). With ``training.max_staleness`` ≥ 1 (or ``training.async_generation``, its
alias for 1) the groups stream instead (:mod:`.stream_source`, :mod:`.stream`): each group is its own rollout call,
and a step takes the groups that finished, at most ``max_staleness`` weight versions behind. The two ways are two batch
sources with one interface (:class:`BatchSource`: ``next_batch(step, version)``), chosen once when the stage is built
(:attr:`RolloutStage.source`; prime-rl's ``train_source``).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Protocol, Sequence, Tuple

from ..config import Config
from ..user_code.resolve import resolve_callable
from ..data import load_section
from ..generation.sampling_settings import SamplingSettings
from ..generation.version_stamps import RecordingClient
from ..rewards.calling import RewardFunction, compute_rewards, implied_rewards, unique_names
from ..rewards.overlong import OVERLONG_REWARD, overlong_reward
from .failures import EpisodeFailures, PartlyPlayed
from ..rollouts import builtin_rollout
from ..rollouts.rollout_call import call_rollout
from ..rollouts.contract import RolloutContext
from ..rollouts.failed_groups import FailedGroups, keeping_finished
from ..rollouts.run_end import end_run
from ..runs import names as rn
from .batch import CompletionScores, ScoredBatch
from ..distributed import Dist
from .curriculum import pass_rate_curriculum
from .prompt_order import PromptOrder
from .stats import shown_prompts, truncated_flags
from .stream_source import StreamSource
from .versions import StaleWeightsError, completion_versions, version_lag_problem

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase
    from ..generation.base import GenerationClient


class BatchSource(Protocol):
    """Where a step's batch comes from: :class:`SyncSource` or :class:`~.stream_source.StreamSource`."""

    def next_batch(self, step: int, version: int) -> ScoredBatch:
        """This rank's scored groups of step ``step`` (0-based), checked against the trainer's weight ``version``."""

    def trained(self) -> None:
        """The step's batch was trained (a stream's prompts now count as used)."""

    def state(self) -> Optional[Dict[str, Any]]:
        """This rank's place in a stream's prompt sequence, for a checkpoint (``None``: nothing to keep)."""

    def wake(self) -> None:
        """The curriculum counted a step's visits (a stream waiting to draw goes on)."""

    def close(self) -> None:
        """Start no more rollouts."""


class SyncSource:
    """The step's prompts rolled out when the trainer asks (``training.max_staleness: 0``): one rollout call for this
    rank's groups; with ``rollout.on_error`` retry or drop, when an episode fails outside the model, its group alone
    again (the others kept), or every group one at a time when the call failed whole
    (:meth:`.failures.EpisodeFailures.replay_step`)."""

    def __init__(self, stage: RolloutStage):
        self.stage = stage

    def next_batch(self, step: int, version: int) -> ScoredBatch:
        """Step ``step``'s (0-based) rollout and rewards, with its ``sampler_lag``.

        Raises:
            StaleWeightsError: sampled with other weights than the trainer's ``version``
                (:meth:`RolloutStage.checked_version`).
        """
        stage = self.stage
        ids = stage.share(stage.prompt_order.indices(step))
        rows = [stage.dataset[i] for i in ids]
        try:
            with keeping_finished(stage.failures.failure_test()):  # on_error retry/drop: a failed group alone again
                batch = stage.generate_and_score(step, rows, None, row_ids=ids)
        except Exception as exc:
            def play_one(g: int, attempt: int) -> ScoredBatch:
                sampling = stage.group_sampling(step, g, attempt + 1)
                return stage.generate_and_score(step, [rows[g]], sampling, row_ids=[ids[g]])
            groups = [(i, row.get(stage.cfg.data.prompt_column)) for i, row in zip(ids, rows)]
            batch = stage.failures.replay_step(step, exc, play_one, groups)
        return stage.checked_version(step, batch, version, allowed=0)

    def trained(self) -> None:
        """Nothing to keep: the next step draws its own prompts."""

    def state(self) -> None:
        """Nothing to keep (``None``)."""

    def wake(self) -> None:
        """Nothing waits."""

    def close(self) -> None:
        """Nothing runs between steps."""


class RolloutStage:
    """The dataset, the rollout and reward functions, and the generation client, turned into scored batches.

    Built in two parts: the constructor loads what needs no model (dataset, functions, prompt order), so a broken
    config fails before minutes of model loading; :meth:`connect` adds the tokenizer and the client.

    Attributes:
        dataset, rollout_fn, rewards, prompt_order: from the config.
        source: where the steps' batches come from (:class:`SyncSource`, or :class:`~.stream_source.StreamSource`
            with ``training.max_staleness`` ≥ 1), chosen here once.
    """

    def __init__(self, config: Config, base_dir: Path, dist: Dist):
        self.cfg, self.base_dir, self.dist = config, base_dir, dist
        t = config.training
        self.dataset = load_section(config.data, base_dir)
        self.rollout_fn = resolve_callable(config.rollout.function, base_dir) if config.rollout.function \
            else builtin_rollout()
        fns = [resolve_callable(r.function, base_dir) for r in config.rewards]
        self.rewards = [RewardFunction(name, fn, r.weight, dict(r.kwargs))
                        for name, fn, r in zip(unique_names(fns), fns, config.rewards)]
        self.rewards += implied_rewards(self.rollout_fn, dict(config.rollout.kwargs), base_dir,
                                        {r.name for r in self.rewards}, config.rollout.env_timeout_s)
        self.rewards += overlong_reward(config)  # DAPO's length shaping, when training.overlong_buffer > 0
        self.curriculum = pass_rate_curriculum(config.data)  # data.curriculum: pass_rate, else None
        # a stream draws steps ahead of training: its draws see the visits of max_staleness + 2 steps before
        self.prompt_order = PromptOrder(len(self.dataset), t.prompts_per_step, t.seed, config.data.shuffle,
                                        self.curriculum, lag=1 if t.staleness() == 0 else t.staleness() + 2)
        self.visits: List[Tuple[List[int], List[float]]] = []  # curriculum: (rows, rewards) rolled out this step
        self.visits_lock = threading.Lock()  # stream workers add to them
        self.client = self.tokenizer = None
        self.eos_ids: set = set()
        self.vocab_size = 0
        self.failures = EpisodeFailures(config.rollout, config.sampling.num_generations, dist,  # rollout.on_error
                                        Path(t.output_dir).expanduser(), len(self.dataset), t.prompts_per_step,
                                        base_dir)
        self.source: BatchSource = StreamSource(self) if t.staleness() > 0 else SyncSource(self)

    def connect(self, client: GenerationClient, tokenizer: PreTrainedTokenizerBase, eos_ids: set,
                vocab_size: int) -> None:
        """Add what needs the model: the generation client, the tokenizer, its end-of-sequence ids and vocabulary
        size."""
        self.client, self.tokenizer, self.eos_ids, self.vocab_size = client, tokenizer, eos_ids, vocab_size

    def sampling_settings(self, step: int) -> SamplingSettings:
        """The sampling settings handed to the rollout (``seed`` advances with the step when set)."""
        return SamplingSettings.from_config(self.cfg.sampling, step)

    def generate_and_score(self, step: int, rows: List[Dict[str, Any]], sampling: Optional[SamplingSettings] = None,
                           shaping: bool = True, row_ids: Optional[Sequence[int]] = None) -> ScoredBatch:
        """This rank's rollout and rewards for its ``rows``. The rollout is handed its own view of the client, which
        records the weight versions of its answers; each completion's versions are the ones the rollout returned,
        else those (:func:`~.versions.completion_versions`), and ``rollout.weight_version`` is the oldest (``None``
        for a client sharing the trainer's weights, current by construction). ``sampling``: the rollout's sampling
        settings (default :meth:`sampling_settings`; the evaluation passes its own ``n`` and ``temperature``);
        ``shaping`` false leaves out the training-only length shaping (``training.overlong_buffer``: evaluation);
        ``row_ids``: the training dataset's indices of ``rows``, whose visits the curriculum counts.

        Raises:
            RolloutError / RewardError: a user function broke its contract or raised, or a server-backed rollout's
                completions carry no weight version.
            PartlyPlayed: some groups failed outside the model (the rollout raised FailedGroups); it holds the
                others, scored.
        """
        cfg = self.cfg
        sampling = sampling or self.sampling_settings(step)
        g = sampling.n
        prompts = [row.get(cfg.data.prompt_column) for row in rows]  # None: a rollout that makes its own (uses_prompts)
        view = RecordingClient(self.client)  # this call's own record of the versions its answers carry
        context = RolloutContext(client=view, tokenizer=self.tokenizer, rows=rows, step=step,
                                 base_dir=str(self.base_dir), env_timeout_s=cfg.rollout.env_timeout_s)
        failed = None
        try:
            out = call_rollout(self.rollout_fn, prompts, sampling, dict(cfg.rollout.kwargs), context, self.vocab_size)
        except FailedGroups as exc:  # the groups that finished are scored and kept; the failed ones played again
            if not exc.kept:
                raise PartlyPlayed(exc, None) from exc
            failed, out, rows = exc, exc.rollout, [rows[i] for i in exc.kept]
            prompts, row_ids = [prompts[i] for i in exc.kept], row_ids and [row_ids[i] for i in exc.kept]
        if self.client.shares_weights:  # the trainer's own weights: its current version by construction
            out.weight_versions = [None] * len(out)
        else:
            out.weight_versions = completion_versions(out, view.versions, self.rollout_fn)
            out.weight_version = min((v[0] for v in out.weight_versions), default=None)
        generated = time.perf_counter()
        num_completions = len(out)
        texts = self.tokenizer.batch_decode(out.completion_ids, skip_special_tokens=True)
        # what the model saw (an environment's: what reset gave)
        per_completion_prompts = shown_prompts(prompts, out.extras, g, num_completions)
        completions = [[{"role": "assistant", "content": text}] if isinstance(p, list) else text
                       for p, text in zip(per_completion_prompts, texts)]
        # every column of the row, the prompt's too (``prompt``: the row's; ``prompts``: what the model saw)
        columns = {c: [rows[i // g][c] for i in range(num_completions)] for c in (rows[0] if rows else ())}
        rewards = self.rewards if shaping else [r for r in self.rewards if r.name != OVERLONG_REWARD]
        scored = compute_rewards(rewards, prompts=per_completion_prompts, completions=completions,
                                 completion_ids=out.completion_ids, columns=columns, extras=out.extras, step=step)
        out.extras = {k: v for k, v in out.extras.items() if k not in rn.LIVE_EXTRAS}  # the rewards had them
        scores = CompletionScores(rewards=list(scored.rewards), per_function=scored.per_function,
                                  timed_out=scored.timed_out, time_limits=scored.time_limits,
                                  prompts=per_completion_prompts, texts=texts,
                                  lengths=[len(c) for c in out.completion_ids],
                                  truncated=truncated_flags(out.completion_ids, out.extras, self.eos_ids),
                                  extras=out.extras, weight_versions=list(out.weight_versions),
                                  trained_tokens=out.trained_tokens())
        if row_ids is not None and self.curriculum is not None:
            with self.visits_lock:
                self.visits.append((list(row_ids), list(scores.rewards)))
        if failed is not None:
            raise PartlyPlayed(failed, ScoredBatch(out, scores, generated)) from failed
        return ScoredBatch(out, scores, generated)

    def share(self, indices: Sequence[int]) -> List[int]:
        """This rank's share (whole groups) of the dataset rows ``indices`` (the whole step's)."""
        share = len(indices) // self.dist.world_size  # validate() checked that the step's prompts divide
        return list(indices[self.dist.rank * share:(self.dist.rank + 1) * share])

    def my_rows(self, step: int) -> List[Dict[str, Any]]:
        """This rank's share of step ``step``'s (0-based) prompts."""
        return [self.dataset[i] for i in self.share(self.prompt_order.indices(step))]

    def drawn(self, step: int) -> List[int]:
        """The dataset rows dynamic sampling must not draw in step ``step``: the step's own, and with a curriculum the
        prompts paused, and those that sat out their turn in the step's draw (their last turn to sit out, maybe)."""
        order = self.prompt_order
        return order.indices(step) + (self.curriculum.paused_rows() + order.sat_out(step) if self.curriculum else [])

    def group_sampling(self, step: int, position: int, attempt: int, retry: int = 0) -> SamplingSettings:
        """The sampling settings of one group played alone: seeded from step ``step``'s seed, the group's
        ``position`` in this rank's prompt sequence, its ``attempt`` and, for a group played again after an
        :class:`EpisodeFailure` (``rollout.on_error: retry``), its ``retry``."""
        sampling = self.sampling_settings(step)
        parts = (self.dist.rank, position, attempt) + (("retry", retry) if retry else ())
        return replace(sampling, seed=sampling.request_seed("group", *parts))

    def refill(self, step: int, version: int, indices: Sequence[int]) -> Optional[ScoredBatch]:
        """Dynamic sampling's extra round: this rank's share of the dataset rows ``indices``, rolled out and scored, its
        weight version checked as the step's (``version``: the trainer's); ``None`` when there are none.

        Raises:
            StaleWeightsError: it was sampled with other weights than the trainer's (:meth:`checked_version`).
        """
        ids = self.share(indices)
        if not ids:
            return None
        return self.checked_version(step, self.generate_and_score(step, [self.dataset[i] for i in ids], row_ids=ids),
                                    version, allowed=0)

    def count_visits(self, step: int) -> None:
        """Curriculum: hand the groups every rank rolled out since the last call, in rank order, to the prompt order
        as step ``step``'s visits, so that every rank keeps the same record (a collective when there is a
        curriculum); a stream waiting to draw a later step goes on."""
        if self.curriculum is not None:
            with self.visits_lock:
                visits, self.visits = self.visits, []
            self.prompt_order.count(step, [v for rank_visits in self.dist.gather(visits) for v in rank_visits])
            self.source.wake()

    def metrics(self, step: int, say: Callable[[str], None]) -> Dict[str, float]:
        """Step ``step``'s (0-based) ``episodes/*`` (``rollout.on_error``: rank 0 also writes the failed attempts to
        ``failures.jsonl`` and says the first of each kind with ``say``) and ``curriculum/*`` metrics (a collective)."""
        return {**self.failures.metrics(step, say), **(self.curriculum.metrics() if self.curriculum else {})}

    @staticmethod
    def checked_version(step: int, batch: ScoredBatch, current: int, allowed: int) -> ScoredBatch:
        """``batch`` with its ``sampler_lag`` (the trainer's ``current`` version minus the one that sampled it), once
        that is at most ``allowed`` versions.

        Raises:
            StaleWeightsError: it is further behind, or ahead (the message names both versions).
        """
        sampled = batch.rollout.weight_version
        problem = version_lag_problem(step, sampled, current, allowed)
        if problem:
            raise StaleWeightsError(problem)
        return replace(batch, sampler_lag=0 if sampled is None else current - sampled)

    def close(self) -> None:
        """Stop the stream (no group starts after), the MCP servers and OpenEnv apps the rollouts started, then the
        generation client (and any server it spawned)."""
        self.source.close()
        end_run()  # what the rollouts' integrations left running: MCP servers, OpenEnv apps
        if self.client is not None:
            self.client.close()
