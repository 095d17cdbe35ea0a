"""The device-free half of the verbs transport: what is exchanged, checked and computed before and
around the hardware, so that it is tested on machines without an RDMA device.

- ``QpInfo``: what one side of an RC connection tells its peer (as perftest sends over its TCP
  socket): LID, GID, QP number, PSN, the rkey/address/size of its receive pool, the pool's depth,
  the port's MTU and link layer. ``QpInfo.parse`` validates what came over the rendezvous.
- ``plan_pool``: the receive pool, sized once from the largest message of the run.
- ``sge_plan``: how a message's buffer list is posted (inline, one SGE per buffer, or packed).
The data path's protocol (credits, adverts, direct placement) is ``_verbs_protocol``.
- ``Conn``: the connection's states; using a link that is not ready fails with its state named.
- ``port_problem``: the port checks (state, link layer, LID, GID) as one-line messages.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from enum import Enum

from commbench.core.errors import PeerError, UsageError
from commbench.transports._verbs_protocol import MAILBOX, MAX_IMM_LEN, SPARE_RECVS

GID_RE = re.compile(r"^[0-9a-f]{4}(:[0-9a-f]{4}){7}$")
ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"
LINK_LAYERS = {0: "unspecified", 1: "InfiniBand", 2: "Ethernet (RoCE)"}  # IBV_LINK_LAYER_*
PORT_STATES = {0: "NOP", 1: "DOWN", 2: "INIT", 3: "ARMED", 4: "ACTIVE", 5: "ACTIVE_DEFER"}  # IBV_PORT_*
MTU_BYTES = {1: 256, 2: 512, 3: 1024, 4: 2048, 5: 4096}  # IBV_MTU_*
OPS = ("send", "write")
SLOT_ALIGN = 64


@dataclass(frozen=True)
class QpInfo:
    """One side's connection data, exchanged as JSON through the run's (token-checked) rendezvous."""

    rank: int
    lid: int
    gid: str
    qpn: int
    psn: int
    rkey: int
    addr: int
    slot: int  # bytes per receive slot
    depth: int  # data slots (the credits the peer starts with)
    mtu: int  # IBV_MTU_* of the port
    link_layer: int  # IBV_LINK_LAYER_*
    op: str  # send | write: both sides must use the same
    mailbox: int  # where this side takes the peer's adverts (inside the region of addr/rkey)

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def parse(cls, obj: object, peer: int) -> QpInfo:
        """Validate what a peer published; any defect is a PeerError naming the field."""
        if not isinstance(obj, dict):
            raise PeerError(f"rank {peer} sent no queue-pair info (got {type(obj).__name__})")
        fields = cls.__dataclass_fields__
        missing = [k for k in fields if k not in obj]
        extra = [k for k in obj if k not in fields]
        if missing or extra:
            raise PeerError(f"rank {peer}'s queue-pair info has missing fields {missing} / unknown fields {extra}")
        limits = {"rank": 1 << 31, "lid": 1 << 16, "qpn": 1 << 24, "psn": 1 << 24, "rkey": 1 << 32,
                  "addr": 1 << 64, "slot": 1 << 40, "depth": 1 << 16, "mtu": 6, "link_layer": 3,
                  "mailbox": 1 << 64}
        for key, top in limits.items():
            v = obj[key]
            if type(v) is not int or not 0 <= v < top:
                raise PeerError(f"rank {peer}'s queue-pair info: {key}={v!r} is not an integer in [0, {top})")
        if not isinstance(obj["gid"], str) or not GID_RE.match(obj["gid"]):
            raise PeerError(f"rank {peer}'s queue-pair info: gid={obj['gid']!r} is not a GID "
                            "(8 groups of 4 hex digits)")
        if obj["op"] not in OPS:
            raise PeerError(f"rank {peer}'s queue-pair info: op={obj['op']!r} is not one of {OPS}")
        info = cls(**obj)
        if info.rank != peer:
            raise PeerError(f"queue-pair info published for rank {peer} says it is rank {info.rank}")
        if info.qpn == 0 or info.addr == 0 or info.depth == 0 or info.slot == 0 or info.mtu == 0:
            raise PeerError(f"rank {peer}'s queue-pair info has a zero qpn, address, depth, slot or mtu: {info}")
        if info.mailbox < info.addr:
            raise PeerError(f"rank {peer}'s queue-pair info: its mailbox lies before its receive region: {info}")
        return info

    def check_against(self, local: QpInfo, largest: int) -> None:
        """Can ``local`` talk to this peer? Same op, same link layer, an address for it, room for our messages."""
        if self.op != local.op:
            raise UsageError(f"rank {self.rank} uses --verbs-op {self.op}, this rank {local.op}; "
                             "start every rank with the same command")
        if self.link_layer != local.link_layer:
            raise UsageError(f"rank {self.rank}'s port is {LINK_LAYERS.get(self.link_layer)}, this rank's "
                             f"{LINK_LAYERS.get(local.link_layer)}: RC needs both ends on one fabric "
                             "(--ib-dev, --ib-port)")
        if self.link_layer == 1 and self.lid == 0:
            raise PeerError(f"rank {self.rank}'s InfiniBand port has no LID (is a subnet manager running?)")
        if self.link_layer != 1 and self.gid == ZERO_GID:
            raise PeerError(f"rank {self.rank}'s RoCE port has an empty GID at its --gid-index")
        if self.slot < largest:
            raise PeerError(f"rank {self.rank}'s receive slots hold {self.slot} B but messages of {largest} B "
                            "will be sent; start every rank with the same command")


def path_mtu(a: int, b: int) -> int:
    """The path MTU (IBV_MTU_*) of a connection: the smaller of the two ports' active MTUs."""
    return min(a, b)


@dataclass(frozen=True)
class PoolPlan:
    slot: int
    depth: int
    op: str

    @property
    def recvs(self) -> int:
        """Receive work requests kept posted: data slots plus the spares for credit messages."""
        return self.depth + SPARE_RECVS

    @property
    def mailbox(self) -> int:
        """Offset of the mailbox (the peer's latest advert) in the region: after everything else."""
        return self.recvs * self.slot if self.op == "send" else self.depth * self.slot + self.recvs * SLOT_ALIGN

    @property
    def region(self) -> int:
        """Bytes registered for receiving on one link. With send, every posted receive (credit
        messages too) lands in a slot; with write, data goes to depth slots and receives need no data
        space, but credit messages (4-byte SENDs) land in a small area after the slots. Then the mailbox."""
        return self.mailbox + MAILBOX


def round_up(n: int, to: int) -> int:
    return -(-n // to) * to


def plan_pool(largest: int, op: str, pool_bytes: int, max_depth: int = 64,
              max_mr_size: int = 1 << 62, max_qp_wr: int = 1 << 14) -> PoolPlan:
    """Receive slots sized to the largest message of the run; as many as fit in ``pool_bytes``
    (at least 2, so that one is consumed while the next arrives; at most ``max_depth``)."""
    if largest > MAX_IMM_LEN:
        raise UsageError(f"messages of {largest} B are beyond the verbs transport's 1 GiB - 1 limit; use smaller -m")
    slot = max(SLOT_ALIGN, round_up(largest, SLOT_ALIGN))
    depth = max(2, min(max_depth, pool_bytes // slot, max_qp_wr - SPARE_RECVS))
    plan = PoolPlan(slot, depth, op)
    if plan.region > max_mr_size:
        raise UsageError(f"a receive pool of {plan.region} B exceeds the device's largest memory region "
                         f"({max_mr_size} B); use smaller -m")
    return plan


def sge_plan(sizes: tuple[int, ...], max_sge: int, max_inline: int) -> str:
    """How a message is posted: 'inline' (copied into the work request, small), 'sge' (one
    scatter/gather entry per non-empty buffer, zero-copy) or 'pack' (copied into one registered
    staging slot, when there are more buffers than the device's max_sge, or no data at all)."""
    nbytes = sum(sizes)
    nonempty = sum(1 for s in sizes if s)
    if nbytes == 0:
        return "pack"
    if nbytes <= max_inline and nonempty <= max_sge:
        return "inline"
    return "sge" if nonempty <= max_sge else "pack"


class Conn(Enum):
    """The states of one link, in order. ``ready`` means RTS, receives posted, and every peer RTS."""

    CREATED = "created"  # QP created (INIT), receives posted, local info known
    EXCHANGED = "exchanged"  # peer's info received and validated
    RTS = "rts"  # QP moved through RTR to RTS
    READY = "ready"  # all ranks passed the post-RTS barrier: sending is safe
    ERROR = "error"  # a completion failed; the link is unusable
    CLOSED = "closed"


NEXT = {Conn.CREATED: {Conn.EXCHANGED}, Conn.EXCHANGED: {Conn.RTS}, Conn.RTS: {Conn.READY},
        Conn.READY: {Conn.READY}}


class ConnState:
    def __init__(self, name: str) -> None:
        self.name = name
        self.state = Conn.CREATED
        self.why = ""

    def advance(self, to: Conn) -> None:
        if to in (Conn.ERROR, Conn.CLOSED):
            self.state = to
            return
        if to not in NEXT.get(self.state, set()):
            raise PeerError(f"verbs link to {self.name}: cannot go from {self.state.value} to {to.value}")
        self.state = to

    def fail(self, why: str) -> PeerError:
        self.state, self.why = Conn.ERROR, why
        return PeerError(f"verbs link to {self.name}: {why}")

    def require_ready(self) -> None:
        if self.state is not Conn.READY:
            extra = f" ({self.why})" if self.why else ""
            raise PeerError(f"verbs link to {self.name} is {self.state.value}{extra}, not ready")


def port_problem(dev: str, port: int, state: int, link_layer: int, lid: int, gid: str | None) -> str | None:
    """What makes a port unusable for RC traffic, as a one-line message with the fix; None if fine."""
    where = f"port {port} of {dev}"
    if state != 4:
        return (f"{where} is {PORT_STATES.get(state, state)}, not ACTIVE: check the cable/switch "
                "(`ibstat`), or choose another with --ib-dev/--ib-port")
    if link_layer == 1 and lid == 0:
        return f"{where} is InfiniBand but has no LID: start a subnet manager (opensm) on the fabric"
    if link_layer != 1 and (gid is None or gid == ZERO_GID):
        return (f"{where} is {LINK_LAYERS.get(link_layer, link_layer)} and its GID at --gid-index is empty: "
                "choose a populated index (`commbench devices` lists GIDs; RoCE v2 is often 1 or 3)")
    return None
