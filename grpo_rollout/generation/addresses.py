"""Is a server on this machine? (Decides the weight transfer, and whether unguarded routes are exposed.)"""

from __future__ import annotations

from .server.exposure import is_loopback_host


def is_local_url(url: str) -> bool:
    """True when ``url``'s host is this machine (loopback, or one of its own names/addresses)."""
    import socket
    from urllib.parse import urlsplit

    host = urlsplit(url).hostname or ""
    if is_loopback_host(host):
        return True
    try:
        own = {socket.gethostname(), socket.getfqdn()}
        own |= {info[4][0] for name in list(own) for info in socket.getaddrinfo(name, None)}
        return host in own or any(info[4][0] in own for info in socket.getaddrinfo(host, None))
    except OSError:
        return False
