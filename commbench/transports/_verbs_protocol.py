"""The verbs data path of one link as a state machine with no I/O: credits, adverts, direct placement.

verbs.py performs what these methods decide (posting, polling, copying), and nothing else decides:

- a sender asks ``send(nbytes, span)`` for each data message: the peer's receive slot it fills (a SEND
  into a posted receive, or an RDMA WRITE at the slot's offset), or, where the peer's latest advert in
  this side's mailbox names exactly this message and buffers laid out as this message's, their
  address and rkey (an RDMA WRITE with immediate straight into the receiver's buffers). Each message
  takes a credit; ``granted(n)`` gives credits back as the peer's credit messages arrive.
- a receiver entering a receive asks ``advert(nbytes, key, span)`` for the advert to write into the
  peer's mailbox (or None); for each data completion ``deliver(...)`` says where its bytes are (an
  offset into the receive region, or None: already in the caller's buffers) and refuses a message
  of the wrong length or written where no advert sent it; after the receive is posted again,
  ``release()`` says how many credits to return now.

Every rule that keeps a message from being lost, duplicated, misplaced or sent without a receive
posted for it is here, for the general path and for the closures timed loops run alike (their steps:
``next_out``, ``advert_for``, ``sent``, ``take``, ``advertised_for``). tests/unit/test_verbs_protocol.py
runs two of these over a simulated RC fabric in random interleavings of posts, deliveries and
completions, and tests/unit/test_verbs.py runs random programs of every path of two real VerbsLinks
over the in-memory fabric (hypothesis both).
"""

from __future__ import annotations

import struct
import zlib
from collections import deque
from typing import NamedTuple

from commbench.core.errors import PeerError

CREDIT_FLAG = 0x8000_0000  # immediate data: high bit set = credit return, else a data message's length
DIRECT_FLAG = 0x4000_0000  # ... and, for data, this bit: written straight into the receiver's advertised buffer
MAX_IMM_LEN = DIRECT_FLAG - 1
DIRECT_FROM = 32 << 10  # messages this large are advertised by their receiver and placed without a copy
MAILBOX = 64  # bytes at the end of each receive region where the peer's latest advert lands
ADVERT = struct.Struct("<QQIIQQ")  # seq, address, rkey, layout, span, seq again (written last: a torn read shows)
SPARE_RECVS = 2  # receives beyond the data depth, for credit messages (see Credits)

Span = tuple[int, int, int, int, int]  # one registered range holding a message: address, bytes, lkey, rkey, layout


class Route(NamedTuple):
    """Where a data message goes: ``slot`` of the peer's pool, or (direct) ``addr``/``rkey``."""

    seq: int
    slot: int
    direct: bool
    addr: int = 0
    rkey: int = 0


def imm_data(nbytes: int, direct: bool = False) -> int:
    return (DIRECT_FLAG if direct else 0) | nbytes


def imm_credit(n: int) -> int:
    return CREDIT_FLAG | n


def parse_imm(imm: int) -> tuple[bool, int, bool]:
    """(is a credit return, count or length, placed directly into the advertised buffer)."""
    credit = bool(imm & CREDIT_FLAG)
    return credit, imm & MAX_IMM_LEN, not credit and bool(imm & DIRECT_FLAG)


def layout_of(addrs: list[int], sizes: tuple[int, ...]) -> int:
    """A 32-bit digest of a message's layout (each buffer's offset from the first, and its size): two
    messages with the same digest and span take the same bytes at the same places."""
    return zlib.crc32(struct.pack(f"<{2 * len(sizes)}Q", *(v for a, n in zip(addrs, sizes, strict=True)
                                                          for v in (a - addrs[0], n))))


def advert_of(span: Span) -> tuple[int, int, int, int]:
    """What an advert for the buffers ``span`` names: (address, rkey, layout, bytes), as ``pack_advert`` takes them."""
    return span[0], span[3], span[4], span[1]


def pack_advert(buf, seq: int, addr: int, rkey: int, layout: int, span: int) -> None:
    """Put into buf what a receiver waiting for its message number ``seq`` writes into the sender's mailbox."""
    ADVERT.pack_into(buf, 0, seq, addr, rkey, layout, span, seq)


def expected_advert(buf, seq: int, addr: int, rkey: int, span: int, layout: int) -> None:
    """Put into buf the mailbox's bytes for which ``Protocol.advert_for(seq, span, layout)`` says (addr,
    rkey): a closure that expects the peer's next advert to name the buffers its last one did compares
    the mailbox with these bytes after its wait, instead of reading it (the same rule, one comparison)."""
    pack_advert(buf, seq, addr, rkey, layout, span)


def read_advert(mailbox, seq: int) -> tuple[int, int, int, int] | None:
    """(address, rkey, layout, span) if the mailbox holds a whole advert for message ``seq``; None for an
    older one, an empty or a half-written mailbox (the sender then uses the receive slots)."""
    head, addr, rkey, layout, span, tail = ADVERT.unpack_from(mailbox)
    if head != seq or tail != seq or addr == 0:
        return None
    return addr, rkey, layout, span


def credit_batch(depth: int) -> int:
    """Consumed slots returned per credit message: at least half the depth (rounded up), so that the
    credit messages a peer has not processed yet (each carrying at least a batch, together at most
    ``depth``) never outnumber the SPARE_RECVS receives kept for them."""
    return max(1, -(-depth // SPARE_RECVS))


class Credits:
    """Sender-side credits and receiver-side returns for one link.

    The sender starts with the peer's depth and spends one per data message; the receiver returns
    consumed slots in batches (``credit_batch``), one small credit message each.
    """

    def __init__(self, peer_depth: int, own_depth: int) -> None:
        self._available = peer_depth
        self._batch = credit_batch(own_depth)
        self._unreturned = 0
        self._sent = 0  # data messages sent: the sender's slot index in write mode is sent % peer_depth
        self._peer_depth = peer_depth

    @property
    def available(self) -> int:
        return self._available

    @property
    def sent(self) -> int:
        return self._sent

    def spend(self, seq: int | None = None) -> int:
        """Take a credit for one data message (``seq``: the number the caller means to send, which must be
        the next); returns the peer slot it goes to (write mode)."""
        sent = self._sent
        if seq is not None and seq != sent:
            raise PeerError(f"message {seq} sent where message {sent} was next")
        if self._available <= 0:
            raise PeerError("no credit left (the peer has not returned its receive slots)")
        self._available -= 1
        self._sent = sent + 1
        return sent % self._peer_depth

    def granted(self, n: int) -> None:
        self._available += n
        if self._available > self._peer_depth:
            raise PeerError(f"the peer returned more credits than it has receive slots ({self._available} > "
                            f"{self._peer_depth}): corrupted control traffic")

    def consumed(self) -> int:
        """After a data message is consumed and its receive re-posted: how many credits to return now (0: not yet)."""
        self._unreturned += 1
        if self._unreturned >= self._batch:
            n, self._unreturned = self._unreturned, 0
            return n
        return 0


class Protocol:
    """One link's data path, both directions. ``mailbox``: where the peer's adverts land (read, never
    written, here). ``own_*``: this side's receive pool; ``peer_*``: the peer's, as it announced.

    The general path asks ``send`` / ``advert`` / ``deliver``; the closures timed loops run ask the
    same rules in smaller steps (``next_out``, ``advert_for``, ``sent``, ``take``, ``advertised_for``),
    so that a step costs a call or two and no allocation. Either way every decision and every field
    that records one is here."""

    def __init__(self, *, own_depth: int, own_slot: int, peer_depth: int, mailbox, write_op: bool,
                 direct: bool, direct_from: int = DIRECT_FROM) -> None:
        self._credits = Credits(peer_depth, own_depth)
        self._own_depth, self._own_slot, self._peer_depth = own_depth, own_slot, peer_depth
        self._mailbox, self._write_op = mailbox, write_op
        self._direct, self._direct_from = direct, direct_from
        self._received = 0  # data messages consumed (write mode: the next slot is received % own_depth)
        self._advertised: tuple[int, int] | None = None  # (message number, key of the buffers) advertised
        self._kept: deque[tuple[int, int, bool]] = deque()  # data completions seen while waiting for credits
        self._direct_in = self._direct_out = 0  # messages placed without a copy, received and sent

    @property
    def received(self) -> int:
        """Data messages consumed so far (the next one's number)."""
        return self._received

    @property
    def direct_in(self) -> int:
        """Of those, placed straight into the receiver's buffers."""
        return self._direct_in

    @property
    def direct_out(self) -> int:
        """Data messages sent straight into the buffers the peer advertised."""
        return self._direct_out

    def may_go_direct(self, nbytes: int) -> bool:
        return self._direct and nbytes >= self._direct_from

    # -- sending -----------------------------------------------------------------------------------
    def has_credit(self) -> bool:
        return self._credits._available > 0

    def next_out(self) -> int:
        """The number of the next data message, or -1 where the closures may not send it: no credit, or
        data completions kept (the receive they belong to comes first; the general path still may)."""
        c = self._credits
        return -1 if self._kept or c._available <= 0 else c._sent

    def advert_for(self, seq: int, span: int, layout: int) -> tuple[int, int] | None:
        """(address, rkey) of the buffers the peer advertised for message ``seq`` if they are laid out as
        this message's (``span`` bytes from its first, ``layout``), else None: it goes by a slot."""
        got = read_advert(self._mailbox, seq)
        if got is None or (got[3], got[2]) != (span, layout):
            return None
        return got[0], got[1]

    def send(self, nbytes: int, span: Span | None) -> Route:
        """Take a credit for the next data message and say where it goes: straight into the buffers the
        peer advertised for exactly this message (if they are laid out as ``span``), else a slot."""
        seq = self._credits.sent
        slot = self._credits.spend()
        if span is not None and self.may_go_direct(nbytes):
            got = self.advert_for(seq, span[1], span[4])
            if got is not None:
                self._direct_out += 1
                return Route(seq, slot, True, got[0], got[1])
        return Route(seq, slot, False)

    def sent(self, seq: int, direct: bool, advertised: int | None = None) -> None:
        """Message ``seq`` (``next_out``'s) went: into the buffers advertised for it (``direct``, as
        ``advert_for`` said) or its slot (``seq % peer depth``); ``advertised``: the key of the buffers
        whose advert for this side's next message went with it (``advert``'s rules, checked by the caller)."""
        self._credits.spend(seq)
        if direct:
            self._direct_out += 1
        if advertised is not None:
            self._advertised = (self._received, advertised)

    def slot_of(self, seq: int) -> int:
        """The peer's receive slot message ``seq`` fills (write mode: the slots are filled in turn)."""
        return seq % self._peer_depth

    def take(self) -> int:
        """Take a credit for the next data message, by a slot: the peer slot it goes to (write mode),
        or -1 as ``next_out`` says."""
        return -1 if self.next_out() < 0 else self._credits.spend()

    def granted(self, n: int) -> None:
        """A credit message arrived: n of the peer's slots are free again."""
        self._credits.granted(n)

    # -- receiving ---------------------------------------------------------------------------------
    def advert(self, nbytes: int, key: int, span: Span | None) -> tuple[int, int, int, int, int] | None:
        """Entering a receive into the buffers ``key`` (``span``) for the next message: the advert to
        write into the peer's mailbox, (seq, address, rkey, layout, span), or None: the message is too
        small, its buffers are not one registered range, or one arrived already (``kept``)."""
        if span is None or self._kept or not self.may_go_direct(nbytes):
            return None
        self._advertised = (self._received, key)
        return (self._received, *advert_of(span))

    def advertised_for(self, key: int) -> bool:
        """Whether the advert for the next message into the buffers ``key`` went already."""
        return self._advertised == (self._received, key)

    def deliver(self, idx: int, nbytes: int, direct: bool, expect: int, key: int) -> int | None:
        """A data message arrived (receive ``idx`` consumed) for the receive into the buffers ``key``
        expecting ``expect`` bytes: the offset in the receive region to copy it from, or None if it was
        written straight into those buffers. Refuses a wrong length, and a direct write into buffers
        not advertised for this very message."""
        if nbytes != expect:
            raise PeerError(f"a {nbytes}-byte message arrived where {expect} B were expected")
        r = self._received
        if direct:
            if self._advertised != (r, key):
                raise PeerError(f"message {r} was written into buffers not advertised for it")
            self._direct_in += 1
            where = None
        else:  # out of its receive slot (write mode: the slots are filled in turn)
            where = (r % self._own_depth if self._write_op else idx) * self._own_slot
        self._advertised = None
        self._received = r + 1
        return where

    def release(self) -> int:
        """A consumed message's receive is posted again: how many credits to return now (0: not yet)."""
        return self._credits.consumed()

    def keep(self, got: tuple[int, int, bool]) -> None:
        """A data completion (receive index, length, direct) that arrived while this side waited for credits."""
        self._kept.append(got)

    def kept(self) -> tuple[int, int, bool] | None:
        """The oldest data completion kept (``keep``), taken; None if there is none."""
        return self._kept.popleft() if self._kept else None
