"""A free TCP port on this machine, for a rendezvous (MASTER_PORT) or a local server. Needs no torch."""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A port the OS reports free on ``host`` now (another process may still take it before it is bound again)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]
