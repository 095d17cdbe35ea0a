"""A network namespace of one run's own (root): its loopback carries the run's traffic and nothing else.

``--traffic`` captures every packet of an interface; on the machine's loopback, anything else that
talks there (another benchmark, a database, iperf3) is read too, and a busy neighbour can make the
kernel drop packets before the capture reads them. The local launcher therefore puts a --traffic run
(its rendezvous socket, every rank, and so the capture rank 0 starts) in a namespace made for it,
with only a loopback, and deletes it when the run ends.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import subprocess
from collections.abc import Iterator

from commbench.core.errors import UsageError

CLONE_NEWNET = 0x40000000


def _ip(*args: str) -> None:
    p = subprocess.run(["ip", *args], capture_output=True, text=True)
    if p.returncode:
        why = (p.stderr.strip().splitlines() or ["no output"])[-1]
        raise UsageError(f"--traffic: cannot make the run's own network namespace (ip {' '.join(args)}: {why}); "
                         "it needs root and iproute2")


@contextlib.contextmanager
def private_loopback() -> Iterator[str]:
    """The name of a fresh namespace with its loopback up, deleted afterwards."""
    name = f"cbrun{os.getpid()}"
    _ip("netns", "add", name)
    try:
        _ip("-n", name, "link", "set", "lo", "up")
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


@contextlib.contextmanager
def entered(name: str) -> Iterator[None]:
    """This thread inside namespace ``name`` (sockets made meanwhile stay there), then back home."""
    libc = ctypes.CDLL(None, use_errno=True)
    with open("/proc/thread-self/ns/net") as home, open(f"/run/netns/{name}") as there:
        if libc.setns(there.fileno(), CLONE_NEWNET):
            raise OSError(ctypes.get_errno(), f"setns into {name}: {os.strerror(ctypes.get_errno())}")
        try:
            yield
        finally:
            libc.setns(home.fileno(), CLONE_NEWNET)
