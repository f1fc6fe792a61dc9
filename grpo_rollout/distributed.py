"""Several training processes on torch.distributed: who this process is, and the few collectives a GRPO step needs.

``torchrun --nproc-per-node N -m grpo_rollout train CONFIG`` starts N processes; each builds a :class:`Dist` from
the environment torchrun sets (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``/``PORT``). Gloo on CPU,
NCCL on GPU. One process (plain ``grpo-rollout train``) is the same code with ``world_size == 1``: every collective
returns at once and no process group is created.

Objects travel with ``all_gather_object`` (pickled); numbers with one ``all_reduce`` on a float64 tensor.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, List, Optional, Sequence

import torch


class RankError(RuntimeError):
    """Raised on every rank when one rank failed (the message names the rank and its error)."""

    def __init__(self, message: str, kind: str = "RuntimeError"):
        super().__init__(message)
        self.kind = kind  # the failing rank's exception type name


@dataclass
class Dist:
    """This process's place among the training processes.

    Attributes:
        rank: 0 … world_size - 1; rank 0 ("main") alone writes files, prints, spawns servers and syncs weights.
        world_size: number of training processes.
        device: where this rank's model lives (``cuda:<LOCAL_RANK>`` when CUDA is there, else CPU).
    """

    rank: int = 0
    world_size: int = 1
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    _owns_group: bool = False

    @property
    def is_main(self) -> bool:
        """True on rank 0."""
        return self.rank == 0

    @classmethod
    def from_env(cls, device: str = "auto", timeout_s: float = 1800.0) -> "Dist":
        """Join the process group torchrun describes in the environment (none for a single process).

        Args:
            device: ``auto`` (CUDA when available, else CPU), ``cpu`` or ``cuda``.
            timeout_s: how long a collective waits for the other ranks before failing.

        Raises:
            ValueError: ``device`` is ``cuda`` but CUDA is not available.
        """
        import torch.distributed as dist

        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        use_cuda = torch.cuda.is_available() if device == "auto" else device == "cuda"
        if use_cuda and not torch.cuda.is_available():
            raise ValueError("training.device is cuda but CUDA is not available here; use auto or cpu")
        dev = torch.device(f"cuda:{local_rank}") if use_cuda else torch.device("cpu")
        if use_cuda:
            torch.cuda.set_device(dev)
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if world <= 1 and not dist.is_initialized():
            return cls(0, 1, dev)
        owns = not dist.is_initialized()
        if owns:
            dist.init_process_group("nccl" if use_cuda else "gloo", timeout=timedelta(seconds=timeout_s))
        return cls(dist.get_rank(), dist.get_world_size(), dev, owns)

    # -- collectives (no-ops for one process) ----------------------------------------------------------------------
    def gather(self, obj: Any) -> List[Any]:
        """Every rank's ``obj``, in rank order, on every rank."""
        if self.world_size == 1:
            return [obj]
        import torch.distributed as dist

        out: List[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank."""
        if self.world_size == 1:
            return obj
        import torch.distributed as dist

        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def _reduce(self, values: Sequence[float], op: str) -> List[float]:
        if self.world_size == 1:
            return [float(v) for v in values]
        import torch.distributed as dist

        t = torch.tensor([float(v) for v in values], dtype=torch.float64,
                         device=self.device if self.device.type == "cuda" else "cpu")
        dist.all_reduce(t, op={"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}[op])
        return t.cpu().tolist()

    def sum(self, values: Sequence[float]) -> List[float]:
        """Element-wise sum over ranks."""
        return self._reduce(values, "sum")

    def max(self, values: Sequence[float]) -> List[float]:
        """Element-wise maximum over ranks."""
        return self._reduce(values, "max")

    def min(self, values: Sequence[float]) -> List[float]:
        """Element-wise minimum over ranks."""
        return self._reduce(values, "min")

    def barrier(self) -> None:
        """Wait for every rank."""
        if self.world_size > 1:
            import torch.distributed as dist

            dist.barrier()

    def agree(self, error: Optional[BaseException]) -> None:
        """A sync point after work that may fail on some ranks only (rollouts, rewards, the weight sync): when any
        rank failed, every rank raises, so none is left waiting in the next collective.

        One process re-raises its own error unchanged. Several raise :class:`RankError` naming the first failed rank,
        its exception type and message (the failing rank chains its own exception as the cause).
        """
        if self.world_size == 1:
            if error is not None:
                raise error
            return
        reports = self.gather(None if error is None else (type(error).__name__, str(error)))
        failed = [(rank, report) for rank, report in enumerate(reports) if report is not None]
        if not failed:
            return
        rank, (kind, message) = failed[0]
        others = f" (and rank(s) {', '.join(str(r) for r, _ in failed[1:])})" if len(failed) > 1 else ""
        raise RankError(f"rank {rank}{others}: {kind}: {message}", kind) from error

    def close(self, wait_for_all: bool = False) -> None:
        """Leave the process group (when this object created it).

        ``wait_for_all``: first wait until every rank got here (a barrier; only on a run that finished on every rank:
        after Ctrl-C or an error the others may never come), also in a group the caller created and tears down
        itself. Without it rank 0 could tear the group down, or return and let its caller do so, while another rank's
        last collective (the checkpoint path's broadcast) was still in flight, which aborted a gloo process now and
        then ("terminate called without an active exception", SIGABRT)."""
        import torch.distributed as dist

        if wait_for_all and self.world_size > 1 and dist.is_initialized():
            dist.barrier()
        if self._owns_group:
            if dist.is_initialized():
                dist.destroy_process_group()
            self._owns_group = False
