"""The verbs data-path protocol (commbench/transports/_verbs_protocol.py) over a simulated RC fabric, in
interleavings hypothesis draws: two sides send each other messages (small ones by receive slots, large
ones straight into buffers their receiver advertised), and every post, delivery, completion, re-post
of a receive and credit return happens in an order drawn at random, as far as RC allows it (each
direction in order, an RDMA write landing word by word).

What must hold in every interleaving: no message is lost, duplicated, reordered or changed; a direct
write lands only in the buffers advertised for exactly that message, while its receive waits there;
a slot is never written while it holds a message not yet consumed; a message never arrives where no
receive is posted (RNR); and the run always finishes (no deadlock).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from commbench.transports import _verbs_protocol as vq

SLOT = 256  # bytes per receive slot in the simulation
DIRECT_FROM = 64  # scaled down from 32 KiB: messages this large may be placed directly
BUFFERS = 2  # receive buffers each side's application uses in turn (by key)


class Violation(AssertionError):
    pass


def payload(side: int, i: int, n: int) -> bytes:
    return bytes((side * 101 + i * 7 + j) % 251 for j in range(n))


@dataclass
class Side:
    """One rank's end of the link: its protocol, receive pool and posted receives, completion queue,
    application buffers, and what it has to send and expects to receive."""

    n: int
    depth: int
    sends: list[int]  # sizes of the messages this side sends
    layouts: list[int]  # layout id of each of those messages
    expect: list[int]  # sizes of the messages it receives
    buf_layouts: list[int]  # layout id of each of its receive buffers (by key)
    proto: vq.Protocol = None
    region: bytearray = None
    posted: deque = field(default_factory=deque)  # receive indices posted, taken in order
    cq: deque = field(default_factory=deque)  # (receive index, immediate)
    sent: int = 0
    got: list[bytes] = field(default_factory=list)
    current: tuple[int, int] | None = None  # (message number, buffer key) of the receive in progress
    bufs: dict[int, bytearray] = field(default_factory=dict)
    full: set[int] = field(default_factory=set)  # write mode: slot offsets holding an unconsumed message
    unsettled: deque = field(default_factory=deque)  # consumed receives not posted again yet
    kept: int = 0  # data completions the protocol keeps (seen while waiting for credits)
    way: int | None = None  # how it posts (Fabric.post), None: as each step's key says
    paths: set[str] = field(default_factory=set)  # which ways messages went (hypothesis's statistics)
    base: int = 0

    def addr(self, key: int) -> int:
        return self.base + 0x10000 * (key + 1)

    def span(self, key: int, nbytes: int) -> vq.Span:
        return self.addr(key), nbytes, 0, 0x1000 + self.n, self.buf_layouts[key]


class Fabric:
    def __init__(self, a: Side, b: Side, write_op: bool, direct: bool) -> None:
        self.sides, self.write_op = (a, b), write_op
        self.wires = {0: deque(), 1: deque()}  # wire i carries side i's traffic to the other side
        for s, peer in ((a, b), (b, a)):
            s.base = 0x1_0000_0000 * (s.n + 1)
            s.region = bytearray((s.depth + vq.SPARE_RECVS) * SLOT + vq.MAILBOX)
            s.posted.extend(range(s.depth + vq.SPARE_RECVS))
            mailbox = memoryview(s.region)[-vq.MAILBOX:]
            s.proto = vq.Protocol(own_depth=s.depth, own_slot=SLOT, peer_depth=peer.depth, mailbox=mailbox,
                                  write_op=write_op, direct=direct, direct_from=DIRECT_FROM)

    def __repr__(self) -> str:
        a, b = self.sides
        return (f"Fabric({'write' if self.write_op else 'send'}, depths {a.depth}/{b.depth}, "
                f"sends {a.sends}/{b.sends}, layouts {a.layouts}/{b.layouts}, buffers {a.buf_layouts}/{b.buf_layouts})")

    def peer(self, s: Side) -> Side:
        return self.sides[1 - s.n]

    # -- what may happen next ----------------------------------------------------------------------
    def enabled(self) -> list[tuple[str, Side]]:
        out = []
        for s in self.sides:
            if self.wires[s.n]:
                out.append(("deliver", s))
            if s.sent < len(s.sends) and s.proto.has_credit():
                out.append(("post", s))
            if s.sent < len(s.sends) and not s.proto.has_credit() and s.cq:
                out.append(("poll_for_credit", s))
            if s.current is None and len(s.got) < len(s.expect):
                out.append(("begin_recv", s))
            if s.current is not None and (s.kept or s.cq):
                out.append(("complete", s))
            if s.unsettled:
                out.append(("release", s))
        return out

    def done(self) -> bool:
        return all(len(s.got) == len(s.expect) for s in self.sides) and not any(self.wires.values())

    def step(self, what: str, s: Side, key: int = 0) -> None:
        getattr(self, what)(s, key)

    # -- the sides' actions (what verbs.py does with the protocol's answers) -----------------------------
    def post(self, s: Side, key: int) -> None:
        """Post the next message as the general path does (way 0), as ``_poster`` does (1: next_out,
        advert_for, sent) or as ``_window_poster`` does (2: take, by a slot): the side's way, or the
        key's where the side mixes them."""
        i, p = s.sent, s.proto
        key = s.way if s.way is not None else key
        nbytes = s.sends[i]
        span = (s.base + 0x8000, nbytes, 0, 0, s.layouts[i])
        seq = p.next_out()
        if key == 0 or seq < 0:  # data kept: the closures leave the post to the general path
            route = p.send(nbytes, span)
        elif key == 1:
            got = p.advert_for(seq, nbytes, span[4]) if p.may_go_direct(nbytes) else None
            slot = p.slot_of(seq)
            p.sent(seq, got is not None)
            route = vq.Route(seq, slot, got is not None, *(got or (0, 0)))
        else:
            route = vq.Route(seq, p.take(), False)
        s.paths.add(f"post by {('send', 'steps', 'take')[key] if seq >= 0 else 'send (data kept)'}"
                    f"{', direct' if route.direct else ''}")
        item = ("data", route, payload(s.n, i, nbytes), vq.imm_data(nbytes, route.direct), s.layouts[i])
        self.wires[s.n].append(item)
        s.sent += 1

    def begin_recv(self, s: Side, key: int) -> None:
        r, key = len(s.got), key % BUFFERS
        nbytes = s.expect[r]
        s.current = (r, key)
        s.bufs[key] = bytearray(nbytes)
        fields = s.proto.advert(nbytes, key, s.span(key, nbytes))
        if fields is not None:
            advert = bytearray(vq.ADVERT.size)
            vq.pack_advert(advert, *fields)
            for off in range(0, vq.ADVERT.size, 8):  # an RDMA write lands word by word, in order
                self.wires[s.n].append(("mailbox", off, bytes(advert[off:off + 8])))

    def deliver(self, s: Side, key: int) -> None:
        item, dst = self.wires[s.n].popleft(), self.peer(s)
        if item[0] == "mailbox":
            _, off, data = item
            at = len(dst.region) - vq.MAILBOX + off
            dst.region[at:at + 8] = data
            return
        if not dst.posted:
            raise Violation(f"side {dst.n}: a {item[0]} message arrived with no receive posted (RNR)")
        idx = dst.posted.popleft()
        if item[0] == "credit":
            dst.cq.append((idx, item[1]))
            return
        _, route, data, imm, layout = item
        if route.direct:
            keys = [k for k in range(BUFFERS) if dst.addr(k) == route.addr]
            if not keys or dst.current != (route.seq, keys[0]):
                raise Violation(f"message {route.seq} written into buffers at {route.addr:#x}, while side {dst.n} "
                                f"waits for {dst.current} ({len(dst.got)} received)")
            if layout != dst.buf_layouts[keys[0]]:
                raise Violation(f"message {route.seq} written into buffers laid out otherwise")
            dst.bufs[keys[0]][:len(data)] = data
        else:
            off = route.slot * SLOT if self.write_op else idx * SLOT
            if self.write_op:
                if off in dst.full:
                    raise Violation(f"message {route.seq} overwrote slot {route.slot} before it was consumed")
                dst.full.add(off)
            dst.region[off:off + len(data)] = data
        dst.cq.append((idx, imm))

    def _grant_or_data(self, s: Side) -> tuple[int, int, bool] | None:
        idx, imm = s.cq.popleft()
        credit, value, direct = vq.parse_imm(imm)
        if credit:
            s.posted.append(idx)  # a credit message's receive is posted again at once
            s.proto.granted(value)
            return None
        return idx, value, direct

    def poll_for_credit(self, s: Side, key: int) -> None:
        got = self._grant_or_data(s)
        if got is not None:
            s.proto.keep(got)
            s.kept += 1

    def complete(self, s: Side, key: int) -> None:
        got = s.proto.kept()
        if got is not None:
            s.kept -= 1
        else:
            got = self._grant_or_data(s)
        if got is None:
            return
        r, k = s.current
        idx, nbytes, direct = got
        where = s.proto.deliver(idx, nbytes, direct, s.expect[r], k)
        if where is not None:
            s.bufs[k][:] = s.region[where:where + nbytes]
            s.full.discard(where)
        else:
            s.paths.add("some message placed directly")
        s.got.append(bytes(s.bufs[k]))
        s.current = None
        s.unsettled.append(idx)

    def release(self, s: Side, key: int) -> None:
        s.posted.append(s.unsettled.popleft())
        n = s.proto.release()
        if n:
            self.wires[s.n].append(("credit", vq.imm_credit(n)))


PRIORITY = ("deliver", "complete", "release", "poll_for_credit", "begin_recv", "post")


def run(fabric: Fabric, choose, order: tuple[str, ...] = PRIORITY) -> None:
    """Steps chosen by ``choose(enabled) -> (index, buffer key) or None`` (stop choosing), then the rest
    in the fixed ``order`` of kinds until done; nothing left to do before that is a deadlock."""
    for _ in range(400):
        options = fabric.enabled()
        if not options:
            break
        pick = choose(options)
        if pick is None:
            break
        what, side = options[pick[0]]
        fabric.step(what, side, pick[1])
    for _ in range(20_000):
        if fabric.done():
            break
        options = fabric.enabled()
        if not options:
            raise Violation("deadlock: messages outstanding and nothing can move")
        what, side = min(options, key=lambda o: (order.index(o[0]), o[1].n))
        fabric.step(what, side, 0)
    assert fabric.done()
    for s in fabric.sides:
        peer = fabric.peer(s)
        want = [payload(peer.n, i, n) for i, n in enumerate(peer.sends)]
        assert s.got == want, f"side {s.n} received other bytes than side {peer.n} sent"


layout = st.sampled_from([0, 0, 0, 1])  # mostly laid out alike: a direct write is possible
size = st.one_of(st.integers(1, DIRECT_FROM - 1), st.integers(DIRECT_FROM, SLOT))


@st.composite
def fabrics(draw):
    write_op, direct = draw(st.booleans()), draw(st.booleans())
    sides = []
    for n in (0, 1):
        sends = draw(st.lists(size, max_size=12))
        sides.append(dict(n=n, depth=draw(st.integers(2, 5)), sends=sends, way=draw(st.sampled_from([None, 0, 1, 2])),
                          layouts=draw(st.lists(layout, min_size=len(sends), max_size=len(sends))),
                          buf_layouts=draw(st.lists(layout, min_size=BUFFERS, max_size=BUFFERS))))
    sides[0]["expect"], sides[1]["expect"] = sides[1]["sends"], sides[0]["sends"]
    return Fabric(Side(**sides[0]), Side(**sides[1]), write_op, direct)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fabric=fabrics(), data=st.data())
def test_random_interleavings_never_lose_duplicate_or_misplace_a_message(fabric, data):
    def choose(options):
        if data.draw(st.integers(0, 63), label="stop choosing if 0") == 0:
            return None
        return data.draw(st.integers(0, len(options) - 1)), data.draw(st.integers(0, 2), label="buffer or path")
    run(fabric, choose, data.draw(st.permutations(PRIORITY), label="then, in this order"))
    for what in sorted(set.union(*(s.paths for s in fabric.sides))):
        event(what)


def scripted(depths: tuple[int, int], sends: tuple[int, int], steps: list[tuple[str, int]], write_op=False):
    """A fabric whose two sides send each other ``sends`` 8-byte messages, after ``steps`` ((action, side))."""
    a, b = (Side(n=n, depth=depths[n], sends=[8] * sends[n], layouts=[0] * sends[n], expect=[8] * sends[1 - n],
                 buf_layouts=[0] * BUFFERS) for n in (0, 1))
    fabric = Fabric(a, b, write_op, True)
    for what, n in steps:
        fabric.step(what, fabric.sides[n])
    return fabric


def test_credit_messages_never_outnumber_the_spare_receives():
    """What the interleavings found: a pool of 3 slots returned credits one at a time (half of 3,
    rounded down), so three credit messages could wait beside three data messages for 3 + 2
    receives. Here: side 1 fills side 0's slots, side 0 sends three messages and side 1 consumes
    them: their credits reach side 0 as at most two messages, which its spare receives take."""
    steps = [("post", 1)] * 3 + [("deliver", 1)] * 3 + [("post", 0)] * 3 + [("deliver", 0)] * 3
    steps += [("begin_recv", 1), ("complete", 1), ("release", 1)] * 3
    fabric = scripted((3, 3), (3, 3), steps)
    credits = [w for w in fabric.wires[1] if w[0] == "credit"]
    assert 1 <= len(credits) <= vq.SPARE_RECVS
    for _ in fabric.wires[1].copy():
        fabric.deliver(fabric.sides[1], 0)  # no RNR
    assert len(fabric.sides[0].cq) == 3 + len(credits)


@pytest.mark.parametrize("depth", range(2, 70))
def test_credit_batch_bounds_the_credit_messages(depth):
    batch = vq.credit_batch(depth)
    assert 1 <= batch <= depth  # a sender out of credits always gets some back
    assert depth // batch <= vq.SPARE_RECVS  # the credit messages in flight fit the spare receives


def test_a_direct_write_needs_the_advert_for_its_own_message():
    """An advert for message 1 in the mailbox does not send message 0 (or 2) there."""
    box = bytearray(vq.MAILBOX)
    p = vq.Protocol(own_depth=2, own_slot=SLOT, peer_depth=2, mailbox=box, write_op=True, direct=True,
                    direct_from=DIRECT_FROM)
    span = (0x5000, 128, 0, 0, 7)
    vq.pack_advert(box, 1, 0x9000, 0x42, 7, 128)
    assert p.send(128, span) == vq.Route(0, 0, False)
    assert p.send(128, span) == vq.Route(1, 1, True, 0x9000, 0x42)
    p.granted(2)
    assert not p.send(128, span).direct
    vq.pack_advert(box, 3, 0x9000, 0x42, 8, 128)  # laid out otherwise than the message
    assert not p.send(128, span).direct


def test_deliver_refuses_a_direct_write_into_buffers_not_advertised_for_it():
    p = vq.Protocol(own_depth=2, own_slot=SLOT, peer_depth=2, mailbox=bytearray(vq.MAILBOX), write_op=False,
                    direct=True, direct_from=DIRECT_FROM)
    with pytest.raises(vq.PeerError, match="not advertised"):
        p.deliver(0, 128, True, 128, key=1)
    assert p.advert(128, 1, (0x9000, 128, 0, 0x42, 7)) == (0, 0x9000, 0x42, 7, 128)
    with pytest.raises(vq.PeerError, match="not advertised"):
        p.deliver(0, 128, True, 128, key=2)  # another receive's buffers
    with pytest.raises(vq.PeerError, match="arrived where 100 B were expected"):
        p.deliver(0, 128, False, 100, key=1)
    assert p.deliver(3, 128, True, 128, key=1) is None and p.received == 1 and not p.advertised_for(1)
    assert p.deliver(3, 8, False, 8, key=1) == 3 * SLOT  # send mode: the slot of the receive it consumed
