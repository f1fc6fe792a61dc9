"""The policy as the trainer holds it: a causal LM inside :class:`~..update.logprobs.CompletionLogprobs`, sharded with FSDP2
over several processes, and the full (gathered) weights and optimizer state that checkpoints and weight sync need.

With FSDP2 (``torch.distributed.fsdp.fully_shard``) each decoder layer is its own unit and the wrapper is the root
unit (embeddings, final norm, output head — tied or not). The wrapper's forward is the one entry point, so FSDP's
gather-before-forward and reduce-scatter-after-backward hooks fire on every log-prob pass. With one process nothing
is sharded and these helpers read the module directly.

State-dict formats are the same for 1 and N processes (parameter names, not positions), so a checkpoint saved by one
world size resumes under another.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Dict, Iterator, Optional

import torch

from ...distributed import Dist
from ..update.logprobs import CompletionLogprobs

PREFIX = "lm."  # the LM's parameter names inside the wrapper


def decoder_layers(lm: torch.nn.Module) -> list:
    """The repeated blocks of a causal LM (``lm.get_decoder().layers`` or ``.h``), the natural FSDP units.

    Raises:
        TypeError: no such list found.
    """
    decoder = lm.get_decoder() if hasattr(lm, "get_decoder") else lm
    for name in ("layers", "h", "blocks"):
        blocks = getattr(decoder, name, None)
        if isinstance(blocks, torch.nn.ModuleList) and len(blocks):
            return list(blocks)
    raise TypeError(f"{type(lm).__name__}: cannot find its decoder layers (layers/h/blocks) to shard")


def shard(policy: CompletionLogprobs, dist: Dist, mp_policy: Optional[object] = None) -> CompletionLogprobs:
    """FSDP2-shard ``policy`` in place over the process group (nothing for one process); returns it.

    ``mp_policy``: FSDP2's ``MixedPrecisionPolicy`` (see :meth:`.precision.Precision.fsdp_policy`), or ``None``."""
    if dist.world_size == 1:
        return policy
    from torch.distributed.fsdp import fully_shard

    kwargs = {"mp_policy": mp_policy} if mp_policy is not None else {}
    for layer in decoder_layers(policy.lm):
        fully_shard(layer, **kwargs)
    fully_shard(policy, **kwargs)
    return policy


def initialise_sharding(policy: CompletionLogprobs, pad_id: int) -> None:
    """Run one forward pass of one token through the root unit (a collective: every rank calls it), so FSDP2's lazy
    initialisation sees the root first. Without it, a first ``generate`` that calls the decoder layers directly (the
    in-process generation of ``vllm.mode: off``) makes a layer its own root, and the next log-prob pass fails with
    "FSDP requires running forward through the root module first". A no-op for an unsharded module."""
    from torch.distributed.fsdp import FSDPModule

    from ..update.logprobs import pack

    if isinstance(policy, FSDPModule):
        with torch.no_grad():
            policy(pack([[pad_id]], [[pad_id]], pad_id))
        policy.reshard()  # the root keeps its weights gathered after a forward: the optimizer must see the shards


@contextmanager
def whole_weights(policy: torch.nn.Module) -> Iterator[None]:
    """Hold every FSDP unit's parameters gathered (one all-gather per unit on entry, a collective: every rank enters
    at the same point of the step) and keep them gathered after each forward, so the LM's own ``forward``/``generate``
    (which bypasses the root's forward) runs with no collective at all: ranks may then call it a different number of
    times (their own prompts, multi-turn episodes, refill rounds). Costs one full copy of the weights per rank while
    held, as a vLLM server would. A no-op for an unsharded module.
    """
    from torch.distributed.fsdp import FSDPModule

    if not isinstance(policy, FSDPModule):
        yield
        return
    units = [m for m in policy.modules() if isinstance(m, FSDPModule)]
    layers = [m for m in units if m is not policy]
    for layer in layers:
        layer.set_reshard_after_forward(False, recurse=False)
    for unit in units:
        unit.unshard()
    try:
        yield
    finally:
        for unit in units:
            unit.reshard()
        for layer in layers:
            layer.set_reshard_after_forward(True, recurse=False)


def full_state_dict(policy: CompletionLogprobs, dist: Dist) -> Optional[Dict[str, torch.Tensor]]:
    """The LM's whole weights, named as in ``lm.state_dict()``, on rank 0 (``None`` elsewhere). A collective: every
    rank must call it. One process gets the live tensors (no copy). A LoRA policy (a ``peft.PeftModel``, one process)
    gives the base model's names with the adapters merged in (:func:`~grpo_rollout.models.lora.merged_state_dict`:
    the adapted weights are new tensors), which is what a server of the plain model loads."""
    from ...models.lora import is_peft_model, merged_state_dict

    if is_peft_model(policy.lm):
        if dist.world_size > 1:
            raise NotImplementedError("LoRA with several training processes is not supported (model.lora.r > 0 "
                                      "needs one process)")
        return merged_state_dict(policy.lm)
    if dist.world_size == 1:
        return dict(policy.lm.state_dict())
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    state = get_model_state_dict(policy, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if not dist.is_main:
        return None
    state = {k[len(PREFIX):]: v for k, v in state.items()}
    head, embedding = policy.lm.get_output_embeddings(), policy.lm.get_input_embeddings()
    if head is not None and head.weight is embedding.weight:  # tied: one tensor, as in lm.state_dict()
        tied = [n for n, p in policy.lm.named_parameters(remove_duplicate=False) if p is head.weight]
        for name in tied[1:]:
            state[name] = state[tied[0]]
    return state


def optimizer_state(policy: CompletionLogprobs, optimizer: torch.optim.Optimizer, dist: Dist) -> Optional[Dict]:
    """The optimizer's whole state keyed by parameter name (``{"state": {name: ...}, "param_groups": [...]}``), on
    rank 0 (``None`` elsewhere). A collective."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    state = get_optimizer_state_dict(policy, optimizer,
                                     options=StateDictOptions(full_state_dict=True, cpu_offload=dist.world_size > 1))
    return state if dist.is_main else None


def load_optimizer_state(policy: CompletionLogprobs, optimizer: torch.optim.Optimizer, state: Optional[Dict],
                         dist: Dist) -> None:
    """Put back a state from :func:`optimizer_state` (saved under any world size; only rank 0 needs ``state``). A
    state keyed by position (``optimizer.state_dict()``, as checkpoints of earlier versions hold it) is accepted too.
    """
    name_of = {id(p): name for name, p in policy.named_parameters()}
    names = [name_of[id(p)] for group in optimizer.param_groups for p in group["params"]]
    if state is not None and any(isinstance(key, int) for key in state["state"]):  # by position: give names
        state = {"state": {names[i]: value for i, value in state["state"].items()},
                 "param_groups": [{**group, "params": [names[i] for i in group["params"]]}
                                  for group in state["param_groups"]]}
    if dist.world_size > 1:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

        set_optimizer_state_dict(policy, optimizer, optim_state_dict=state or {},
                                 options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))
        return
    index = {name: i for i, name in enumerate(names)}
    optimizer.load_state_dict({
        "state": {index[name]: value for name, value in state["state"].items()},
        "param_groups": [{**group, "params": [index[name] for name in group["params"]]}
                         for group in state["param_groups"]],
    })
