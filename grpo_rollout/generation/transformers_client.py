"""In-process generation with ``transformers`` (``vllm.mode: off``): slow, but needs nothing beyond the trainer's model.

The client samples from the very model object the trainer updates, so no weight sync is needed.
"""

from __future__ import annotations

import threading
from contextlib import nullcontext
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Hashable, List, Optional, Sequence

import torch
from transformers import LogitsProcessor, LogitsProcessorList

from ..models.pretrained import eos_token_ids
from .seeds import derive_seed
from .base import GenerationClient, GenerationResult
from .sampling_settings import SamplingSettings
from .sampling_filter import filter_logits, filtering

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


class SamplerFilter(LogitsProcessor):
    """Temperature, then min-p, top-k and top-p in vLLM's order (:mod:`.sampling_filter`), as one logits processor
    for ``generate``: the in-process sampler draws from the distribution the trainer's log-probs describe."""

    def __init__(self, temperature: float, top_k: int, top_p: float, min_p: float):
        self.temperature, self.top_k, self.top_p, self.min_p = temperature, top_k, top_p, min_p

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        """``scores``: ``(rows, vocab)`` logits (after the repetition penalty); returns them scaled and filtered."""
        scores = scores.float() / self.temperature
        if filtering(self.top_k, self.top_p, self.min_p):
            scores = filter_logits(scores, None, self.top_k, self.top_p, self.min_p)
        return scores


class TransformersClient(GenerationClient):
    """Generation with ``model.generate`` on the trainer's own model.

    Args:
        model: a ``transformers`` causal LM (shared with the trainer).
        tokenizer: its tokenizer.
        max_prompt_length: prompts are cut from the left to this many tokens (``None``: never).
        compute_dtype: ``model.dtype``; a float32 model (the trainer's master weights) then samples under
            ``torch.autocast`` in it, as the trainer computes its log-probs.
        batch_size: at most this many sequences (prompts × n) per ``generate`` call, to bound memory.

    With several training processes the trainer holds the sharded model's weights whole around each rollout
    (:func:`~grpo_rollout.trainer.parallel.policy.whole_weights`), so ``generate`` runs with no collective and each rank may
    call it as often as its own rollout needs.

    Calls from several threads (e.g. :meth:`agenerate` from concurrent multi-turn samples) run one at a time: they
    share one model, its train/eval mode and torch's global RNG.
    """

    shares_weights = True

    def __init__(self, model: Any, tokenizer: PreTrainedTokenizerBase, max_prompt_length: Optional[int] = None, batch_size: int = 256,
                 compute_dtype: str = "float32"):
        self.model = model
        self.compute_dtype = getattr(torch, compute_dtype)  # model.dtype: float32 master weights run under autocast
        self.tokenizer = tokenizer
        self.max_prompt_length = max_prompt_length
        self.batch_size = batch_size
        self.eos_ids = eos_token_ids(model, tokenizer)
        pad = tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else min(self.eos_ids)
        self._lock = threading.Lock()

    @torch.no_grad()
    def generate(self, prompt_ids: Sequence[Sequence[int]], *, n: int = 1, temperature: float = 1.0,
                 top_p: float = 1.0, top_k: int = -1, min_p: float = 0.0, repetition_penalty: float = 1.0,
                 max_tokens: int = 256, seed: Optional[int] = None, stop: Optional[Sequence[str]] = None,
                 truncate: bool = True, affinity: Optional[Hashable] = None) -> GenerationResult:
        """See :meth:`GenerationClient.generate`. Batches of ``batch_size`` sequences, left-padded. ``temperature``
        0: greedy decoding (one completion a prompt, repeated ``n`` times)."""
        if temperature < 0:
            raise ValueError("temperature must be >= 0 (0: greedy)")
        prompts = self.cut_prompts(prompt_ids, truncate)
        settings = SamplingSettings(n, temperature, top_p, top_k, min_p, repetition_penalty, max_tokens, seed,
                                    tuple(stop) if stop else None)
        with self._lock:
            if temperature == 0:  # the filters do nothing to a greedy choice
                one = self._generate_locked(prompts, replace(settings, n=1, top_p=1.0, top_k=-1, min_p=0.0))
                rep = lambda xs: [x for x in xs for _ in range(n)]  # noqa: E731
                return GenerationResult(one.prompt_ids, rep(one.completion_ids), rep(one.logprobs),
                                        rep(one.finish_reasons))
            return self._generate_locked(prompts, settings)

    def _generate_locked(self, prompts: List[List[int]], settings: SamplingSettings) -> GenerationResult:
        if settings.seed is not None:  # one stream for the batch, seeded by its prompts too: a per-prompt call differs
            torch.manual_seed(derive_seed(settings.seed, [tuple(p) for p in prompts]))
        device = next(self.model.parameters()).device
        autocast = (torch.autocast(device_type=device.type, dtype=self.compute_dtype)
                    if self.compute_dtype != torch.float32 else nullcontext())
        with autocast:
            return self._generate_batches(prompts, settings)

    def _generate_batches(self, prompts: List[List[int]], settings: SamplingSettings) -> GenerationResult:
        per_call = max(1, self.batch_size // settings.n)
        completions: List[List[int]] = []
        logprobs: List[List[float]] = []
        reasons: List[str] = []
        was_training = self.model.training
        self.model.eval()
        try:
            for start in range(0, len(prompts), per_call):
                c, lp, r = self._generate_batch(prompts[start:start + per_call], settings)
                completions += c
                logprobs += lp
                reasons += r
        finally:
            self.model.train(was_training)
        return GenerationResult(prompts, completions, logprobs, reasons)

    def _generate_batch(self, prompts: List[List[int]], s: SamplingSettings):
        device = next(self.model.parameters()).device
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, p in enumerate(prompts):
            input_ids[i, width - len(p):] = torch.tensor(p)
            attention[i, width - len(p):] = 1
        greedy = s.temperature == 0
        # temperature and the filters in vLLM's order (transformers' own warpers apply min-p last), after the
        # repetition penalty as in vLLM; generate's own warpers are switched off
        kwargs = dict(do_sample=not greedy, num_return_sequences=s.n, temperature=None, top_p=None, top_k=None,
                      min_p=None, repetition_penalty=s.repetition_penalty, max_new_tokens=s.max_tokens,
                      output_scores=True,
                      return_dict_in_generate=True, synced_gpus=False, pad_token_id=self.pad_id,
                      eos_token_id=sorted(self.eos_ids))
        if not greedy:
            kwargs["logits_processor"] = LogitsProcessorList([SamplerFilter(s.temperature, s.top_k, s.top_p, s.min_p)])
        if s.stop:
            kwargs.update(stop_strings=list(s.stop), tokenizer=self.tokenizer)
        out = self.model.generate(input_ids=input_ids.to(device), attention_mask=attention.to(device), **kwargs)
        new = out.sequences[:, width:].cpu()
        # (steps, rows, vocab) -> log-prob of the sampled token at each step
        scores = torch.stack(out.scores, dim=0).float().log_softmax(-1)
        token_lp = scores.gather(-1, new.T.unsqueeze(-1).to(scores.device)).squeeze(-1).T.cpu()
        completions, logprobs, reasons = [], [], []
        for row, lps in zip(new.tolist(), token_lp.tolist()):
            length, reason = self._real_length(row, s.stop)
            completions.append(row[:length])
            logprobs.append(lps[:length])
            reasons.append(reason)
        return completions, logprobs, reasons

    def _real_length(self, row: List[int], stop: Optional[Sequence[str]]) -> tuple[int, str]:
        """Length of the sampled part of ``row`` (generate pads finished rows) and why sampling ended."""
        for i, t in enumerate(row):
            if t in self.eos_ids:
                end = i + 1
                break
        else:
            end = len(row)
        if stop:
            def has_stop(k: int) -> bool:
                text = self.tokenizer.decode(row[:k])
                return any(s in text for s in stop)
            if has_stop(end):
                lo, hi = 1, end  # smallest k whose text contains a stop string
                while lo < hi:
                    mid = (lo + hi) // 2
                    lo, hi = (lo, mid) if has_stop(mid) else (mid + 1, hi)
                return lo, "stop"
        if end < len(row) or (row and row[end - 1] in self.eos_ids):
            return end, "stop"
        return end, "length"
