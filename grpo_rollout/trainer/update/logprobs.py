"""Completion tokens laid out for the trainer's forward passes (packing, micro-batches), and their
log-probabilities under a model, computed only where they are needed.

The decoder runs once over ``prompt + completion``; the output projection (vocabulary-sized) and the log-softmax are
applied only to the hidden states that predict completion tokens, ``chunk_size`` positions at a time, so the batch
never holds a ``(B, T, vocab)`` tensor (32 × 128 × 49152 fp32 would be 0.8 GB).

:func:`build_micro_batches` turns a checked rollout's sequences, masks and sampler log-probs and the advantages into
:class:`MicroBatch` objects, right-padded or padding-free (:func:`pack`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Sequence

import torch

from ...generation.sampling_filter import filter_logits, filtering


@dataclass
class PackedBatch:
    """Sequences laid out for one forward pass: ``B`` sequences in ``R`` rows of width ``T``.

    Right-padded (``R == B``, one sequence per row, ``attention_mask`` set), or padding-free (several sequences share
    a row, ``position_ids`` restart at 0 for each, ``attention_mask`` is ``None``: transformers then builds a
    block-diagonal causal mask from the position ids, so no sequence sees another).

    Attributes:
        input_ids: ``(R, T)`` prompt followed by completion, sequence after sequence, then padding.
        attention_mask: ``(R, T)`` 1 on real tokens (right-padded layout), or ``None``.
        position_ids: ``(R, T)`` position of each token within its own sequence (padding-free layout), or ``None``.
        row: ``(B,)`` the row holding each sequence.
        completion_start: ``(B,)`` index, within its row, of each sequence's first completion token.
        completion_ids: ``(B, C)`` completion tokens, right-padded with 0.
        completion_valid: ``(B, C)`` 1 where ``completion_ids`` holds a real token.
        num_tokens: real (prompt + completion) tokens in the batch; ``input_ids.numel()`` counts the padding too.
        completion_cols: ``(B, C)`` the column whose hidden state predicts each completion token, where it is not
            ``completion_start - 1 + j`` (``training.shared_prefix``: ``attention_mask`` is then ``(R, 1, T, T)``
            bool, :mod:`.shared_prefix`), or ``None``.
    """

    input_ids: torch.Tensor
    attention_mask: Optional[torch.Tensor]
    position_ids: Optional[torch.Tensor]
    row: torch.Tensor
    completion_start: torch.Tensor
    completion_ids: torch.Tensor
    completion_valid: torch.Tensor
    num_tokens: int
    completion_cols: Optional[torch.Tensor] = None


def pack(prompt_ids: Sequence[Sequence[int]], completion_ids: Sequence[Sequence[int]], pad_id: int,
         padding_free: bool = False) -> PackedBatch:
    """Lay out ``B`` (prompt, completion) pairs for one forward pass (see :class:`PackedBatch`).

    ``padding_free``: rows as wide as the longest sequence, filled first-fit in order of decreasing length (the
    first-fit-decreasing bin packing heuristic), so short sequences share a row instead of being padded to the longest
    (on SmolLM2-135M, 32 sequences of 40-100 tokens: 2,700 instead of 3,200 positions, forward+backward 0.8x the time).
    """
    seqs = [list(p) + list(c) for p, c in zip(prompt_ids, completion_ids)]
    b = len(seqs)
    width = max(len(q) for q in seqs)
    row = torch.arange(b)
    offset = [0] * b
    fill: List[int] = []  # padding-free: tokens used in each row
    if padding_free:
        for i in sorted(range(b), key=lambda i: -len(seqs[i])):
            r = next((r for r, used in enumerate(fill) if used + len(seqs[i]) <= width), len(fill))
            if r == len(fill):
                fill.append(0)
            row[i], offset[i] = r, fill[r]
            fill[r] += len(seqs[i])
    rows = int(row.max()) + 1 if b else 0
    input_ids = torch.full((rows, width), pad_id, dtype=torch.long)
    attention = torch.zeros((rows, width), dtype=torch.long)
    c_width = max(1, max(len(c) for c in completion_ids))
    comp = torch.zeros((b, c_width), dtype=torch.long)
    valid = torch.zeros((b, c_width), dtype=torch.long)
    start = torch.zeros(b, dtype=torch.long)
    for i, (p, c) in enumerate(zip(prompt_ids, completion_ids)):
        r, o = int(row[i]), offset[i]
        input_ids[r, o: o + len(seqs[i])] = torch.tensor(seqs[i], dtype=torch.long)
        attention[r, o: o + len(seqs[i])] = 1
        start[i] = o + len(p)
        if c:
            comp[i, : len(c)] = torch.tensor(list(c), dtype=torch.long)
            valid[i, : len(c)] = 1
    positions = None
    if padding_free:  # positions restart at 0 for every sequence, and for the padding that ends a row
        positions = torch.zeros((rows, width), dtype=torch.long)
        for i, q in enumerate(seqs):
            positions[int(row[i]), offset[i]: offset[i] + len(q)] = torch.arange(len(q))
        for r, used in enumerate(fill):
            positions[r, used:] = torch.arange(width - used)
    return PackedBatch(input_ids, None if padding_free else attention, positions, row, start, comp, valid,
                       sum(len(q) for q in seqs))


def packing_isolates(model: torch.nn.Module) -> bool:
    """Whether ``model`` keeps sequences that share a row apart when given ``position_ids`` and no attention mask
    (transformers' decoders build a block-diagonal mask from them; a model that does not would let a sequence attend
    to the one before it).

    Runs two rows ``[a, b]`` and ``[a', b]`` (``a``, ``a'`` different, same length) once without gradients: with the
    block-diagonal mask ``b``'s hidden states are the same in both rows, without it they differ.

    Raises:
        TypeError: the model has no separate decoder / output projection.
    """
    decoder, _ = _decoder_and_head(model)
    device = next(model.parameters()).device
    vocab = model.get_input_embeddings().num_embeddings
    gen = torch.Generator().manual_seed(0)
    a = torch.randint(0, vocab, (2, 5), generator=gen)
    b = torch.randint(0, vocab, (1, 6), generator=gen).expand(2, 6)
    ids = torch.cat([a, b], dim=1).to(device)
    positions = torch.cat([torch.arange(5), torch.arange(6)]).expand(2, 11).to(device)
    try:
        with torch.no_grad():
            hidden = decoder(input_ids=ids, position_ids=positions, use_cache=False).last_hidden_state[:, 5:].float()
    except (TypeError, ValueError):  # a decoder without position_ids
        return False
    scale = hidden.abs().max().clamp(min=1e-6)
    return bool(((hidden[0] - hidden[1]).abs().max() / scale) < 1e-3)


def _decoder_and_head(model: torch.nn.Module):
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    if head is None or decoder is None:
        raise TypeError(f"{type(model).__name__} does not expose get_decoder()/get_output_embeddings(); "
                        "only causal LMs with a separate output projection are supported")
    return decoder, head


class CompletionLogprobs(torch.nn.Module):
    """A causal LM whose ``forward`` returns completion-token log-probs (see :func:`completion_logprobs`).

    The trainer holds its policy (and reference model) this way so that one module call does the whole pass: FSDP2
    shards this wrapper as its root unit, and its hooks fire only when the root's ``forward`` runs.

    Attributes:
        lm: the wrapped causal LM (``transformers`` ``*ForCausalLM``).
    """

    def __init__(self, lm: torch.nn.Module):
        super().__init__()
        self.lm = lm

    def forward(self, batch: PackedBatch, temperature: float = 1.0, chunk_size: int = 1024, top_k: int = -1,
                top_p: float = 1.0, min_p: float = 0.0, entropy: Optional[str] = None) -> Any:
        """``(B, C)`` log-probs of ``batch``'s completion tokens (0 at padding), and with ``entropy`` their
        distributions' entropies; see :func:`completion_logprobs`."""
        cut = filtering(top_k, top_p, min_p)
        decoder, head = _decoder_and_head(self.lm)
        device = next(self.lm.parameters()).device

        def on_device(x: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
            return None if x is None else x.to(device)

        mask = on_device(batch.attention_mask)
        if mask is not None and mask.dim() == 4 and decoder.config._attn_implementation == "eager":
            mask = torch.zeros(mask.shape, device=device).masked_fill(~mask, torch.finfo(torch.float32).min)
        hidden = decoder(input_ids=batch.input_ids.to(device), attention_mask=mask,
                         position_ids=on_device(batch.position_ids), use_cache=False).last_hidden_state
        b, c = batch.completion_ids.shape
        # hidden state at position (start + j - 1) of the sequence's row predicts completion token j
        positions = batch.completion_start.unsqueeze(1) - 1 + torch.arange(c).unsqueeze(0)
        if batch.completion_cols is not None:  # a shared prefix: the layout says where
            positions = batch.completion_cols
        positions = positions.clamp(max=hidden.shape[1] - 1)
        valid = batch.completion_valid.bool()
        rows = batch.row.unsqueeze(1).expand(b, c)[valid]
        cols = positions[valid]
        targets = batch.completion_ids[valid].to(device)
        flat: List[torch.Tensor] = []
        flat_entropy: List[torch.Tensor] = []
        for s in range(0, rows.numel(), chunk_size):
            h = hidden[rows[s:s + chunk_size].to(device), cols[s:s + chunk_size].to(device)]
            logits = head(h).float() / temperature
            chunk_targets = targets[s:s + chunk_size]
            if cut:
                logits = filter_logits(logits, chunk_targets, top_k, top_p, min_p)
            log_probs = logits.log_softmax(-1)
            flat.append(log_probs.gather(-1, chunk_targets.unsqueeze(-1)).squeeze(-1))
            if entropy == "train":
                flat_entropy.append(token_entropy(log_probs))
            elif entropy:
                with torch.no_grad():
                    flat_entropy.append(token_entropy(log_probs.detach(), differentiable=False))
        where = torch.nonzero(valid)

        def scattered(values: List[torch.Tensor]) -> torch.Tensor:
            out = torch.zeros((b, c), dtype=torch.float32, device=device)
            if values:
                out = out.index_put((where[:, 0].to(device), where[:, 1].to(device)), torch.cat(values))
            return out

        return (scattered(flat), scattered(flat_entropy)) if entropy else scattered(flat)


def completion_logprobs(model: torch.nn.Module, batch: PackedBatch, temperature: float = 1.0,
                        chunk_size: int = 1024, top_k: int = -1, top_p: float = 1.0,
                        min_p: float = 0.0, entropy: Optional[str] = None) -> Any:
    """Log-probabilities of each completion token, ``(B, C)`` (0 at padding), differentiable w.r.t. the model.

    With ``entropy`` (``"measure"``: without gradient; ``"train"``: differentiable, for an entropy bonus) it returns
    ``(logprobs, entropy)``, both ``(B, C)``: ``entropy`` is the entropy in nats of the distribution each completion
    token was drawn from, ``H = -Σ_v p_v log p_v`` (the same temperature and filtering; a filtered-out token has
    ``p = 0`` and adds 0), computed chunk by chunk from the same logits, so no ``(B, C, vocab)`` tensor exists either
    (``"train"`` keeps one ``(chunk_size, vocab)`` float32 tensor more per chunk for the backward pass).

    Logits are divided by ``temperature`` and filtered like the sampler filtered them (``min_p``, ``top_k``,
    ``top_p``, in vLLM's order; see :func:`~grpo_rollout.generation.sampling_filter.filter_logits`) before the
    log-softmax, so the values describe the distribution the sampler drew from and are comparable with its
    log-probs. Positions are processed ``chunk_size`` at a time through the output projection. ``model`` is a causal
    LM or a :class:`CompletionLogprobs` around one.

    Raises:
        TypeError: the model has no separate decoder / output projection.
    """
    wrapped = model if isinstance(model, CompletionLogprobs) else CompletionLogprobs(model)
    return wrapped(batch, temperature, chunk_size, top_k, top_p, min_p, entropy)


def token_entropy(log_probs: torch.Tensor, differentiable: bool = True) -> torch.Tensor:
    """``(rows,)`` entropies (nats) of ``(rows, vocab)`` log-probabilities; ``-inf`` entries (filtered-out tokens, or a
    model's own masked vocabulary) add exactly 0, in value and (``differentiable``) gradient. Without a gradient their
    ``0 · -inf = nan`` terms are skipped by ``nansum``, two passes over the vocabulary fewer."""
    if not differentiable:
        return -(log_probs.exp() * log_probs).nansum(-1)
    finite = log_probs.masked_fill(~torch.isfinite(log_probs), 0.0)
    return -(log_probs.exp() * finite).sum(-1)


# --- micro-batches ----------------------------------------------------------------------------------------------------

@dataclass
class MicroBatch:
    """One forward/backward pass worth of sequences (``B`` rows, ``C`` = longest completion).

    Attributes:
        packed: token layout (:class:`~.logprobs.PackedBatch`).
        mask: ``(B, C)`` float, 1 on trained tokens.
        advantages: ``(B,)``, or ``(B, C)`` per token (``training.credit: turn``).
        sampler_logprobs: ``(B, C)`` the sampler's log-probs (nats; placeholders where ``mask`` is 0), or ``None``.
        old_logprobs: ``(B, C)`` the policy's before the first update (only with ``num_iterations > 1``).
        ref_logprobs: ``(B, C)`` the reference model's (only with ``beta > 0``).
        sampler_weights: ``(B, C)`` sampler-correction weights, added on the first iteration (a new micro-batch,
            :meth:`~..policy_update.PolicyUpdate.backward`).
    """

    packed: PackedBatch
    mask: torch.Tensor
    advantages: torch.Tensor
    sampler_logprobs: Optional[torch.Tensor] = None
    old_logprobs: Optional[torch.Tensor] = None
    ref_logprobs: Optional[torch.Tensor] = None
    sampler_weights: Optional[torch.Tensor] = None


def build_micro_batches(prompt_ids: Sequence[Sequence[int]], completion_ids: Sequence[Sequence[int]],
                        masks: Sequence[Sequence[int]], logprobs: Optional[Sequence[Sequence[float]]],
                        advantages: torch.Tensor, size: int, pad_id: int, device: torch.device,
                        padding_free: bool = False, layout: Optional[Callable] = None) -> List[MicroBatch]:
    """Split ``N`` sequences into micro-batches of ``size`` (in order) on ``device``, right-padded or padding-free
    (see :func:`~.logprobs.pack`), or as ``layout(prompt_ids, completion_ids, pad_id) -> PackedBatch`` lays them out
    (:func:`~.shared_prefix.pack_shared`: each shared prefix once).

    Args:
        prompt_ids, completion_ids, masks: ``N`` lists each (masks: 0/1 per completion token).
        logprobs: ``N`` lists of sampler log-probs, or ``None``. advantages: ``(N,)``, or ``N`` lists of per-token
            advantages (``training.credit: turn``): each micro-batch's are then ``(B, C)``.
    """
    batches = []
    for start in range(0, len(completion_ids), size):
        idx = range(start, min(start + size, len(completion_ids)))
        p, c = [prompt_ids[i] for i in idx], [completion_ids[i] for i in idx]
        packed = layout(p, c, pad_id) if layout else pack(p, c, pad_id, padding_free)
        mask = torch.zeros_like(packed.completion_valid, dtype=torch.float32)
        sampler = torch.zeros_like(mask) if logprobs is not None else None
        for row, i in enumerate(idx):
            mask[row, : len(masks[i])] = torch.tensor(masks[i], dtype=torch.float32)
            if sampler is not None:
                sampler[row, : len(logprobs[i])] = torch.tensor(logprobs[i], dtype=torch.float32)
        if isinstance(advantages, torch.Tensor):
            adv = advantages[list(idx)]
        else:  # per token: (B, C), 0 at padding
            adv = torch.zeros_like(mask)
            for row, i in enumerate(idx):
                adv[row, : len(advantages[i])] = torch.tensor(advantages[i], dtype=torch.float32)
        batches.append(MicroBatch(packed, mask.to(device), adv.to(device),
                                  None if sampler is None else sampler.to(device)))
    return batches
