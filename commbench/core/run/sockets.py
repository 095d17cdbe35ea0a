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


def root_listener(bind: str | None, port: int) -> tuple[socket.socket, list[str]]:
    """Rank 0's rendezvous under a launcher that names no hosts (mpirun): on ``bind``, or on every
    interface, and the addresses to try in order (loopback last: any of several hosts may be the way in)."""
    import psutil

    listener = bind_listener(bind or "0.0.0.0", port, "rendezvous")
    addrs = [bind] if bind else sorted(
        (a.address for alist in psutil.net_if_addrs().values() for a in alist if a.family == socket.AF_INET),
        key=lambda a: a.startswith("127."))
    return listener, addrs
