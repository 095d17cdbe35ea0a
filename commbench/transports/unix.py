"""AF_UNIX stream sockets between ranks on one host: the kernel's local floor beside tcp over loopback
(no TCP/IP stack, no checksums or segments; the same framing, eager copy and vectored I/O as tcp).

Each rank listens on a random abstract socket name (Linux: no file, gone with the socket; listed in
/proc/net/unix, so the name holds nothing secret), told to its peers through the rendezvous, and
peers prove the run token to its gate as tcp's do. Abstract names belong to a network namespace,
so every rank must run on one host (not across ``--hosts``).
"""

from __future__ import annotations

import secrets
import socket

from commbench.core.config.options import NoOptions
from commbench.core.errors import Unavailable, UsageError
from commbench.transports.tcp import Address, StreamTransport, TcpTransport


class UnixTransport(StreamTransport[NoOptions]):
    name = "unix"
    help = "AF_UNIX stream sockets between ranks on one host (the local floor beside tcp loopback)"
    Options = NoOptions
    capabilities = TcpTransport.capabilities - {"many-hosts"}  # (under srun across nodes: listen says so)

    @classmethod
    def check_usable(cls, opts: NoOptions) -> None:
        if not hasattr(socket, "AF_UNIX"):
            raise Unavailable("this system has no AF_UNIX sockets")

    def listen(self) -> tuple[socket.socket, Address]:
        world = self.world
        hosts = sorted(set(world.hosts))
        if len(hosts) > 1:
            raise UsageError(f"the unix transport connects ranks on one host; this run's ranks are on {len(hosts)} "
                             f"({', '.join(hosts[:4])}{', ...' if len(hosts) > 4 else ''}): use -t tcp")
        name = f"\0commbench-{world.members[world.rank]}-{secrets.token_hex(8)}"
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(name)
        listener.listen(socket.SOMAXCONN)
        return listener, name

    def open(self, addr: Address, timeout: float) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(str(addr))  # the name listen gave
        except OSError:
            sock.close()
            raise
        return sock
