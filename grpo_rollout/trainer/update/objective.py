"""The GRPO objective, every formula on one page: the per-token clipped loss with its KL term and its four
aggregations, and the weights that correct for the sampler/trainer mismatch (the advantages: :mod:`.advantages`).

**The loss.** Per completion token ``t`` of sequence ``i`` with advantage ``A_i``::

    ratio_it = exp(logp_it - old_logp_it)
    l_it     = -min(ratio_it · A_i, clip(ratio_it, 1 - epsilon, 1 + epsilon_high) · A_i) + beta · KL_it
    KL_it    = exp(ref_it - logp_it) - (ref_it - logp_it) - 1         (the "k3" estimator, Schulman 2020)

minus ``entropy_coef · H_it`` with ``training.entropy_coef > 0`` (``H_it``: the policy's entropy at the token, nats).

(PPO: Schulman et al. 2017; GRPO: Shao et al. 2024, arXiv:2402.03300 eq. 3; clip-higher ``epsilon_high``: DAPO, Yu et
al. 2025, arXiv:2503.14476.) ``importance_level: sequence`` (GSPO, Zheng et al. 2025, arXiv:2507.18071) replaces the
ratio by one per sequence, the geometric mean of its token ratios over its ``n_i`` trained tokens (mean, not sum)::

    s_i      = exp( (1/n_i) · Σ_{t trained} (logp_it - old_logp_it) )
    ratio_it = sg[s_i] · exp(logp_it - sg[logp_it])    (GSPO-token: value s_i, gradient of token t's own log-prob)

clipped as above (flags per sequence, counted per trained token); ``s_i`` is 1 unless the batch is off-policy
(``num_iterations > 1``). GSPO's clip range is far narrower: ``epsilon`` 3e-4, ``epsilon_high`` 4e-4 (v2 §5.1; its GRPO
baseline 0.2 / 0.27). With ``loss_type: grpo`` (and unit ``token_weights``) the loss is GSPO's eq. (5),
``-(1/S) Σ_i min(s_i·A_i, clip(s_i)·A_i)``, in value and gradient; ``dapo``/``bnpo`` weight sequence ``i`` by ``n_i``,
``dr_grpo`` by ``n_i / max_completion_length``. The token losses are then aggregated over a batch of ``S`` sequences:

- ``grpo``: mean over tokens of each sequence, then mean over sequences (the DeepSeekMath formula; favours short
  sequences' tokens).
- ``dr_grpo``: sum over all tokens / (``S`` × ``max_completion_length``), a constant normaliser (Dr. GRPO, Liu et al.
  2025, arXiv:2503.20783).
- ``dapo``: sum over all tokens / number of tokens of the whole batch (DAPO's token-level loss).
- ``bnpo``: sum / number of tokens of each *micro-batch*, averaged over micro-batches (TRL's ``bnpo``: equal to
  ``dapo`` when the batch is one micro-batch).

A training batch is processed as micro-batches with gradient accumulation; :func:`aggregate` takes the totals of the
whole batch (:class:`BatchTotals`) so that the summed micro-batch losses equal the full-batch loss exactly.

**Sampler correction.** The sampler (vLLM) and the trainer compute slightly different probabilities for the same
tokens (kernels, precision, or a stale weight copy), so the batch is slightly off-policy.

Truncated importance sampling (TIS; Yao et al. 2025, "Your Efficient RL Framework Secretly Brings You Off-Policy RL
Training") reweights each token's loss by ``w = π_trainer(token) / π_sampler(token)``, capped at ``cap``; the masked
variant (MIS) drops tokens (or whole sequences) whose ratio exceeds the cap instead. Sequence-level modes use the
product of the token ratios of the sequence (``training.sampler_correction``).

Not the ratio of the clipped surrogate: that one is against the old policy (the trainer's own log-probs before the
step's first update), and ``training.importance_level`` says whether it is per token or per sequence (the loss
above).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, List, NamedTuple, Optional

import torch

from ...config.schema import IMPORTANCE_LEVELS, LOSS_TYPES  # the one list of each
from ...config.schema import SAMPLER_CORRECTIONS as MODES  # the one list of modes (the config's)
from .surrogates import Surrogate, clip_surrogate


# --- the loss ---------------------------------------------------------------------------------------------------------

@dataclass
class BatchTotals:
    """Sizes of the whole training batch that a micro-batch's loss is normalised by.

    Attributes:
        num_sequences: ``S``, sequences in the batch. num_tokens: trained tokens (mask 1) in the batch.
        num_micro_batches: how many micro-batches the batch is split into.
        max_completion_length: the configured ``sampling.max_completion_length`` (for ``dr_grpo``).
    """

    num_sequences: int
    num_tokens: int
    num_micro_batches: int
    max_completion_length: int


class TokenLosses(NamedTuple):
    """What :func:`per_token_loss` computes for every completion token, each ``(B, C)`` (the mask not applied).

    Attributes:
        loss: the token's loss. ratio: its importance ratio (``sequence``: ``s_i`` repeated along the row). kl: its
        KL term's estimate (zeros when ``beta == 0``). clipped_low, clipped_high: bool, where the lower / upper clip
        bound was the active term.
    """

    loss: torch.Tensor
    ratio: torch.Tensor
    kl: torch.Tensor
    clipped_low: torch.Tensor
    clipped_high: torch.Tensor


def per_token_loss(logps: torch.Tensor, old_logps: torch.Tensor, advantages: torch.Tensor, *, epsilon: float,
                   epsilon_high: Optional[float] = None, beta: float = 0.0,
                   ref_logps: Optional[torch.Tensor] = None,
                   token_weights: Optional[torch.Tensor] = None, importance_level: str = "token",
                   mask: Optional[torch.Tensor] = None, entropy: Optional[torch.Tensor] = None,
                   entropy_coef: float = 0.0, surrogate: Optional[Callable[..., Surrogate]] = None) -> "TokenLosses":
    """Clipped-surrogate (+ KL) loss of every completion token (formulas: the module docstring).

    Args:
        logps: ``(B, C)`` current policy log-probs of the completion tokens (with grad).
        old_logps: ``(B, C)`` log-probs of the policy that generated the batch (no grad).
        advantages: ``(B,)`` one advantage per sequence.
        epsilon, epsilon_high: lower/upper clip range (``epsilon_high=None`` → ``epsilon``).
        beta: KL coefficient; with ``beta > 0`` ``ref_logps`` ``(B, C)`` is required.
        token_weights: optional ``(B, C)`` multiplier of the surrogate (e.g. the sampler/trainer importance-sampling
            correction); it applies per token at both importance levels.
        importance_level: ``token`` (PPO/GRPO: one ratio per token) or ``sequence`` (GSPO: ``s_i`` on every token of
            sequence ``i``, with each token's own gradient).
        mask: ``(B, C)`` 1 on trained tokens; required by ``sequence``, whose mean runs over them alone (other
            positions never enter the arithmetic: they may hold ``±inf``/``nan`` placeholders).
        surrogate: the policy term instead of PPO's clip (``epsilon`` then unused): called as
            ``surrogate(ratio, logps, old_logps, advantages, mask)``, returning a :class:`~.surrogates.Surrogate`
            (:func:`~.surrogates.policy_term` makes it from the config: CISPO, SAPO, a user's function).
        entropy, entropy_coef: ``(B, C)`` each token's policy entropy (nats, with grad) and the bonus's weight: the
            loss is ``l_it - entropy_coef · H_it`` (an entropy bonus, as in PPO: Schulman et al. 2017, eq. 9).

    Returns:
        :class:`TokenLosses`, every field ``(B, C)``.

    Raises:
        ValueError: ``beta > 0`` without ``ref_logps``; unknown ``importance_level``; ``sequence`` without ``mask``;
            ``entropy_coef`` without ``entropy``.
    """
    if importance_level == "token":
        ratio = torch.exp(logps - old_logps)
    elif importance_level == "sequence":
        if mask is None:
            raise ValueError("importance_level 'sequence' needs the mask of trained tokens")
        trained = mask.bool()
        zeros = torch.zeros_like(logps)
        # where, not a product: a placeholder (inf/nan) times 0 is nan, and would reach the mean or the gradient
        log_ratio = torch.where(trained, logps.detach() - old_logps, zeros)
        seq_log_ratio = log_ratio.sum(dim=1, keepdim=True) / trained.sum(dim=1, keepdim=True).clamp(min=1)
        own = torch.where(trained, logps, zeros)
        ratio = torch.exp(seq_log_ratio + own - own.detach())  # value s_i; d ratio_it / d logp_it = s_i
    else:
        raise ValueError(f"importance_level must be one of {', '.join(IMPORTANCE_LEVELS)}, got {importance_level!r}")
    term = clip_surrogate(ratio, advantages, epsilon, epsilon_high) if surrogate is None else \
        surrogate(ratio, logps, old_logps, advantages, torch.ones_like(logps) if mask is None else mask)
    loss = term.loss
    if token_weights is not None:
        loss = loss * token_weights
    if beta > 0:
        if ref_logps is None:
            raise ValueError("beta > 0 needs ref_logps")
        delta = ref_logps - logps
        kl = torch.exp(delta) - delta - 1
        loss = loss + beta * kl
    else:
        kl = torch.zeros_like(logps)
    if entropy_coef:
        if entropy is None:
            raise ValueError("entropy_coef > 0 needs the tokens' entropy")
        loss = loss - entropy_coef * entropy
    return TokenLosses(loss=loss, ratio=ratio, kl=kl, clipped_low=term.clipped_low, clipped_high=term.clipped_high)


def gradient_without_advantages(training: "object") -> List[str]:
    """The terms of the loss a ``training`` config section asks for that can have a gradient when every advantage
    is 0 (their config keys; empty: a step whose trained tokens all have advantage 0 has no gradient at all).

    Every policy term is a product with ``A``, so at ``A = 0`` its value and gradient are 0 for every ratio: PPO's
    clip (``grpo``, ``dr_grpo``, ``dapo``, ``bnpo``, also GSPO's ``importance_level: sequence``), CISPO (``-sg(ŵ)·A``)
    and SAPO (``-f_τ(r)·A``), and the sampler-correction weights multiply it. Not so the KL term (``beta > 0``), the
    entropy bonus (``entropy_coef > 0``), and a function of yours (``loss_function``: it may not vanish).
    """
    terms = [("training.beta", training.beta > 0), ("training.entropy_coef", training.entropy_coef > 0),
             ("training.loss_function", bool(training.loss_function))]
    return [key for key, on in terms if on]


#: the loss types whose policy term is not PPO's clip, averaged like one that is: CISPO over the batch's tokens (its
#: eq. 4 divides by the step's Σ|o_i|), SAPO per sequence then over sequences (GRPO's form, as its paper writes it)
AGGREGATED_AS = {"cispo": "dapo", "sapo": "grpo"}


def aggregate(token_loss: torch.Tensor, mask: torch.Tensor, loss_type: str, totals: BatchTotals) -> torch.Tensor:
    """This micro-batch's share of the batch loss (a scalar); summing it over all micro-batches gives the loss of
    the whole batch as defined by ``loss_type`` (see the module docstring).

    Args:
        token_loss: ``(B, C)`` from :func:`per_token_loss`. mask: ``(B, C)`` 1 for trained tokens, 0 otherwise.
        loss_type: ``grpo``, ``dr_grpo``, ``dapo`` or ``bnpo`` (``cispo``, ``sapo``: :data:`AGGREGATED_AS`).
        totals: sizes of the whole batch.

    Raises:
        ValueError: unknown ``loss_type``.
    """
    mask = mask.to(token_loss.dtype)
    masked = torch.where(mask.bool(), token_loss, torch.zeros_like(token_loss))  # placeholders never reach the sum
    loss_type = AGGREGATED_AS.get(loss_type, loss_type)
    if loss_type == "grpo":
        per_seq = masked.sum(dim=1) / mask.sum(dim=1).clamp(min=1)
        return per_seq.sum() / totals.num_sequences
    if loss_type == "dr_grpo":
        return masked.sum() / (totals.num_sequences * totals.max_completion_length)
    if loss_type == "dapo":
        return masked.sum() / max(totals.num_tokens, 1)
    if loss_type == "bnpo":
        return masked.sum() / mask.sum().clamp(min=1) / totals.num_micro_batches
    raise ValueError(f"loss_type must be one of {', '.join(LOSS_TYPES)}, got {loss_type!r}")


# --- sampler correction -----------------------------------------------------------------------------------------------

def importance_weights(trainer_logps: torch.Tensor, sampler_logps: torch.Tensor, mask: torch.Tensor, mode: str,
                       cap: float) -> torch.Tensor:
    """Per-token loss weights ``(B, C)``.

    Args:
        trainer_logps, sampler_logps: ``(B, C)`` log-probs of the same tokens (nats), trainer's without grad.
        mask: ``(B, C)`` 1 on trained tokens; other positions never enter the arithmetic (their log-probs may be
            placeholders, even ``-inf``) and get weight 1.
        mode: one of :data:`MODES`. cap: upper bound (> 0) of the ratio.

    Raises:
        ValueError: unknown mode.
    """
    if mode == "none":
        return torch.ones_like(trainer_logps)
    # where, not a product: a masked position may hold a -inf placeholder, and (x - -inf) * 0 is NaN
    log_ratio = torch.where(mask.bool(), trainer_logps - sampler_logps, torch.zeros_like(trainer_logps))
    if mode.startswith("sequence"):
        log_ratio = log_ratio.sum(dim=1, keepdim=True).expand_as(trainer_logps)
    ratio = torch.exp(log_ratio.clamp(max=50.0))
    if mode.endswith("truncate"):
        return ratio.clamp(max=cap)
    if mode.endswith("mask"):
        return torch.where(ratio <= cap, ratio, torch.zeros_like(ratio))
    raise ValueError(f"importance-sampling mode must be one of {', '.join(MODES)}, got {mode!r}")
