"""Addresses for socket transports: which local address to listen on and tell peers about."""

from __future__ import annotations

import argparse
import socket

from commbench.core.errors import UsageError
from commbench.core.world import World


def interface_address(name: str) -> str:
    import psutil

    addrs = psutil.net_if_addrs()
    if name not in addrs:
        raise UsageError(f"no network interface {name!r}; interfaces here: {', '.join(sorted(addrs))}")
    for a in addrs[name]:
        if a.family == socket.AF_INET:
            return a.address
    raise UsageError(f"interface {name!r} has no IPv4 address; give one with 'ip addr add' or choose another --iface")


def check_socket_args(args: argparse.Namespace) -> None:
    """Checked once by the launcher, before any rank starts, so the user sees one line."""
    if getattr(args, "iface", None):
        interface_address(args.iface)


def local_endpoint(args: argparse.Namespace, world: World) -> str:
    """--iface wins, then --bind, else the address this rank used to reach the rendezvous."""
    if getattr(args, "iface", None):
        return interface_address(args.iface)
    if getattr(args, "bind", None):
        return args.bind
    return world.store.local_address


def data_port(args: argparse.Namespace, world: World) -> int:
    """With --port P the rendezvous is P and rank r (of the whole run, also in a group of its ranks)
    listens on P + 1 + r; else ports are picked free."""
    return args.port + 1 + world.members[world.rank] if args.port else 0
