"""Checks of how a vLLM server from this config is exposed (``grpo-rollout serve`` binds ``vllm.host``).

``vllm.weight_transfer: nccl`` starts vLLM with ``VLLM_SERVER_DEV_MODE=1``: its weight-transfer control routes and
dev routes (``/collective_rpc``, ``/pause``, ``/sleep``, ...) run code on the server and replace its weights. vLLM's
own ``--api-key`` does not guard them (0.32 checks it only under ``/v1``, ``/v2``, ``/inference``, ``/cohere``);
grpo-rollout's :class:`.access.AccessGuard` does (every route but ``/health``), and without a key refuses them unless
the server is on a trusted network. Dev mode beyond loopback still needs a key: "trusted network" is not enough
for routes that run code.
"""

from __future__ import annotations

from typing import List, Optional

from ...config.problems import Problem


def is_loopback_host(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (``127.0.0.0/8``, ``::1``): nothing beyond this machine can
    connect to a server bound there."""
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def dev_mode_exposure(weight_transfer: str, host: str, api_key: Optional[str]) -> Optional[str]:
    """Why a server with these settings may not start (``None``: it may): vLLM's dev mode (``nccl``) on a host
    beyond loopback with no API key at all."""
    if weight_transfer != "nccl" or is_loopback_host(host) or api_key:
        return None
    return (f"weight_transfer nccl turns on vLLM's dev mode, whose routes (/collective_rpc, /pause, ...) can run code "
            f"on the server and replace its weights, and host {host} lets other machines reach them with no API key")


def check_server_exposure(config, problems: List[Problem]) -> None:
    """``vllm.weight_transfer: nccl`` with ``vllm.host`` beyond loopback and no ``vllm.api_key``: an error.
    ``vllm.trusted_network: true`` with ``vllm.api_key``: a warning (it does nothing then)."""
    v = config.vllm
    if v.trusted_network and v.api_key:
        problems.append(Problem("vllm.trusted_network", True, "does nothing with vllm.api_key: every route but "
                                "/health needs the key; it opens the weight routes of a server served without one",
                                "remove vllm.trusted_network (or vllm.api_key)", severity="warning"))
    if v.weight_transfer == "nccl" and not is_loopback_host(v.host) and not v.api_key:
        problems.append(Problem("vllm.api_key", v.api_key, dev_mode_exposure(v.weight_transfer, v.host, v.api_key),
                                "set vllm.host: 127.0.0.1 (the trainer on the same machine), or set vllm.api_key and "
                                "keep the port on a network only the trainer reaches"))
