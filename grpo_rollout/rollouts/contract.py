"""The rollout contract: what a rollout function is called with and what it must return.

A rollout function is called once per training step::

    rollout(prompts, *, n, temperature, top_p, top_k, min_p, repetition_penalty, max_completion_length, seed,
            **rollout_kwargs, [client], [tokenizer], [rows], [step], [base_dir]) -> dict

- ``prompts``: the step's P **unique** prompts, as they are in the dataset (strings, or lists of chat messages).
- the sampling settings of the config's ``sampling`` section as keyword arguments (``n`` = ``num_generations``), plus
  everything in ``rollout.kwargs``.
- context objects, passed only to functions that name them as parameters: ``client`` (the generation backend, see
  :class:`grpo_rollout.generation.GenerationClient`), ``tokenizer``, ``rows`` (the P dataset rows, dicts), ``step``,
  ``base_dir`` (the config file's folder, a string: where relative file paths in ``rollout.kwargs`` are looked up),
  ``env_timeout_s`` (``rollout.env_timeout_s``: seconds each environment call of an episode may take).
  A function written as ``def rollout(prompts, **sampling_kwargs)`` receives the sampling settings only.

It returns a dict with:

- ``completion_ids``: P × n token-id lists, grouped by prompt, in prompt order (completion ``i`` belongs to prompt
  ``i // n``).
- ``prompt_ids``: P token-id lists (one per prompt) or P × n (one per completion).
- ``logprobs``: P × n lists with one float per completion token (the sampler's log-probabilities), or ``None``: the
  trainer then computes them with the policy before the update.
- ``completion_mask`` (optional): P × n lists of 0/1 per completion token; 1 = sampled by the model and trained on,
  0 = inserted by a tool or environment (no loss; its ``logprobs`` entry is a placeholder, ``-inf`` allowed, that
  never enters any arithmetic). A trained token's log-prob must be finite.
- ``weight_versions`` (optional): P × n (or P) entries, each ``[oldest, newest]`` (or one int) weight version that
  sampled the completion (a :class:`~grpo_rollout.generation.base.GenerationResult`'s ``weight_version`` and
  ``weight_version_end``), or ``None``. Without it: a ``/generate/`` answer's own ``weight_version`` and
  ``weight_version_end`` when the rollout returns that answer as it is, else the versions of the answers the
  ``client`` the call was handed returned; a rollout that generates in another process returns it.
- ``segments`` (optional): P × n entries, each ``None`` or the episode's earlier sequences (a context edit made the
  episode several sequences; :mod:`.segments`): trained with the completion's advantage, unseen by rewards.
- any other key: a list with one value per completion (P × n) or per prompt (P, repeated n times), or a scalar; these
  "extras" reach every reward function as keyword arguments.

:func:`check_rollout_output` turns the dict into a :class:`RolloutOutput` and raises :class:`RolloutError` naming the
key, the sample index and the sizes when anything is off.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ..config.fields import aliases
from ..config.schema import RolloutConfig, SamplingConfig, default_of
from .segments import SEGMENTS_KEY, Segment, check_segments
from .token_checks import RolloutError, as_list, check_trained_logprobs, int_lists, per_token

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase
    from ..generation.base import GenerationClient

#: Sampling settings every rollout receives as keyword arguments, mapped to their ``sampling.*`` key.
SAMPLING_ARGS: Dict[str, str] = {"n": "num_generations", **{k: k for k in (
    "temperature", "top_p", "top_k", "min_p", "repetition_penalty", "max_completion_length", "seed")}}
#: The sampling settings' defaults, the config's own (``sampling.*``): what a built-in rollout called without the
#: trainer (a test, a notebook) samples with.
SAMPLING_DEFAULTS = SamplingConfig()
#: Names under which a sampling setting may appear in rollout/reward kwargs (each key's own and its aliases in the
#: schema), mapped to the ``sampling.*`` key.
SAMPLING_ALIASES: Dict[str, str] = aliases(SamplingConfig)



@dataclass(frozen=True)
class RolloutContext:
    """What the trainer hands a rollout besides its prompts, sampling settings and ``rollout.kwargs``; each field is
    passed, under its own name, only to a rollout function that names it (or takes ``**kwargs``).

    Attributes:
        client: the generation client (its own view of it, which records the weight version of each answer).
        tokenizer: the model's tokenizer (its chat template).
        rows: the ``P`` dataset rows of the step's prompts, all columns (``None``: not known, a rollout called
            outside the trainer).
        step: the training step being sampled for (0-based: the step whose update these completions feed).
        base_dir: the config's folder (relative names in ``rollout.kwargs`` are also looked up there).
        env_timeout_s: seconds an environment call may take (``rollout.env_timeout_s``; ``None``: no limit).
    """

    client: Optional[GenerationClient] = None
    tokenizer: Optional[PreTrainedTokenizerBase] = None
    rows: Optional[Sequence[Mapping[str, Any]]] = None
    step: int = 0
    base_dir: Optional[str] = None
    env_timeout_s: Optional[float] = default_of(RolloutConfig, "env_timeout_s")

    def named_by(self, names: Sequence[str]) -> Dict[str, Any]:
        """The fields whose names are in ``names`` (a function's parameters), by name."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name in names}


#: Objects passed only to rollout functions that name them: the fields of :class:`RolloutContext`.
CONTEXT_ARGS = tuple(f.name for f in fields(RolloutContext))
#: Keys of the returned dict that are not extras.
CORE_KEYS = ("prompt_ids", "completion_ids", "logprobs", "completion_mask", "weight_versions", SEGMENTS_KEY)
#: ``(oldest, newest)`` weight version that sampled a completion (``None``: not known).
Versions = Optional[Tuple[int, int]]


class EpisodeFailure(RolloutError):
    """An episode failed for a reason outside the model and the user's code: an MCP server or an environment server
    gone, a sandbox crashed, the server answering an environment's request with an error. Raise it from a rollout or
    an environment of your own for such failures: with ``rollout.on_error: retry`` the failed groups are played again,
    with ``drop`` they are left out of the step (never scored 0 into a group's baseline); ``stop`` (the default) stops
    the run. A model's bad tool call is not one: the model is answered ``Error: ...`` and plays on."""


@dataclass
class RolloutOutput:
    """A checked rollout result, always per completion (``N = P × n`` rows, grouped by prompt).

    Attributes:
        prompt_ids: ``N`` lists of prompt token ids.
        completion_ids: ``N`` lists of completion token ids.
        logprobs: ``N`` lists of floats (same lengths as ``completion_ids``) or ``None``.
        completion_mask: ``N`` lists of 0/1 (same lengths as ``completion_ids``); 1 = trained on.
        extras: name → list of ``N`` values.
        num_prompts: ``P``; num_generations: ``n``.
        weight_version: the oldest weight version any of its completions was sampled with (``None``: not known,
            e.g. the transformers client, which samples from the trainer's own weights). Set by the trainer.
        weight_versions: ``N`` ``(oldest, newest)`` versions (or ``None`` each) as the rollout returned them, or
            ``None`` when it returned none; the trainer fills them in from the answers its client view recorded.
        segments: ``N`` lists of each episode's earlier sequences (:mod:`.segments`; a context edit), or ``None``.
    """

    prompt_ids: List[List[int]]
    completion_ids: List[List[int]]
    logprobs: Optional[List[List[float]]]
    completion_mask: List[List[int]]
    extras: Dict[str, List[Any]] = field(default_factory=dict)
    num_prompts: int = 0
    num_generations: int = 0
    weight_version: Optional[int] = None
    weight_versions: Optional[List[Versions]] = None
    segments: Optional[List[List[Segment]]] = None

    def __len__(self) -> int:
        return len(self.completion_ids)

    def trained_tokens(self) -> List[int]:
        """Per completion, its tokens trained on (``completion_mask`` 1), its episode's earlier sequences' too."""
        segments = self.segments or [[]] * len(self)
        return [sum(m) + sum(sum(seg.completion_mask) for seg in segs) for m, segs in zip(self.completion_mask, segments)]

    def select_groups(self, groups: Sequence[int]) -> "RolloutOutput":
        """The completions of the given groups (prompt indices), in that order."""
        n = self.num_generations
        rows = [g * n + j for g in groups for j in range(n)]
        return RolloutOutput([self.prompt_ids[i] for i in rows], [self.completion_ids[i] for i in rows],
                             None if self.logprobs is None else [self.logprobs[i] for i in rows],
                             [self.completion_mask[i] for i in rows],
                             {k: [v[i] for i in rows] for k, v in self.extras.items()}, len(groups), n,
                             self.weight_version,
                             None if self.weight_versions is None else [self.weight_versions[i] for i in rows],
                             None if self.segments is None else [self.segments[i] for i in rows])

    @staticmethod
    def concat(parts: Sequence["RolloutOutput"]) -> "RolloutOutput":
        """One output holding the groups of ``parts`` in order (an extra missing from a part is ``None`` there;
        sampler log-probs are kept only when every part has them)."""
        keys = list(dict.fromkeys(k for part in parts for k in part.extras))
        with_logprobs = all(part.logprobs is not None for part in parts)
        return RolloutOutput([x for p in parts for x in p.prompt_ids], [x for p in parts for x in p.completion_ids],
                             [x for p in parts for x in p.logprobs] if with_logprobs else None,
                             [x for p in parts for x in p.completion_mask],
                             {k: [x for p in parts for x in p.extras.get(k, [None] * len(p))] for k in keys},
                             sum(p.num_prompts for p in parts), parts[0].num_generations if parts else 0,
                             min((p.weight_version for p in parts if p.weight_version is not None), default=None),
                             None if all(p.weight_versions is None for p in parts) else
                             [v for p in parts for v in p.weight_versions or [None] * len(p)],
                             None if all(p.segments is None for p in parts) else
                             [v for p in parts for v in p.segments or [[]] * len(p)])


def _versions(result: Mapping[str, Any], num_prompts: int, num_generations: int) -> Optional[List[Versions]]:
    """The ``weight_versions`` key as ``N`` ``(oldest, newest)`` pairs or ``None`` each; without it, a server's
    ``/generate/`` answer returned as it is gives its ``weight_version`` and ``weight_version_end`` to every
    completion; ``None`` when there are neither."""
    value, total = as_list(result.get("weight_versions")), num_prompts * num_generations
    if value is None:
        start, end = result.get("weight_version"), result.get("weight_version_end")
        if not isinstance(start, numbers.Integral) or isinstance(start, bool):
            return None
        value = [[start, end if isinstance(end, numbers.Integral) and end >= start else start]] * total
    if not isinstance(value, (list, tuple)) or len(value) not in (total, num_prompts):
        got = len(value) if isinstance(value, (list, tuple)) else type(value).__name__
        raise RolloutError(f"`weight_versions` must have one entry per completion ({total}) or per prompt "
                           f"({num_prompts}), got {got}")
    out: List[Versions] = []
    for i, entry in enumerate(as_list(v) for v in value):
        pair = [entry, entry] if isinstance(entry, numbers.Integral) else entry
        if pair is not None and (not isinstance(pair, (list, tuple)) or len(pair) != 2 or any(
                isinstance(x, bool) or not isinstance(x, numbers.Integral) or x < 0 for x in pair) or pair[0] > pair[1]):
            raise RolloutError(f"`weight_versions[{i}]` = {entry!r}; each entry is [oldest, newest] weight version "
                               "(ints >= 0, oldest first: a GenerationResult's weight_version and weight_version_end), "
                               "one int, or None")
        out.append(None if pair is None else (int(pair[0]), int(pair[1])))
    return out if len(out) == total else [out[i // num_generations] for i in range(total)]


def check_rollout_output(result: Any, num_prompts: int, num_generations: int,
                         vocab_size: Optional[int] = None) -> RolloutOutput:
    """Check a rollout's return value against the contract and normalise it to one row per completion.

    Args:
        result: what the rollout function returned.
        num_prompts: ``P``, the number of unique prompts it was given.
        num_generations: ``n``.
        vocab_size: when given, every token id must be below it.

    Raises:
        RolloutError: naming the key, the sample index and the sizes of the first violation.
    """
    total = num_prompts * num_generations
    if not isinstance(result, Mapping):
        raise RolloutError(f"the rollout returned {type(result).__name__}; it must return a dict with "
                           "`prompt_ids`, `completion_ids` and `logprobs`")
    for key in ("prompt_ids", "completion_ids"):
        if key not in result:
            raise RolloutError(f"the rollout's result has no `{key}` (keys: {sorted(result)})")
    completion_ids = int_lists("completion_ids", result["completion_ids"], (total,), vocab_size, allow_empty=True)
    prompt_ids = int_lists("prompt_ids", result["prompt_ids"], sorted({num_prompts, total}), vocab_size,
                            allow_empty=False)
    if len(prompt_ids) == num_prompts and num_prompts != total:
        prompt_ids = [prompt_ids[i // num_generations] for i in range(total)]
    logprobs = result.get("logprobs")
    logprobs = None if logprobs is None else per_token("logprobs", logprobs, completion_ids, float)
    mask = result.get("completion_mask")
    mask = [[1] * len(c) for c in completion_ids] if mask is None else per_token("completion_mask", mask,
                                                                                  completion_ids, int)
    check_trained_logprobs("logprobs", logprobs or [], mask)
    extras = {}
    for key, value in result.items():
        if key in CORE_KEYS:
            continue
        value = as_list(value)
        if isinstance(value, (list, tuple)):
            if len(value) == total:
                extras[key] = list(value)
            elif len(value) == num_prompts:
                extras[key] = [value[i // num_generations] for i in range(total)]
            else:
                raise RolloutError(f"extra `{key}` has {len(value)} values; expected {total} (one per completion) "
                                   f"or {num_prompts} (one per prompt), or a single scalar")
        else:
            extras[key] = [value] * total
    return RolloutOutput(prompt_ids, completion_ids, logprobs, mask, extras, num_prompts, num_generations,
                         weight_versions=_versions(result, num_prompts, num_generations),
                         segments=check_segments(result.get(SEGMENTS_KEY), total, vocab_size, logprobs is not None))
