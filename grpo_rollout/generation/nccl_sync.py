"""``vllm.weight_transfer: nccl``: weights go from the trainer's GPU to every server's GPUs by an NCCL broadcast, with
vLLM's own RLHF weight-transfer engine (vLLM >= 0.12: ``NCCLTrainerWeightTransferEngine`` on the trainer, servers
started with ``--weight-transfer-config '{"backend": "nccl"}'``, which spawn mode adds). Nothing is written to disk.

One engine per server, each its own NCCL group (trainer rank 0 + that server's workers) on its own port. Every
training rank calls :meth:`NcclWeightSync.send` (with FSDP the parameters are gathered layer by layer, a collective);
rank 0 alone broadcasts and drives the servers, then records the new version with ``POST /set_weight_version/`` (which
also resets the prefix cache).

CUDA only: vLLM's NCCL transfer is GPU to GPU. Not exercised on the CPU machines this project is tested on; see
docs/scaling.md for the GPU check.
"""

from __future__ import annotations

import socket
from typing import Any, List, Optional, Sequence

import httpx

from .vllm_client import ServerError, is_local_url


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


class _KeyedWeightSyncClient:
    """vLLM's weight-sync control routes over HTTP (``/init_weight_transfer_engine``, ``/start_weight_update``,
    ``/update_weights``, ``/finish_weight_update``, ``/shutdown_weight_transfer_engine``), as vLLM's
    ``HTTPVLLMWeightSyncClient`` calls them, but through ``http`` (which sends the API key: these routes need it, or
    a trusted network, on a grpo-rollout server; vLLM's own client sends no key)."""

    def __init__(self, url: str, http: httpx.Client):
        self.url, self._http = url.rstrip("/"), http

    def _post(self, path: str, body: Optional[dict] = None) -> None:
        try:
            self._http.post(f"{self.url}/{path}", json=body).raise_for_status()
        except httpx.HTTPError as exc:
            raise ServerError(f"the vLLM server at {self.url} failed POST /{path}: {exc}") from exc

    def init_weight_transfer_engine(self, init_info: dict) -> None:
        self._post("init_weight_transfer_engine", {"init_info": init_info})

    def shutdown_weight_transfer_engine(self) -> None:
        self._post("shutdown_weight_transfer_engine")

    def start_weight_update(self) -> None:
        self._post("start_weight_update")

    def update_weights(self, update_info: Any) -> None:
        self._post("update_weights", {"update_info": update_info})

    def finish_weight_update(self, weight_version: Optional[str] = None) -> None:
        self._post("finish_weight_update", None if weight_version is None else {"weight_version": weight_version})


class NcclWeightSync:
    """Trainer side of the NCCL weight transfer to ``urls``.

    Args:
        urls: the servers (started with the NCCL weight-transfer config).
        lm: the trainer's causal LM (its parameters, sharded or not, are the source).
        rank: this training process's rank (0 sends). master_address: an address of this machine the servers can
            reach (default: loopback when every server is local, else this host's address).

    Raises:
        ServerError: a server cannot be reached or refuses the handshake.
    """

    def __init__(self, urls: Sequence[str], lm: Any, rank: int = 0, master_address: Optional[str] = None,
                 api_key: Optional[str] = None):
        from vllm.distributed.weight_transfer.base import ModuleSource
        from vllm.distributed.weight_transfer.nccl_engine import NCCLTrainerInitInfo, NCCLTrainerWeightTransferEngine

        self.urls, self.rank = list(urls), rank
        self._http = httpx.Client(timeout=600, headers={"Authorization": f"Bearer {api_key}"} if api_key else {})
        address = master_address or ("127.0.0.1" if all(is_local_url(u) for u in urls)
                                     else socket.gethostbyname(socket.gethostname()))
        self.engines: List[Any] = []
        for url in self.urls:
            workers, port = 0, 0
            if rank == 0:
                workers = int(self._get(url, "/get_world_size")["world_size"])
                port = _free_port()
            info = NCCLTrainerInitInfo(master_address=address, master_port=port, world_size=1 + workers, rank=rank)
            self.engines.append(NCCLTrainerWeightTransferEngine.trainer_init(
                info, client=_KeyedWeightSyncClient(url, self._http), source=ModuleSource(lm)))
        self.weight_version = 0

    def _get(self, url: str, path: str) -> dict:
        try:
            resp = self._http.get(url + path)
            resp.raise_for_status()
            return resp.json()
        except httpx.HTTPError as exc:
            raise ServerError(f"the vLLM server at {url} failed GET {path}: {exc}; start it with "
                              "vllm.weight_transfer: nccl (spawn mode does)") from exc

    def send(self) -> None:
        """Broadcast the current weights to every server (every rank calls this), then have rank 0 record the new
        version on each.

        Raises:
            ServerError: a server refused or did not confirm the version.
        """
        for engine in self.engines:
            engine.send_weights()
        if self.rank != 0:
            return
        version = self.weight_version + 1
        for url in self.urls:
            try:
                data = self._http.post(url + "/set_weight_version/", json={"version": version}).json()
            except (httpx.HTTPError, ValueError) as exc:
                raise ServerError(f"the vLLM server at {url} failed POST /set_weight_version/: {exc}") from exc
            if data.get("weight_version") != version:
                raise ServerError(f"the server at {url} answered weight_version {data.get('weight_version')}, "
                                  f"expected {version}")
        self.weight_version = version

    def close(self) -> None:
        """Tear the NCCL groups down."""
        for engine in self.engines:
            engine.shutdown()
        self._http.close()
