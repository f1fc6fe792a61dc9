"""``validate-config --dry-run``: the user's rollout and rewards on a couple of prompts, before any training.

The first time a rollout meets the model is otherwise the first training step, after minutes of loading and server
start. A dry run loads the model and tokenizer, calls the rollout on the first ``num_prompts`` dataset rows with a
short ``max_completion_length`` through the configured backend (an attached vLLM server when it answers; otherwise
transformers in this process: no server is spawned for a dry run), checks the output contract, calls every reward
function, and reports one sample with its rewards and how long each part took. It runs exactly the code a training
step runs (:meth:`_Run.generate_and_score`), so a contract or reward error reads the same as in training.
"""

from __future__ import annotations

import copy
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List

from ..config import Config
from .distributed import Dist


@dataclass
class DryRunResult:
    """What a dry run saw.

    Attributes:
        backend: ``transformers`` or the attached server's URL. num_prompts, num_completions: what the rollout got and
        returned. seconds: ``load`` (model and tokenizer), ``rollout``, ``rewards`` (wall-clock seconds).
        sample: the first completion: ``prompt`` (dataset), ``prompt_text`` (what the model saw), ``completion``,
        ``completion_tokens``, ``trained_tokens``, ``reward``, ``rewards`` (per function), ``extras``.
        rewards: every completion's weighted reward. max_completion_length: the budget the dry run used (at most
        ``configured_max_completion_length``, the config's).
    """

    backend: str
    num_prompts: int
    num_completions: int
    seconds: Dict[str, float]
    sample: Dict[str, Any]
    rewards: List[float] = field(default_factory=list)
    max_completion_length: int = 0
    configured_max_completion_length: int = 0


def dry_run(config: Config, base_dir: Path, num_prompts: int = 2, max_completion_length: int = 32,
            say: Callable[[str], None] = lambda text: None) -> DryRunResult:
    """Call the configured rollout and rewards once on ``num_prompts`` prompts (see the module docstring).

    Args:
        config: a config without errors. base_dir: the config file's folder.
        num_prompts: dataset rows to use (the first ones). max_completion_length: the budget for this call
            (at most the configured one).
        say: status lines (which backend is used and why).

    Raises:
        RolloutError / RewardError: the rollout or a reward broke its contract or raised (the message names the
        key, sample and function). BackendError: ``max_completion_length`` does not fit the model.
    """
    from ..generation.backend import attach_urls, check_server, connect, open_backend, prompt_limit
    from ..generation.backend import BackendError
    from ..models.loading import eos_token_ids, load_model_and_tokenizer
    from .loop import _Run
    from .progress import RichReporter

    cfg = copy.deepcopy(config)
    cfg.sampling.max_completion_length = min(max_completion_length, cfg.sampling.max_completion_length)
    with tempfile.TemporaryDirectory(prefix="grpo-rollout-dry-run-") as tmp:
        cfg.training.output_dir = tmp  # the run folder stays untouched
        run = _Run(cfg, base_dir, RichReporter(quiet=True), Dist())
        rows = [run.dataset[i] for i in range(min(num_prompts, len(run.dataset)))]
        t0 = time.perf_counter()
        m = cfg.model
        lm, run.tokenizer, model_path = load_model_and_tokenizer(m.name_or_path, m.dtype, m.revision,
                                                                 m.trust_remote_code, progress=say)
        lm.eval()
        run.eos_ids = eos_token_ids(lm, run.tokenizer)
        run.vocab_size = lm.get_input_embeddings().num_embeddings
        backend = "transformers"
        if cfg.vllm.mode == "attach":
            max_prompt, needed = prompt_limit(cfg, lm)
            client = connect(attach_urls(cfg), cfg, run.tokenizer, max_prompt)
            try:
                for one in getattr(client, "clients", [client]):
                    check_server(one, run.vocab_size, needed)
                run.client, backend = client, ", ".join(attach_urls(cfg))
            except BackendError as exc:
                client.close()
                say(f"vLLM at {', '.join(attach_urls(cfg))} is not usable ({exc}); generating with transformers")
        elif cfg.vllm.mode == "spawn":
            say("vllm.mode is spawn: the dry run generates with transformers here instead of starting a server")
        if run.client is None:
            cfg.vllm.mode = "off"
            run.client = open_backend(cfg, lm, run.tokenizer, model_path, Path(tmp), say=say)
        t1 = time.perf_counter()
        try:
            out, shard, generated = run.generate_and_score(0, rows)
        finally:
            run.client.close()
        t2 = time.perf_counter()
    extras = {k: v[0] for k, v in shard.extras.items()}
    sample = {"prompt": shard.prompts[0], "prompt_text": run.tokenizer.decode(out.prompt_ids[0]),
              "completion": shard.texts[0], "completion_tokens": len(out.completion_ids[0]),
              "trained_tokens": sum(out.completion_mask[0]), "reward": shard.rewards[0],
              "rewards": {k: v[0] for k, v in shard.per_function.items()}, "extras": extras}
    return DryRunResult(backend, len(rows), len(out), {"load": t1 - t0, "rollout": generated - t1,
                                                        "rewards": t2 - generated}, sample, list(shard.rewards),
                        cfg.sampling.max_completion_length, config.sampling.max_completion_length)
