"""``free_port``: a TCP port nobody listens on now, for a server this process starts (env
servers, llama.cpp, the trainer's rendezvous). Left out: reserving it (another process may
take it before the server binds; the servers that use it fail clearly if so)."""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A port free on ``host`` now ("" : on every interface, for peers on other machines)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]
