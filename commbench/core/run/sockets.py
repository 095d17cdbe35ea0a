"""Listening sockets for the rendezvous and the socket transports."""

from __future__ import annotations

import errno
import socket

from commbench.core.errors import UsageError


def bind_listener(host: str, port: int, what: str) -> socket.socket:
    """A listening TCP socket; a port that is taken is the user's to change (exit 2)."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        fix = "choose a free port with --port (or leave it out to pick one)" if exc.errno == errno.EADDRINUSE else \
            "give an address of this machine with --bind or --iface (ip -brief addr)"
        raise UsageError(f"cannot listen for the {what} on {host}:{port}: {exc.strerror}; {fix}") from None
    sock.listen(socket.SOMAXCONN)  # a flood's connections queue here, not in place of a rank's
    return sock
