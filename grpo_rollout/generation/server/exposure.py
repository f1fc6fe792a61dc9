"""Checks of how a vLLM server from this config is exposed (``grpo-rollout serve`` binds ``vllm.host``).

``vllm.weight_transfer: nccl`` starts vLLM with ``VLLM_SERVER_DEV_MODE=1``: its weight-transfer control routes and
dev routes (``/collective_rpc``, ``/pause``, ``/sleep``, ...) then answer anyone who reaches the port, and vLLM's
``--api-key`` does not guard them (0.32 checks the key only under ``/v1``, ``/v2``, ``/inference``, ``/cohere``).
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
    """``vllm.weight_transfer: nccl`` with ``vllm.host`` beyond loopback: an error without ``vllm.api_key``; with
    one, a warning that vLLM's dev routes stay unguarded by it."""
    v = config.vllm
    if v.weight_transfer != "nccl" or is_loopback_host(v.host):
        return
    if not v.api_key:
        problems.append(Problem("vllm.api_key", v.api_key, dev_mode_exposure(v.weight_transfer, v.host, v.api_key),
                                "set vllm.host: 127.0.0.1 (the trainer on the same machine), or set vllm.api_key and "
                                "keep the port on a network only the trainer reaches"))
    else:
        problems.append(Problem("vllm.host", v.host, "weight_transfer nccl turns on vLLM's dev mode; its routes "
                                "(/collective_rpc, /pause, ...) are not guarded by vllm.api_key (vLLM checks the key "
                                "only under /v1)", "keep the port on a network only the trainer reaches (a firewall "
                                "or a private interface), or use vllm.host: 127.0.0.1", severity="warning"))
