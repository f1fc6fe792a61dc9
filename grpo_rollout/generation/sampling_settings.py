"""The sampling settings of a request, one type from the config (``sampling.*``) to the client's request.

The trainer makes them from the config for each step (:meth:`SamplingSettings.from_config`), hands them to the rollout
under the rollout contract's names (:meth:`SamplingSettings.rollout_kwargs`; a caller outside the trainer, such as a
test, reads such keywords back with :meth:`SamplingSettings.from_rollout_kwargs`), and the built-in multi-turn
rollouts send each turn's request with them
(:meth:`SamplingSettings.request_kwargs`: the keywords of :meth:`~.base.GenerationClient.generate`, which are the
fields of the server's ``/generate/`` body).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Dict, Mapping, Optional, Tuple

from ..config.schema import SamplingConfig
from .seeds import derive_seed

#: the config's defaults (``sampling.*``), which are the settings' own
_D = SamplingConfig()


@dataclass(frozen=True)
class SamplingSettings:
    """How to sample the completions of one request.

    Attributes:
        n: completions per prompt (the group size, ``sampling.num_generations``, for a training step; 1 by default,
            as one request of a multi-turn episode).
        temperature, top_p, top_k, min_p, repetition_penalty: vLLM's sampling parameters (``top_k`` -1: off).
        max_tokens: tokens per completion at most (``sampling.max_completion_length`` for a whole completion; a
            multi-turn rollout sets each turn's from what is left of it).
        seed: the request's seed (``None``: unseeded); see :meth:`request_seed` for one per sample and turn.
        stop: stop strings (the text up to and including one is returned), or ``None``.
    """

    n: int = 1
    temperature: float = _D.temperature
    top_p: float = _D.top_p
    top_k: int = _D.top_k
    min_p: float = _D.min_p
    repetition_penalty: float = _D.repetition_penalty
    max_tokens: int = _D.max_completion_length
    seed: Optional[int] = _D.seed
    stop: Optional[Tuple[str, ...]] = None

    @classmethod
    def from_config(cls, sampling: SamplingConfig, step: int = 0) -> "SamplingSettings":
        """A training step's settings: ``sampling.*``, the seed (when set) advanced by the 0-based ``step`` so that no
        two steps sample alike."""
        return cls(n=sampling.num_generations, temperature=sampling.temperature, top_p=sampling.top_p,
                   top_k=sampling.top_k, min_p=sampling.min_p, repetition_penalty=sampling.repetition_penalty,
                   max_tokens=sampling.max_completion_length,
                   seed=None if sampling.seed is None else sampling.seed + step)

    @classmethod
    def from_rollout_kwargs(cls, kwargs: Mapping[str, Any], **changes: Any) -> "SamplingSettings":
        """The settings a rollout function was called with (the contract's names: ``max_completion_length`` for
        ``max_tokens``; missing ones take the config's defaults), with ``changes`` applied."""
        default = cls.from_config(_D)
        given = {("max_tokens" if k == "max_completion_length" else k): v for k, v in kwargs.items()}
        fields = {k: given.get(k, getattr(default, k)) for k in asdict(default)}
        fields.update(changes)
        fields["stop"] = tuple(fields["stop"]) if fields["stop"] else None
        return cls(**fields)

    def rollout_kwargs(self) -> Dict[str, Any]:
        """The settings as a rollout function receives them (the rollout contract's names: ``n``, ``temperature``,
        ``top_p``, ``top_k``, ``min_p``, ``repetition_penalty``, ``max_completion_length``, ``seed``)."""
        return {"n": self.n, "temperature": self.temperature, "top_p": self.top_p, "top_k": self.top_k,
                "min_p": self.min_p, "repetition_penalty": self.repetition_penalty,
                "max_completion_length": self.max_tokens, "seed": self.seed}

    def request_kwargs(self, **changes: Any) -> Dict[str, Any]:
        """The keywords of :meth:`~.base.GenerationClient.generate` (the ``/generate/`` body's sampling fields),
        with ``changes`` applied (a turn's ``max_tokens`` and ``seed``)."""
        settings = replace(self, **changes)
        out = {f.name: getattr(settings, f.name) for f in fields(SamplingSettings)}  # a subclass's own fields: not sent
        out["stop"] = list(out["stop"]) if out["stop"] else None
        return out

    def request_seed(self, *parts: object) -> Optional[int]:
        """A distinct, reproducible seed for one request of this sampling (``None`` when unseeded), for example per
        sample, turn and continuation: samples of a group that share a prompt must not share a seed, or they would
        be identical."""
        return None if self.seed is None else derive_seed(self.seed, *parts)
