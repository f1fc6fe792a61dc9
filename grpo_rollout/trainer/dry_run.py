"""``validate-config --dry-run``: the user's rollout and rewards on a couple of prompts, before any training.

The first time a rollout meets the model is otherwise the first training step, after minutes of loading and server
start. A dry run loads the model and tokenizer, calls the rollout on the first ``num_prompts`` dataset rows with
``num_completions`` completions each (``sampling.num_generations`` capped; a group of 8 took 2-3 minutes in
transformers on 2 CPU cores) and a short ``max_completion_length`` through the configured backend (an attached vLLM
server when it answers; otherwise transformers in this process: no server is spawned for a dry run), checks the
output contract, calls every reward function, and reports one sample with its rewards and how long each part took. A multi-turn episode that the short
budget ended before another turn is played again with training's budget, so every turn's code runs. It runs exactly
the code a step runs (:meth:`~..orchestrator.stage.RolloutStage.generate_and_score`), so a contract or reward error
reads the same as in training.
"""

from __future__ import annotations

import copy
import random
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Tuple

import torch

from ..config import Config
from ..runs import names as rn
from ..runs.completion import CompletionRecord
from ..distributed import Dist

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


@dataclass(kw_only=True)
class DryRunResult:
    """What a dry run saw.

    Attributes:
        backend: ``transformers``, the attached server's URL, or ``vLLM (spawned)`` (for a rollout that
        ``needs_server``). num_prompts, num_completions: what the rollout got and returned. seconds: ``load`` (model
        and tokenizer), ``rollout``, ``rewards`` (wall-clock seconds).
        sample: the first completion (its prompt, completion, reward, rewards per function and extras; no
        advantage). prompt_text: its prompt ids decoded (what the model saw). completion_tokens, trained_tokens: its
        completion's tokens, and those of them trained (the rest: tool or environment tokens). earlier_sequences:
        ``(tokens, trained)`` of each earlier sequence of the first completion's episode (an agent's context edit).
        rewards: every completion's weighted reward. max_completion_length: the budget the dry run used (at most
        ``configured_max_completion_length``, the config's). num_generations: the completions per prompt it asked for
        (at most ``configured_num_generations``).
    """

    backend: str
    num_prompts: int
    num_completions: int
    seconds: Dict[str, float]
    sample: CompletionRecord
    prompt_text: str = ""
    completion_tokens: int = 0
    trained_tokens: int = 0
    earlier_sequences: List[Tuple[int, int]] = field(default_factory=list)
    rewards: List[float] = field(default_factory=list)
    max_completion_length: int = 0
    configured_max_completion_length: int = 0
    num_generations: int = 0
    configured_num_generations: int = 0


def dry_run(config: Config, base_dir: Path, num_prompts: int = 2, max_completion_length: int = 32,
            say: Callable[[str], None] = lambda text: None, num_completions: int = 2) -> DryRunResult:
    """Call the configured rollout and rewards once on ``num_prompts`` prompts (see the module docstring).

    Args:
        config: a config without errors. base_dir: the config file's folder.
        num_prompts: dataset rows to use (the first ones). max_completion_length: the budget for this call
            (at most the configured one). num_completions: completions per prompt (at most
            ``sampling.num_generations``); the same setting repeated in ``rollout.kwargs`` or a reward's ``kwargs``
            (``n``, ``max_tokens``, checked to agree with ``sampling``) takes the dry run's value too.
        say: status lines (which backend is used and why).

    Raises:
        RolloutError / RewardError: the rollout or a reward broke its contract or raised (the message names the
        key, sample and function). BackendError: ``max_completion_length`` does not fit the model, or the attached
        server answers but training would refuse it (another model, length, dtype or no sleep mode; an unreachable
        one is replaced by transformers).
    """
    from ..models.pretrained import eos_token_ids, load_model_and_tokenizer
    from ..rewards.overlong import OVERLONG_REWARD, overlong_reward
    from ..orchestrator.stage import RolloutStage

    cfg = _capped(config, num_completions, max_completion_length)
    with tempfile.TemporaryDirectory(prefix="grpo-rollout-dry-run-") as tmp:
        cfg.training.output_dir = tmp  # the run folder stays untouched
        random.seed(cfg.training.seed)  # sampled as a training run with this seed would
        torch.manual_seed(cfg.training.seed)
        stage = RolloutStage(cfg, base_dir, Dist())
        # the overlong penalty measures against training's max_completion_length, not the dry run's shorter cap
        stage.rewards = [r for r in stage.rewards if r.name != OVERLONG_REWARD] + overlong_reward(config)
        rows = [stage.dataset[i] for i in range(min(num_prompts, len(stage.dataset)))]
        t0 = time.perf_counter()
        m = cfg.model
        lm, tokenizer, model_path = load_model_and_tokenizer(m.name_or_path, m.dtype, m.revision,
                                                             m.trust_remote_code, progress=say)
        lm.eval()
        vocab_size = lm.get_input_embeddings().num_embeddings
        client, backend = _generation_client(cfg, lm, tokenizer, model_path, Path(tmp), vocab_size, say,
                                             getattr(stage.rollout_fn, "needs_server", False))
        stage.connect(client, tokenizer, eos_token_ids(lm, tokenizer), vocab_size)
        t1 = time.perf_counter()
        try:
            batch = stage.generate_and_score(0, rows)
            if _cut_before_another_turn(batch, cfg, config):  # later turns would go untried: the whole budget
                say(f"the dry run's {cfg.sampling.max_completion_length}-token budget ended an episode before "
                    f"another turn; running again with training's sampling.max_completion_length = "
                    f"{config.sampling.max_completion_length}, so every turn is tried")
                cfg.sampling.max_completion_length = config.sampling.max_completion_length
                t1 = time.perf_counter()
                batch = stage.generate_and_score(0, rows)
        finally:
            client.close()
        t2 = time.perf_counter()
    for note in batch.scores.untrained_notes(cfg.sampling.num_generations):  # a training step would say it too
        say(note)
    seconds = {"load": t1 - t0, "rollout": batch.generated_at - t1, "rewards": t2 - batch.generated_at}
    return DryRunResult(backend=backend, num_prompts=len(rows), num_completions=len(batch), seconds=seconds,
                        sample=batch.scores.records()[0],
                        prompt_text=tokenizer.decode(batch.rollout.prompt_ids[0]),
                        completion_tokens=len(batch.rollout.completion_ids[0]),
                        trained_tokens=sum(batch.rollout.completion_mask[0]), rewards=list(batch.scores.rewards),
                        earlier_sequences=[(len(seg.completion_ids), sum(seg.completion_mask))
                                           for seg in (batch.rollout.segments or [[]])[0]],
                        max_completion_length=cfg.sampling.max_completion_length,
                        configured_max_completion_length=config.sampling.max_completion_length,
                        num_generations=cfg.sampling.num_generations,
                        configured_num_generations=config.sampling.num_generations)


def _generation_client(cfg: Config, lm: Any, tokenizer: PreTrainedTokenizerBase, model_path: Any, tmp: Path, vocab_size: int,
                       say: Callable[[str], None], needs_server: bool = False) -> Tuple[Any, str]:
    """The client the dry run generates with, and its name for the report: the attached server(s) when they answer
    and pass the checks training makes, else transformers in this process (``cfg.vllm.mode`` becomes ``off``; no
    server is spawned unless the rollout function has ``needs_server = True``: it calls the server's own routes
    itself, and then one is). Raises BackendError: an attached server answers but training would refuse it."""
    from ..generation.backend import attach_urls, check_server, connect, open_backend, prompt_limit
    from ..generation.backend import BackendError
    from ..generation.vllm_client import ServerError

    if cfg.vllm.mode == "attach":
        max_prompt, needed = prompt_limit(cfg, lm)
        attached = connect(attach_urls(cfg), cfg, tokenizer, max_prompt)
        try:  # the checks training makes: a server training would refuse fails the dry run too
            for one in getattr(attached, "clients", [attached]):
                check_server(one, vocab_size, needed, cfg.vllm.sleep_during_training, cfg.model.dtype)
            return attached, ", ".join(attach_urls(cfg))
        except BackendError as exc:
            attached.close()
            if not isinstance(exc.__cause__, ServerError):  # it answers, and is the wrong server for this config
                raise
            say(f"vLLM at {', '.join(attach_urls(cfg))} is not reachable ({exc}); generating with transformers")
    elif cfg.vllm.mode == "spawn" and needs_server:
        say("the rollout calls the vLLM server's own routes: the dry run starts one")
        cfg.vllm.num_servers = 1
        return open_backend(cfg, lm, tokenizer, model_path, tmp, say=say), "vLLM (spawned)"
    elif cfg.vllm.mode == "spawn":
        say("vllm.mode is spawn: the dry run generates with transformers here instead of starting a server")
    cfg.vllm.mode = "off"
    return open_backend(cfg, lm, tokenizer, model_path, tmp, say=say), "transformers"


def _capped(config: Config, num_completions: int, max_completion_length: int) -> Config:
    """A copy of ``config`` sampling at most ``num_completions`` completions of at most ``max_completion_length``
    tokens, also where ``rollout.kwargs`` and the rewards' ``kwargs`` repeat those settings."""
    cfg = copy.deepcopy(config)
    s = cfg.sampling
    s.num_generations = min(num_completions, s.num_generations)
    s.max_completion_length = min(max_completion_length, s.max_completion_length)
    cfg.rollout.kwargs = _with_sampling(cfg.rollout.kwargs, cfg)
    for reward in cfg.rewards:
        reward.kwargs = _with_sampling(reward.kwargs, cfg)
    return cfg


def _with_sampling(mapping: Dict[str, Any], cfg: Config) -> Dict[str, Any]:
    """``mapping`` with each sampling setting it repeats (``n``, ``max_tokens``, ..., nested too) set to ``cfg``'s."""
    from ..rollouts.contract import SAMPLING_ALIASES

    return {k: _with_sampling(v, cfg) if isinstance(v, dict) else
            getattr(cfg.sampling, SAMPLING_ALIASES[k]) if k in SAMPLING_ALIASES else v for k, v in mapping.items()}


def _cut_before_another_turn(batch: Any, cfg: Config, config: Config) -> bool:
    """Whether a multi-turn episode of ``batch`` ended by the dry run's shortened budget (``end_reason`` budget_*)
    while training's budget is larger: a bug in a later turn would then only show in training."""
    from ..rollouts.episodes import BUDGET_REASONS

    reasons = batch.scores.extras.get(rn.END_REASON_EXTRA) or []
    return (cfg.sampling.max_completion_length < config.sampling.max_completion_length
            and any(r in BUDGET_REASONS for r in reasons))
