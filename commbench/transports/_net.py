"""Addresses for socket transports: which local address to listen on and tell peers about."""

from __future__ import annotations

import socket
from dataclasses import dataclass

from commbench.core.config.options import Options, opt
from commbench.core.errors import UsageError
from commbench.core.run.world import World

SLACK = 64 << 10  # bytes a gRPC call may carry beyond the run's largest message: its number, protobuf's framing


def grpc_receive_limit(largest: int) -> int:
    """The largest gRPC message a rank takes in a run whose largest message is ``largest`` bytes: gRPC
    itself refuses a larger call (RESOURCE_EXHAUSTED), so no caller can make a rank hold more."""
    return min(largest + SLACK, (1 << 31) - 1)


def interface_address(name: str) -> str:
    import psutil

    addrs = psutil.net_if_addrs()
    if name not in addrs:
        raise UsageError(f"no network interface {name!r}; interfaces here: {', '.join(sorted(addrs))}")
    for a in addrs[name]:
        if a.family == socket.AF_INET:
            return a.address
    raise UsageError(f"interface {name!r} has no IPv4 address; give one with 'ip addr add' or choose another --iface")


@dataclass(frozen=True)
class SocketOptions(Options):
    """Where socket transports (tcp, grpc, grpc-cpp, ipoib) listen."""

    title = "socket transports (tcp, grpc, grpc-cpp, ipoib)"
    bind: str | None = opt(None, metavar="ADDR", help="local address to listen on and advertise to peers")
    iface: str | None = opt(None, metavar="NAME", help="use this network interface's IPv4 address")


@dataclass(frozen=True)
class GrpcCallOptions(SocketOptions):
    title = "grpc transports (grpc, grpc-cpp)"
    grpc_call: str = opt("stream", choices=("unary", "stream"),
                         help="one RPC per message, or messages on long-lived streams (default stream, the faster)")


@dataclass(frozen=True)
class GrpcOptions(GrpcCallOptions):
    grpc_mode: str = opt("raw", choices=("raw", "proto"),
                         help="raw: non-serialized bytes (generic handlers); proto: serialized protobuf (default raw)")


def check_socket_options(opts: SocketOptions) -> None:
    """Checked once by the launcher, before any rank starts, so the user sees one line."""
    if opts.iface:
        interface_address(opts.iface)
    if opts.bind:  # checked here, once, rather than by every rank as it listens
        try:
            family = socket.AF_INET6 if ":" in opts.bind else socket.AF_INET
            with socket.socket(family, socket.SOCK_STREAM) as s:
                s.bind((opts.bind, 0))
        except (OSError, UnicodeError, TypeError, ValueError) as exc:  # TypeError: a name that is not text
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise UsageError(f"--bind {opts.bind}: cannot listen there ({why}); give an address of this machine "
                             "(ip -brief addr) or leave --bind out") from None


def local_endpoint(opts: SocketOptions, world: World) -> str:
    """--iface wins, then --bind, else the address this rank used to reach the rendezvous."""
    if opts.iface:
        return interface_address(opts.iface)
    if opts.bind:
        return opts.bind
    return world.store.local_address


def data_port(port: int, world: World) -> int:
    """With --port P the rendezvous is P and rank r (of the whole run, also in a group of its ranks)
    listens on P + 1 + r; else ports are picked free."""
    return port + 1 + world.members[world.rank] if port else 0
