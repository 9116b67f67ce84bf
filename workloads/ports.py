"""A free TCP port on this machine, for a rendezvous (MASTER_PORT) or a local server. Needs no torch.

``TRACEKIT_PORT_RANGE=LO-HI`` (both inclusive) limits the choice to that range: the test suite gives each of its
parallel workers its own range below the kernel's ephemeral ports (tests/conftest.py), so two workers never pick
the same port, nor does the kernel hand one out to a connection meanwhile.
"""

from __future__ import annotations

import os
import random
import socket

RANGE_ENV = "TRACEKIT_PORT_RANGE"


def free_port(host: str = "127.0.0.1") -> int:
    """A port the OS reports free on ``host`` now (another process may still take it before it is bound again)."""
    span = os.environ.get(RANGE_ENV, "").strip()
    if not span:
        with socket.socket() as s:
            s.bind((host, 0))
            return s.getsockname()[1]
    low, high = (int(x) for x in span.split("-"))
    candidates = list(range(low, high + 1))
    random.shuffle(candidates)  # a port a previous test left in TIME_WAIT is unlikely to come up again at once
    for port in candidates:
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    raise OSError(f"no free port in {RANGE_ENV}={span}")
