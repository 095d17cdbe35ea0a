"""IPoIB: the tcp or grpc data path over an InfiniBand network interface's IP address.

An interface is IPoIB when ``/sys/class/net/NAME/type`` is 32 (ARPHRD_INFINIBAND). ``--iface``
chooses one; by default the first found. ``--over tcp|grpc`` picks the data path. The sysfs root
is a parameter so that discovery can be tested against a fake tree.
"""

from __future__ import annotations

import dataclasses
import os
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from commbench.core.config.options import opt
from commbench.core.config.run import RunConfig
from commbench.core.errors import Unavailable, UsageError
from commbench.core.measure.message import Message
from commbench.transports._net import GrpcOptions
from commbench.transports.base import Link, Transport

ARPHRD = {1: "ether", 32: "infiniband", 772: "loopback", 768: "ipip", 776: "sit", 65534: "none"}
INFINIBAND = 32


def sysfs_root() -> str:
    """/sys, or $COMMBENCH_SYSFS (tests point it at a fake tree)."""
    return os.environ.get("COMMBENCH_SYSFS", "/sys")


def interfaces(sysfs: str | Path | None = None) -> dict[str, dict]:
    """Every network interface: link type, state, speed (Mb/s, None if unknown) and MTU, from sysfs."""
    out: dict[str, dict] = {}
    root = Path(sysfs or sysfs_root()) / "class" / "net"
    for d in sorted(root.iterdir()) if root.is_dir() else ():
        def read(name: str, d: Path = d) -> str | None:
            try:
                return (d / name).read_text().strip()
            except OSError:
                return None
        kind = read("type")
        speed = read("speed")
        out[d.name] = {"type": int(kind) if kind and kind.isdigit() else None,
                       "link": ARPHRD.get(int(kind), kind) if kind and kind.isdigit() else kind,
                       "state": read("operstate"), "mtu": int(read("mtu") or 0) or None,
                       "speed_mbps": int(speed) if speed and speed.lstrip("-").isdigit() and int(speed) > 0 else None}
    return out


def ipoib_interfaces(sysfs: str | Path | None = None) -> list[str]:
    return [name for name, info in interfaces(sysfs).items() if info["type"] == INFINIBAND]


def choose(iface: str | None, sysfs: str | Path | None = None) -> str:
    """The IPoIB interface to use, or a one-line error naming what exists."""
    sysfs = sysfs or sysfs_root()
    found = ipoib_interfaces(sysfs)
    if iface:
        if iface not in found:
            raise UsageError(f"{iface!r} is not an IPoIB interface; IPoIB interfaces here: "
                             f"{', '.join(found) or 'none'}")
        return iface
    if not found:
        links = Counter(str(i["link"]) for i in interfaces(sysfs).values())  # counted: hosts may have hundreds
        existing = ", ".join(f"{n} {k}" for k, n in sorted(links.items(), key=lambda kv: (-kv[1], kv[0])))
        raise Unavailable(f"no IPoIB interface found (none with type 32 in {sysfs}/class/net; here: "
                          f"{existing or 'no interfaces'}): on a host with an InfiniBand adapter, load ib_ipoib and "
                          "bring ibN up, or use -t tcp")
    return found[0]


@dataclass(frozen=True)
class IpoibOptions(GrpcOptions):
    over: str = opt("tcp", group="ipoib transport", choices=("tcp", "grpc"), help="data path over IPoIB (default tcp)")


class IpoibTransport(Transport[IpoibOptions]):
    name = "ipoib"
    help = "tcp or grpc over an IPoIB interface (--over tcp|grpc, --iface ib0)"
    Options = IpoibOptions
    presets = (("--over", "tcp"), ("--over", "grpc"))

    @classmethod
    def label(cls, opts: IpoibOptions, poll: str) -> str:
        return f"{cls.name} {opts.over}"

    @classmethod
    def check_usable(cls, opts: IpoibOptions) -> None:
        choose(opts.iface)

    @classmethod
    def inner_class(cls, over: str) -> type[Transport]:
        from commbench.transports.grpcio import GrpcTransport
        from commbench.transports.tcp import TcpTransport

        return GrpcTransport if over == "grpc" else TcpTransport

    @classmethod
    def able(cls, opts: IpoibOptions) -> frozenset[str]:
        return cls.inner_class(opts.over).able(opts)  # --over grpc: grpc's (no busy-poll)

    @classmethod
    def default_poll(cls, opts: IpoibOptions) -> str:
        return cls.inner_class(opts.over).default_poll(opts)

    def __init__(self, world, config: RunConfig) -> None:
        super().__init__(world, config)
        self.iface = choose(self.opts.iface)
        inner = dataclasses.replace(config, net=self.opts.but(iface=self.iface))
        self.inner = self.inner_class(self.opts.over)(world, inner)

    def mode(self) -> str:
        return f"{self.opts.over} over {self.iface}, {self.inner.mode()}"

    def connect(self, peers: Iterable[int]) -> dict[int, Link]:
        return self.inner.connect(peers)

    def progress(self, sends: Sequence[tuple[Link, Message]], recvs: Sequence[tuple[Link, Message]]) -> None:
        self.inner.progress(sends, recvs)

    def complete(self, requests: Sequence) -> None:
        self.inner.complete(requests)

    def barrier(self) -> None:
        self.inner.barrier()

    def close(self) -> None:
        self.inner.close()
