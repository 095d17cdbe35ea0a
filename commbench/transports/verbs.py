"""RDMA verbs through pyverbs (rdma-core): one RC queue pair per peer.

Set-up (per link): a QP in INIT, a receive pool registered once and sized from the largest message
of the run (``_verbs_plan.plan_pool``), its receives posted, then queue-pair info (LID, GID, QPN,
PSN, rkey, address, slot size, depth) exchanged through the run's token-checked rendezvous and
validated (``QpInfo.parse``), the QP moved to RTR/RTS, and a barrier so that nobody sends to a QP
that is not ready.

Data paths (``--verbs-op``):
- ``send``: SEND with immediate (the length) into the peer's pre-posted receive slots;
- ``write``: RDMA WRITE with immediate straight into the peer's slot (``sent % depth``), which
  consumes a posted receive only as a notification.
Either way the receiver copies the slot into the caller's buffers and re-posts it; credits
returned in batches as small SEND-with-immediate messages keep a sender from
overrunning the pool. Messages of ``DIRECT_FROM`` (32 KiB) and more skip that copy when the receiver
is already waiting (``--verbs-direct on``, the default): on entering a receive it RDMA-writes an
advert (message number, address, rkey, layout) into the sender's mailbox, and a sender about to send
exactly that message RDMA-writes it with immediate straight into the caller's buffers, as
TensorFlow's verbs runtime placed tensors into buffers the receiver announced and as MPI libraries
do above their eager limit; a message sent before its advert arrived goes through a slot as above.
An advert names only the buffer its receiver is waiting in, so nothing lands anywhere the caller
has not handed over for that very message. The sending side is zero-copy: the message's buffers become one
scatter/gather entry each (registered once, on first use, in a cache that keeps them alive), up to
the device's ``max_sge``; more buffers are packed into a registered staging slot; small messages
go inline. A sent message's buffers are in use until the next receive, call or progress on that
link returns (MPI_Isend completed by the next wait); that is when send completions are reaped.

What goes where (credits, adverts, direct placement) is decided by ``_verbs_protocol.Protocol``, a
state machine with no I/O whose fields nothing else touches, tested in random interleavings; this
module posts, polls and copies as it says. The closures timed loops run (``_poster``, ``_receiver``,
``_window_poster``) ask it too, in its smaller steps (a call or two per message), with what does not
change between messages worked out once.

Completions: busy polling (default, as perftest) or completion events (``--poll blocking``: the CQ
is armed and the process sleeps in ibv_get_cq_event; an interval timer interrupts that wait so
that --timeout still holds). Busy-polled CQs are extended ones where the device has them, read in
place (``make_cq``): no pyverbs object is made per completion.
"""

from __future__ import annotations

import errno
import itertools
import os
import random
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial

import numpy as np

from commbench.core.config.argtypes import integer, number
from commbench.core.config.options import Options, opt
from commbench.core.config.run import RunConfig
from commbench.core.errors import PeerError, UsageError
from commbench.core.measure.message import Message
from commbench.core.output.table import key
from commbench.transports._verbs_device import WC_ERRORS, Completion, Registry, load_api, make_cq, open_port, region
from commbench.transports._verbs_plan import Conn, ConnState, QpInfo, path_mtu, plan_pool, sge_plan
from commbench.transports._verbs_protocol import (
    ADVERT,
    DIRECT_FROM,
    MAILBOX,
    Protocol,
    advert_of,
    expected_advert,
    imm_credit,
    imm_data,
    pack_advert,
    parse_imm,
)
from commbench.transports.base import Link, Transport, queues

DEFAULT_LARGEST = 4 << 20  # receive slot size when the run did not say (-m's largest size)
MAX_INLINE = 64  # bytes requested as inline data; retried with 0 if the device refuses
SPIN_CHECK = 0x3FF  # look at the clock every 1024 empty polls
CHECK_EVERY = 0.5  # s: a wait this long asks the rendezvous whether a rank died
_LINK_NUMBERS = itertools.count()  # a link's own keys in a Message's cache
class VerbsLink(Link):
    def __init__(self, t: VerbsTransport, peer: int, name: str) -> None:
        super().__init__(peer, name)
        api, e, plan = t.api, t.api.e, t.plan
        self.t, self.api, self.plan = t, api, plan
        self.state = ConnState(name)
        self.timeout, self.events = t.timeout, t.events
        self.sq_size = plan.depth + 8
        self.scq, self.take_s = make_cq(api, t.ctx, self.sq_size, None)
        self.channel = api.cq.CompChannel(t.ctx) if self.events else None
        self.rcq, self.take_r = make_cq(api, t.ctx, plan.recvs + 8, self.channel)
        self.qp = self._create_qp()
        access = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE
        self.recv_mr = api.mr.MR(t.pd, plan.region, access)
        self.recv_mem = region(self.recv_mr, plan.region)
        self.ctrl_mr = api.mr.MR(t.pd, 64, e.IBV_ACCESS_LOCAL_WRITE)
        self.recv_mem[plan.mailbox:plan.mailbox + MAILBOX] = 0  # no advert yet
        # adverts are packed and read through memoryviews: struct is quicker on them than on numpy arrays
        self.mailbox = memoryview(self.recv_mem[plan.mailbox:plan.mailbox + MAILBOX])
        self.advert_mr = api.mr.MR(t.pd, MAILBOX, e.IBV_ACCESS_LOCAL_WRITE)
        self.advert_mem = memoryview(region(self.advert_mr, MAILBOX))
        self.advert_inline = self.max_inline >= ADVERT.size  # copied at post, not read later
        advert_sg = [api.wr.SGE(self.advert_mr.buf, ADVERT.size, self.advert_mr.lkey)]
        self.advert_wr = api.wr.SendWR(wr_id=2 << 40, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=advert_sg,
                                       send_flags=e.IBV_SEND_SIGNALED)
        # The advert that leads a request in one post (call): its next_wr is set to the request each time
        # (pyverbs cannot unlink a list, so the advert posted alone is a work request of its own).
        self.advert_lead = api.wr.SendWR(wr_id=3 << 40, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=advert_sg)
        self.direct = t.direct
        n = next(_LINK_NUMBERS)  # work requests cached in a Message are this link's own: posting one sets
        self.wr_key, self.direct_key = f"verbs.{n}", f"verbs-direct.{n}"  # its flags and remote address
        self.poster_key = f"verbs-poster.{n}"
        self.rwrs = [api.wr.RecvWR(wr_id=i, num_sge=1, sg=[api.wr.SGE(*self._recv_sge(i), self.recv_mr.lkey)])
                     for i in range(plan.recvs)]
        for w in self.rwrs:
            self.qp.post_recv(w)
        self.psn = random.getrandbits(24)
        self.local = QpInfo(rank=t.world.rank, lid=int(t.port_attr.lid), gid=t.gid, qpn=self.qp.qp_num,
                            psn=self.psn, rkey=self.recv_mr.rkey, addr=self.recv_mr.buf, slot=plan.slot,
                            depth=plan.depth, mtu=int(t.port_attr.active_mtu),
                            link_layer=int(t.port_attr.link_layer), op=t.op,
                            mailbox=self.recv_mr.buf + plan.mailbox)
        self.remote: QpInfo | None = None
        self.proto: Protocol | None = None  # the data path's state and decisions (from to_rts on)
        self.unsettled = -1  # a consumed message's receive index, not yet re-posted (see _settle)
        # Selective signaling: a send whose data went inline (copied at post) needs no completion, so it
        # is posted unsignaled, but for every quiet_every-th one, whose completion frees the send queue
        # slots of those before it; every other send is signaled and polled before its buffers are reused.
        self.frees: deque[int] = deque()  # per signaled send not yet polled: the slots its completion frees
        self.in_sq = 0  # send queue slots taken
        self.quiet = 0  # unsignaled sends since the last signaled one
        self.quiet_every = max(1, (self.sq_size - 2) // 2)
        self.staging: np.ndarray | None = None
        self.staging_mr = None
        self.pack_wrs: dict[tuple[int, int], object] = {}  # (slot, length) -> its staging work request
        self.write_op = t.op == "write"
        self.data_op = e.IBV_WR_RDMA_WRITE_WITH_IMM if self.write_op else e.IBV_WR_SEND_WITH_IMM
        self.f_inline, self.f_signaled = e.IBV_SEND_INLINE, e.IBV_SEND_SIGNALED
        self.recv_view = memoryview(self.recv_mem)
        self.credit_wr = api.wr.SendWR(wr_id=1 << 40, opcode=e.IBV_WR_SEND_WITH_IMM, num_sge=1,
                                       sg=[api.wr.SGE(self.ctrl_mr.buf, 4, self.ctrl_mr.lkey)],
                                       send_flags=e.IBV_SEND_SIGNALED)
        self.credit_inline = self.max_inline >= 4  # the credit rides in the immediate; the 4 bytes are filler

    # -- set-up ---------------------------------------------------------------------------------
    def _create_qp(self):
        api, e, t = self.api, self.api.e, self.t
        attr = api.qp.QPAttr(port_num=t.port)
        attr.qp_access_flags = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE
        for inline in (MAX_INLINE, 0):
            cap = api.qp.QPCap(max_send_wr=self.sq_size, max_recv_wr=self.plan.recvs,
                               max_send_sge=t.max_sge, max_recv_sge=1, max_inline_data=inline)
            init = api.qp.QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.scq, rcq=self.rcq, cap=cap, sq_sig_all=0)
            try:
                qp = api.qp.QP(t.pd, init, attr)
            except api.Error:
                if inline == 0:
                    raise
                continue
            self.max_inline = inline
            return qp
        raise AssertionError("unreachable")

    def _recv_sge(self, i: int) -> tuple[int, int]:
        """Where receive i lands: its slot (send), or a small control area after the slots (write)."""
        p = self.plan
        if p.op == "send":
            return self.recv_mr.buf + i * p.slot, p.slot
        return self.recv_mr.buf + p.depth * p.slot + i * 64, 64

    def to_rts(self, remote: QpInfo) -> None:
        api, e, t = self.api, self.api.e, self.t
        attr = api.qp.QPAttr(port_num=t.port)
        attr.qp_access_flags = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE
        attr.path_mtu = path_mtu(self.local.mtu, remote.mtu)
        attr.dest_qp_num, attr.rq_psn, attr.sq_psn = remote.qpn, remote.psn, self.psn
        attr.max_dest_rd_atomic = attr.max_rd_atomic = 1
        attr.min_rnr_timer, attr.timeout, attr.retry_cnt, attr.rnr_retry = 12, 14, 7, 7
        roce = remote.link_layer != e.IBV_LINK_LAYER_INFINIBAND
        gr = api.addr.GlobalRoute(dgid=api.addr.GID(remote.gid), sgid_index=t.gid_index)
        attr.ah_attr = api.addr.AHAttr(port_num=t.port, is_global=1 if roce else 0, gr=gr, dlid=remote.lid)
        self.qp.to_rts(attr)
        self.remote = remote
        self.proto = Protocol(own_depth=self.plan.depth, own_slot=self.plan.slot, peer_depth=remote.depth,
                              mailbox=self.mailbox, write_op=self.write_op, direct=self.direct)
        self.advert_wr.set_wr_rdma(remote.rkey, remote.mailbox)  # adverts always go to the peer's mailbox
        self.advert_lead.set_wr_rdma(remote.rkey, remote.mailbox)

    # -- completions ----------------------------------------------------------------------------
    def _poll(self, cq, block: bool) -> Completion | None:
        """One completion from cq (None if not blocking and none is there); a failed one is a PeerError."""
        if self.unsettled >= 0:
            self._settle()
        take = self.take_r if cq is self.rcq else self.take_s
        c = take()
        if c is None:
            if not block:
                return None
            now = time.monotonic()
            deadline, check_at, spins = now + self.timeout, now + CHECK_EVERY, 0
            sleeps = self.events and cq is self.rcq
            while c is None:
                if sleeps:
                    cq.req_notify()  # arm, then look once more: a completion may have slipped in before
                    c = take()
                    if c is not None:
                        break
                    self._sleep_on(cq, min(deadline, check_at))
                c = take()
                spins += 1
                if c is None and self.t.yield_idle:
                    os.sched_yield()
                if c is None and (sleeps or (spins & SPIN_CHECK) == 0) and (now := time.monotonic()) > check_at:
                    if now > deadline:
                        what = "message" if cq is self.rcq else "send completion"
                        raise self.state.fail(f"no {what} within {self.timeout:g} s")
                    check_at = now + CHECK_EVERY  # a long wait: has a rank died (its rendezvous link closed)?
                    self.t.world.check_alive()
        if c[0] != 0:
            status, wr_id, _, opcode, byte_len, vendor_err = c
            what = "receive" if cq is self.rcq else "send"
            raise self.state.fail(f"a {what} work completion failed with status {status} "
                                  f"({WC_ERRORS.get(status, 'see ibv_wc_status_str')}; opcode {opcode}, "
                                  f"wr_id {wr_id:#x}, {byte_len} B, vendor error {vendor_err:#x})")
        return c

    def _settle(self) -> None:
        """Re-post the receive that ``_receiver`` left and count its credit (returning a batch). It waits
        for the next poll on this link, which a ping-pong makes after its next doorbell: off the path from
        a completion to the answer. Until then the peer holds that credit, so it never needs the receive."""
        idx, self.unsettled = self.unsettled, -1
        self.qp.post_recv(self.rwrs[idx])
        back = self.proto.release()
        if back:
            self._return_credits(back)

    def _sleep_on(self, cq, deadline: float) -> None:
        """Sleep in ibv_get_cq_event on an armed CQ; SIGALRM every 0.2 s makes its read() return
        EINTR (pyverbs holds the GIL there, so nothing else in this process runs) and the deadline holds.
        Not on the main thread: no timer (the watchdog still acts)."""
        timer = self.t.alarm()
        if timer:
            signal.setitimer(signal.ITIMER_REAL, 0.2, 0.2)
        try:
            while True:
                try:
                    self.channel.get_cq_event(cq)
                    cq.ack_events(1)
                    return
                except self.api.RDMAError as exc:
                    if time.monotonic() > deadline:
                        return  # the caller's poll loop reports the timeout
                    if getattr(exc, "error_code", errno.EINTR) != errno.EINTR:
                        raise
        finally:
            if timer:
                signal.setitimer(signal.ITIMER_REAL, 0)

    def _recv_wc(self, block: bool) -> tuple[int, int, bool] | None:
        """The next data message (receive index, length, placed directly): one kept earlier, else from the CQ."""
        got = self.proto.kept()
        return got if got is not None else self._poll_rcq(block)

    def _poll_rcq(self, block: bool, for_credit: bool = False) -> tuple[int, int, bool] | None:
        """The next data completion from the receive CQ, taking credit returns on the way (and
        returning None after one when ``for_credit``)."""
        while True:
            c = self._poll(self.rcq, block)
            if c is None:
                return None
            credit, value, direct = parse_imm(c[2])
            if not credit:
                return c[1], value, direct
            self.qp.post_recv(self.rwrs[c[1]])
            self.proto.granted(value)
            if for_credit:
                return None

    def _reap(self, all_: bool, room: int = 1) -> None:
        """Poll send completions: all of them (buffers free again), or just enough for ``room`` more sends."""
        while self.frees and (all_ or self.in_sq > self.sq_size - 1 - room):
            self._poll(self.scq, True)
            self.in_sq -= self.frees.popleft()

    def _mark(self, wr, inline: bool, more: bool = False) -> None:
        """Take wr's send-queue slot, signaled or not (selective signaling, as perftest's --cq-mod): a send
        goes unsignaled if its data went inline (copied at post), or more sends follow on this link at
        once (the last of them is signaled, and its completion says all before it are done), or its reply
        will say it arrived (a call's request), but every quiet_every-th, whose completion frees the slots
        of those before it."""
        signal = (not inline and not more) or self.quiet + 1 >= self.quiet_every
        wr.send_flags = (self.f_inline if inline else 0) | (self.f_signaled if signal else 0)
        self.in_sq += 1
        if signal:
            self.frees.append(self.quiet + 1)
            self.quiet = 0
        else:
            self.quiet += 1

    def _submit(self, wr, inline: bool, more: bool = False, lead=None) -> None:
        """Post wr (``more``: no completion needed for its buffers, see _mark), behind ``lead`` (an
        advert, unsignaled: wr's completion or reply covers it) in one ibv_post_send if given."""
        if lead is None:
            self._reap(False)
            self._mark(wr, inline, more)
            self.qp.post_send(wr)
            return
        self._reap(False, 2)
        self._mark(lead, self.advert_inline, True)
        self._mark(wr, inline, more)
        lead.next_wr = wr
        self.qp.post_send(lead)

    def _wait_credit(self) -> None:
        while not self.proto.has_credit():
            got = self._poll_rcq(True, for_credit=True)  # data arriving meanwhile is kept for recv_into
            if got is not None:
                self.proto.keep(got)

    # -- data path ------------------------------------------------------------------------------
    def _send_wr(self, msg: Message) -> tuple[object, bool]:
        """(msg's work request, its data goes inline), made once per message (``_new_send_wr``)."""
        c = msg.cache[self.wr_key] = self._new_send_wr(msg)
        return c

    def _new_send_wr(self, msg: Message) -> tuple[object, bool]:
        """(a new work request sending msg, its data goes inline): one scatter/gather entry per buffer
        (inline if small); (None, False) if it has more buffers than entries (see _pack)."""
        api, t = self.api, self.t
        how = sge_plan(msg.sizes, t.max_sge, self.max_inline)
        wr = None
        if how != "pack":
            sg = [api.wr.SGE(a.ctypes.data, len(a), 0 if how == "inline" else t.registry.lkey(a))
                  for a in msg.arrays if len(a)]
            wr = api.wr.SendWR(wr_id=0, opcode=self.data_op, num_sge=len(sg), sg=sg, imm_data=imm_data(msg.nbytes))
        return wr, how == "inline"

    def _pack(self, msg: Message, slot: int):
        """A work request sending msg's buffers packed into this slot's part of a registered staging area
        (made once per slot and length)."""
        size = self.plan.slot
        if self.staging is None:
            depth = self.remote.depth
            self.staging_mr = self.api.mr.MR(self.t.pd, depth * size, self.api.e.IBV_ACCESS_LOCAL_WRITE)
            self.staging = region(self.staging_mr, depth * size)
        off = slot * size
        for a in msg.arrays:
            self.staging[off:off + len(a)] = a
            off += len(a)
        wr = self.pack_wrs.get((slot, msg.nbytes))
        if wr is None:
            sge = self.api.wr.SGE(self.staging_mr.buf + slot * size, max(msg.nbytes, 1), self.staging_mr.lkey)
            wr = self.pack_wrs[(slot, msg.nbytes)] = self.api.wr.SendWR(
                wr_id=0, opcode=self.data_op, num_sge=1, sg=[sge], imm_data=imm_data(msg.nbytes))
        return wr

    def _new_direct_wr(self, msg: Message, mine: tuple[int, int, int, int, int]):
        """msg's RDMA write with immediate (its remote address set per message), made once per message."""
        wr = msg.cache[self.direct_key] = self._direct_write(msg, mine)
        return wr

    def _direct_write(self, msg: Message, mine: tuple[int, int, int, int, int]):
        """A new RDMA write with immediate of msg's registered span ``mine``, unsignaled, no address yet."""
        first, nbytes, lkey, _, _ = mine
        api = self.api
        return api.wr.SendWR(wr_id=0, opcode=api.e.IBV_WR_RDMA_WRITE_WITH_IMM, num_sge=1, send_flags=0,
                             sg=[api.wr.SGE(first, nbytes, lkey)], imm_data=imm_data(msg.nbytes, direct=True))

    def _post(self, msg: Message, more: bool = False, lead=None) -> None:
        """Send msg where the protocol routes it (the per-message path: kept short, as every step here
        is paid per message)."""
        if self.state.state is not Conn.READY:
            self.state.require_ready()
        if not self.proto.has_credit():
            self._wait_credit()
        span = self._direct_span(msg)
        route = self.proto.send(msg.nbytes, span)
        if route.direct:
            wr = msg.cache.get(self.direct_key) or self._new_direct_wr(msg, span)
            wr.set_wr_rdma(route.rkey, route.addr)
            inline = False
        else:
            wr, inline = msg.cache.get(self.wr_key) or self._send_wr(msg)
            if wr is None:
                wr = self._pack(msg, route.slot)
            if self.write_op:
                wr.set_wr_rdma(self.remote.rkey, self.remote.addr + route.slot * self.remote.slot)
        self._submit(wr, inline, more, lead)

    def send(self, msg: Message) -> None:
        self._post(msg)

    def _deliver(self, got: tuple[int, int, bool], msg: Message) -> None:
        idx, nbytes, direct = got
        try:
            where = self.proto.deliver(idx, nbytes, direct, msg.nbytes, id(msg))
        except PeerError as exc:
            raise self.state.fail(str(exc)) from None
        if where is not None:
            msg.copy_from(self.recv_view, where)
        self.qp.post_recv(self.rwrs[idx])
        back = self.proto.release()
        if back:
            self._return_credits(back)

    def _return_credits(self, n: int) -> None:
        self.credit_wr.imm_data = imm_credit(n)
        self._submit(self.credit_wr, self.credit_inline)

    def _complete(self, c: Completion, msg: Message) -> None:
        """Deliver into msg the data message completion c announced or, if c returned credits, the next."""
        credit, value, direct = parse_imm(c[2])
        if not credit:
            self._deliver((c[1], value, direct), msg)
            return
        self.qp.post_recv(self.rwrs[c[1]])
        self.proto.granted(value)
        self._deliver(self._recv_wc(True), msg)

    def _advertise(self, msg: Message, post: bool = True):
        """Tell the peer where the message this receive waits for may go directly, if the protocol
        says so (Protocol.advert): post the advert, or (``post`` False) return the work request to post
        it with (None if there is none). The advert buffer must be free: taken inline by the device, or
        every send reaped first."""
        fields = self.proto.advert(msg.nbytes, id(msg), self._direct_span(msg))
        if fields is None:
            return None
        pack_advert(self.advert_mem, *fields)
        if not post:
            return self.advert_lead
        self._submit(self.advert_wr, self.advert_inline)
        return None

    def serve(self, n: int, request: Message, respond: Message | Callable[[], Message]) -> None:
        """Answer n calls, each reply but the last posted behind the advert for the next request (the
        request's buffers are free once its reply is made), in one ibv_post_send: an advert posted on
        its own after the reply races a caller answering at once, which then sends by a slot.
        A fixed reply goes through ``_poster`` (unsignaled: the next request says it arrived)."""
        fixed = respond if isinstance(respond, Message) else None
        post = self._poster(fixed, request) if fixed is not None else None
        recv, key, goes_direct = self._receiver(request, post), id(request), self._direct_span(request) is not None
        p = self.proto
        for i in range(n):
            if not goes_direct or p.advertised_for(key):  # its advert went with the last reply
                recv()
            else:
                self.recv_into(request)
            if post is not None and i + 1 < n and post():
                continue
            reply = fixed if fixed is not None else respond()
            lead = self._advertise(request, post=False) if i + 1 < n and self.advert_inline else None
            self._post(reply, False, lead)

    def recv_into(self, msg: Message) -> None:
        """Receive the next message into msg. The advert goes first where the device takes it inline:
        reaping waits for the last send's acknowledgement, and an advert posted after that wait reaches
        a caller answering at once too late (its message then goes by a slot)."""
        if self.advert_inline:
            if not self.proto.advertised_for(id(msg)):  # serve() may have sent it with its reply
                self._advertise(msg)
            self._reap(True)  # every earlier send done: its buffers are the caller's again
        else:
            self._reap(True)
            self._advertise(msg)
        self._deliver(self._recv_wc(True), msg)

    def call(self, request: Message, reply: Message) -> None:
        """Send a request and receive its reply, the advert for the reply's buffers and the request in one
        post (the advert first: it is at the peer before the request is, so the reply can go direct). The
        request needs no completion: its reply says it arrived (see Link.call)."""
        self._reap(True)
        self._post(request, True, self._advertise(reply, post=False))
        self._deliver(self._recv_wc(True), reply)

    def caller(self, request: Message, reply: Message) -> Callable[[], None]:
        """call(request, reply) for a timed loop, as ``_poster`` then ``_receiver`` (call() itself where
        they do not apply): what a call repeats is worked out once, not in about 20 Python calls a step."""
        slow = partial(self.call, request, reply)
        post = self._poster(request, reply)
        recv = self._receiver(reply, post)

        def step() -> None:
            if post():
                recv()
            else:
                slow()
        return step

    # -- the same, with what every call repeats worked out once ---------------------------------
    def _poster(self, msg: Message, ahead: Message) -> Callable[[], bool]:
        """A closure posting msg as _post(msg, more=True) does, by the protocol's own steps (``next_out``,
        ``advert_for``, ``sent``): a call's request or a served reply (the peer's next message says it
        arrived), behind the advert for the buffers of ``ahead`` (the reply, the next request) where that
        may go direct, as _advertise does. It returns False, having posted nothing, where the general
        path must: a link not ready, data kept while waiting for credits, no credit, selective
        signaling's turn, a packed message.

        Where both go direct (a ping-pong of 32 KiB and more), the closure has an advert and a direct
        write of its own, chained, and makes the next post ready right after this one's doorbell: the
        advert it will send, and the advert it expects from the peer (the same buffers, the next
        message number: ``expected_advert``). Its checks are made before the wait (``arm``, by the
        paired ``_receiver``), so between the completion that lets it go and its doorbell there is one
        comparison of the mailbox's bytes."""
        wr, inline = msg.cache.get(self.wr_key) or self._send_wr(msg)
        if not self.advert_inline:
            return lambda: False
        p = self.proto
        mine = self._direct_span(msg)
        theirs = self._direct_span(ahead)
        want = (mine[1], mine[4]) if mine is not None else (0, 0)  # the span and layout an advert must name
        a = advert_of(theirs) if theirs is not None else None  # the advert for ahead's buffers
        dwr = self._direct_write(msg, mine) if mine is not None else None  # its own: nobody else aims it
        adv = None
        if a is not None and dwr is not None:  # its own advert, inline (copied at the doorbell), chained to dwr
            out = np.zeros(ADVERT.size, np.uint8)
            out_mem = memoryview(out)
            adv = self.api.wr.SendWR(wr_id=3 << 40, opcode=self.api.e.IBV_WR_RDMA_WRITE, num_sge=1,
                                     sg=[self.api.wr.SGE(out.ctypes.data, ADVERT.size, 0)], send_flags=self.f_inline)
            adv.set_wr_rdma(self.remote.rkey, self.remote.mailbox)
            adv.next_wr = dwr
        next_out, advert_for, sent, slot_of = p.next_out, p.advert_for, p.sent, p.slot_of
        frees, state, reap, lead, lead_mem = self.frees, self.state, self._reap, self.advert_lead, self.advert_mem
        post_send, flags, f_inline = self.qp.post_send, self.f_inline if inline else 0, self.f_inline
        limit, key, ready = self.quiet_every - (1 if a is None else 2), id(ahead), Conn.READY  # posts unsignaled
        ad_key = None if a is None else key  # what sent() records as advertised with each post
        write_op, incoming = self.write_op, self.mailbox
        rkey_, base, size = self.remote.rkey, self.remote.addr, self.remote.slot
        expect, seen = bytearray(ADVERT.size), incoming[:ADVERT.size]  # the peer's advert the prepared post is aimed at
        aim: tuple[int, int] | None = None  # (address, rkey) dwr is set to
        ready_for = (-1, -1)  # (message sent, message received) the prepared post is for
        armed = False  # the link's checks passed for the prepared post, before the wait (arm)

        def arm(waits: bool = True) -> None:
            """Called by the paired receive (``_receiver``) just before it waits: whether the prepared post may
            go once the message waited for arrives by that receive's own path (which changes nothing checked
            here but the received count); ``arm(False)`` when it went another way."""
            nonlocal armed
            armed = waits and ready_for == (next_out(), p.received + 1) and not frees \
                and self.quiet < limit and state.state is ready

        def post_general(seq: int, r: int) -> bool:
            """Post by the advert the peer left (direct) or by a slot; False where the general path must."""
            nonlocal aim
            w = None
            if dwr is not None:
                got = advert_for(seq, *want)
                if got is not None:
                    if aim != got:
                        aim = got
                        dwr.set_wr_rdma(got[1], got[0])
                    w = dwr
            if w is None:
                if wr is None:
                    return False
                w = wr
                w.send_flags = flags
                if write_op:
                    w.set_wr_rdma(rkey_, base + slot_of(seq) * size)
            if a is None:
                post_send(w)
            elif w is dwr:
                pack_advert(out_mem, r, *a)
                post_send(adv)
            else:  # a slot's message: behind the link's own advert work request
                pack_advert(lead_mem, r, *a)
                lead.send_flags = f_inline
                lead.next_wr = w
                post_send(lead)
            if w is not dwr:
                aim = None  # a slot's message: the next post reads the mailbox again
            return True

        def post() -> bool:
            nonlocal ready_for, armed
            if armed and seen == expect:
                armed = False
                post_send(adv)
                seq, r = ready_for
            else:
                armed = False
                if state.state is not ready or self.quiet >= limit:
                    return False
                seq = next_out()
                if seq < 0:
                    return False
                if frees:
                    reap(True)
                r = p.received if a is not None else 0  # an advert's number; none goes with small messages
                if (seq, r) == ready_for and seen == expect:
                    post_send(adv)
                elif not post_general(seq, r):
                    return False
            sent(seq, aim is not None, ad_key)
            if a is None:
                self.in_sq += 1
                self.quiet += 1
            else:
                self.in_sq += 2
                self.quiet += 2
                if aim is not None:  # the next post: the peer's next advert names the same buffers
                    expected_advert(expect, seq + 1, *aim, *want)
                    pack_advert(out_mem, r + 1, *a)
                    ready_for = (seq + 1, r + 1)
            return True
        if adv is not None:
            post.arm = arm  # type: ignore[attr-defined]  # for the receive it is paired with
        return post

    def _direct_span(self, msg: Message) -> tuple[int, int, int, int, int] | None:
        """msg's registered span (Registry.span) if it may be placed directly (see _advertise), else None."""
        return self.t.registry.span(msg) if self.proto.may_go_direct(msg.nbytes) else None

    def _window_poster(self, msg: Message) -> Callable[[], bool]:
        """msg's post for a window's sends but the last (``progress``), made once per message and link: as
        _post(msg, more=True) by a slot (``Protocol.take``), with a work request of its own (unsignaled,
        its flags set once). It reads no advert: a window's receiver posts none, a streaming sender
        outruns them (``complete``). False, having posted nothing, where the general path must (as ``_poster``)."""
        wr, inline = self._new_send_wr(msg)
        if wr is None:  # packed: the general path
            post = msg.cache[self.poster_key] = lambda: False
            return post
        wr.send_flags = self.f_inline if inline else 0
        take, frees, state, ready = self.proto.take, self.frees, self.state, Conn.READY
        post_send, limit, full, reap = self.qp.post_send, self.quiet_every - 1, self.sq_size - 2, self._reap
        write_op, rkey, base, size = self.write_op, self.remote.rkey, self.remote.addr, self.remote.slot

        def post() -> bool:
            if self.quiet >= limit or state.state is not ready:
                return False
            slot = take()
            if slot < 0:
                return False
            if frees and self.in_sq > full:
                reap(False)
            if write_op:
                wr.set_wr_rdma(rkey, base + slot * size)
            post_send(wr)
            self.in_sq += 1
            self.quiet += 1
            return True
        msg.cache[self.poster_key] = post
        return post

    def _receiver(self, msg: Message, then: Callable[[], bool] | None = None) -> Callable[[], None]:
        """A closure doing recv_into(msg) but the advert (sent already, by _poster): reap, then take
        the message (``Protocol.deliver``); anything but msg's own data message (credits, a wrong length)
        goes the general way. ``then``: the _poster whose post follows this receive (the next request,
        the reply); its checks are made before the wait (``arm``), leaving only the peer's advert to
        compare after it."""
        p = self.proto
        frees, reap, poll, rcq, view = self.frees, self._reap, self._poll, self.rcq, self.recv_view
        kept, deliver, fail = p.kept, p.deliver, self.state.fail
        arm = getattr(then, "arm", None)
        n, key = msg.nbytes, id(msg)
        by_slot = imm_data(n)
        by_advert = imm_data(n, direct=True) if self._direct_span(msg) is not None else -1

        def recv() -> None:
            if frees:
                reap(True)
            got = kept()
            if got is not None:
                self._deliver(got, msg)
                return
            if arm is not None:
                if self.unsettled >= 0:
                    self._settle()
                arm()
            c = poll(rcq, True)
            imm = c[2]
            if imm != by_slot and imm != by_advert:  # a credit return, a wrong length: the general way
                if arm is not None:
                    arm(False)
                self._complete(c, msg)
                return
            try:
                where = deliver(c[1], n, imm == by_advert, n, key)
            except PeerError as exc:
                raise fail(str(exc)) from None
            if where is not None:
                msg.copy_from(view, where)
            self.unsettled = c[1]  # re-posted, and its credit counted, by this link's next poll (_settle)
        return recv

    def close(self) -> None:
        self.state.advance(Conn.CLOSED)


@dataclass(frozen=True)
class VerbsOptions(Options):
    title = "verbs transport"
    ib_dev: str | None = opt(None, metavar="NAME", help="RDMA device (default: the first; see `commbench devices`)")
    ib_port: int = opt(1, type=integer(1, 255), metavar="N", help="device port (default 1)")
    gid_index: int = opt(0, type=integer(0, 255), metavar="N",
                         help="GID table index (RoCE needs a populated one, often 1 or 3 for RoCE v2; default 0)")
    verbs_op: str = opt("send", choices=("send", "write"),
                        help="SEND/RECV into pre-posted receives, or RDMA WRITE with immediate (default send)")
    verbs_direct: str = opt("on", choices=("on", "off"),
                            help=f"messages of {DIRECT_FROM >> 10} KiB and more go straight into the buffers their "
                                 "waiting receiver advertised, without a copy (default on)")
    verbs_pool_mb: float = opt(64, type=number(above=0, hi=1 << 20, what=" (MB)"), metavar="MB",
                               help="receive pool per peer; slots are the largest message, at most 64 (default 64)")


class VerbsTransport(Transport[VerbsOptions]):
    name = "verbs"
    help = "RDMA verbs (pyverbs): RC queue pairs, SEND/RECV or RDMA WRITE with immediate (--verbs-op)"
    poll_modes = ("busy", "blocking")  # blocking = completion events

    Options = VerbsOptions
    presets = (("--verbs-op", "send"), ("--verbs-op", "write"))
    counter_keys = [key("received", "count", "messages the verbs transport received (all ranks, warm-up included)"),
                    key("received_direct", "count", "of those, placed straight into the receiver's buffers "
                                                    "(--verbs-direct)")]

    @classmethod
    def label(cls, opts: VerbsOptions, poll: str) -> str:
        return f"{cls.name} {opts.verbs_op}"

    @classmethod
    def check_usable(cls, opts: VerbsOptions) -> None:
        api = load_api()
        ctx = open_port(api, opts.ib_dev, opts.ib_port, opts.gid_index)[0]
        ctx.close()

    def __init__(self, world, config: RunConfig) -> None:
        super().__init__(world, config)
        o = self.opts
        self.api = load_api()
        self.events = config.poll == "blocking"
        # more ranks on this host than CPUs to run them: a busy poll yields the CPU when it finds nothing
        # (as MPI's mpi_yield_when_idle), else a spinning rank holds up the peer it waits for
        self.sharing = (world.hosts.count(world.host), len(os.sched_getaffinity(0)))
        self.yield_idle = not self.events and self.sharing[0] > self.sharing[1]
        self.op, self.port, self.gid_index = o.verbs_op, o.ib_port, o.gid_index
        self.direct = o.verbs_direct == "on"
        self.ctx, self.dev, self.port_attr, self.gid, dattr = open_port(self.api, o.ib_dev, self.port,
                                                                        self.gid_index)
        self.max_sge = max(1, min(int(dattr.max_sge), 30))
        largest = config.largest_message or DEFAULT_LARGEST
        self.plan = plan_pool(largest, self.op, int(o.verbs_pool_mb * (1 << 20)),
                              max_mr_size=int(dattr.max_mr_size), max_qp_wr=int(dattr.max_qp_wr))
        self.largest = largest
        self.pd = self.api.pd.PD(self.ctx)
        self.registry = Registry(self.api, self.pd)
        self.links: dict[int, VerbsLink] = {}
        self.old_alarm: tuple | None = None  # (SIGALRM's handler before the run's) once installed

    def alarm(self) -> bool:
        """Whether this thread may use SIGALRM to interrupt a sleep: on the main thread, whose handler
        (a no-op, so that the sleep returns EINTR) is installed once, until close."""
        if threading.current_thread() is not threading.main_thread():
            return False
        if self.old_alarm is None:
            self.old_alarm = (signal.signal(signal.SIGALRM, lambda *_: None),)
        return True

    def mode(self) -> str:
        direct = f", direct placement >= {DIRECT_FROM >> 10} KiB" if self.direct else ""
        ranks, cpus = self.sharing
        busy = f"busy-poll, yielding when idle ({ranks} ranks on {cpus} CPUs)" if self.yield_idle else "busy-poll"
        return f"{self.op}, {self.dev}:{self.port}, {'events' if self.events else busy}{direct}"

    def counters(self) -> dict[str, int]:
        """Messages received, and those placed straight into the receiver's buffers (--verbs-direct)."""
        return {"received": sum(k.proto.received for k in self.links.values() if k.proto),
                "received_direct": sum(k.proto.direct_in for k in self.links.values() if k.proto)}

    def connect(self, peers: Iterable[int]) -> dict[int, Link]:
        world = self.world
        peers = sorted(set(peers) - {world.rank})
        try:
            for p in peers:
                self.links[p] = VerbsLink(self, p, world.describe(p))
        except self.api.Error as exc:
            raise UsageError(f"cannot set up RDMA resources on {self.dev}: {exc}") from None
        mine = {str(p): link.local.to_json() for p, link in self.links.items()}
        everyone = world.exchange_json("verbs-qp", mine, self.links)
        for p, link in self.links.items():
            theirs = everyone[p]
            info = QpInfo.parse(theirs.get(str(world.rank)) if isinstance(theirs, dict) else theirs, p)
            info.check_against(link.local, self.largest)
            link.state.advance(Conn.EXCHANGED)
            try:
                link.to_rts(info)
            except self.api.Error as exc:
                raise link.state.fail(f"moving the queue pair to RTS failed: {exc}") from None
            link.state.advance(Conn.RTS)
        world.barrier("verbs-rts")  # every QP is RTS before anyone sends
        for link in self.links.values():
            link.state.advance(Conn.READY)
        return dict(self.links)

    def complete(self, requests: Sequence) -> None:
        """A window (several requests on one link: osu_bw's) goes through ``progress``: its sends
        unsignaled but the last, its receives taken from the slots with no adverts (a streaming sender
        outruns a window's adverts, each a doorbell of its own on the receiver). A lone request, or
        requests on several links, go the base way (a lone receive's advert does arrive first)."""
        if len(requests) > 1 and len({r.link for r in requests}) == 1:
            self.progress([(r.link, r.msg) for r in requests if not r.recv],
                          [(r.link, r.msg) for r in requests if r.recv])
        else:
            super().complete(requests)

    def progress(self, sends: Sequence[tuple[Link, Message]], recvs: Sequence[tuple[Link, Message]]) -> None:
        """Post sends while credits last and take receives as they come, on every link at once, so
        that two ranks sending each other more than a pool's depth never wait on each other. With
        completion events and one link, a pass that moved nothing sleeps until its receive CQ has
        something (data, or credits to send on), as perftest's -e does; with several links it spins."""
        todo_s: dict[VerbsLink, deque[Message]] = queues(sends)
        todo_r: dict[VerbsLink, deque[Message]] = queues(recvs)
        links = {*todo_s, *todo_r}
        sleeper = next(iter(links)) if self.events and len(links) == 1 else None
        deadline, spins = time.monotonic() + self.timeout, 0
        while any(todo_s.values()) or any(todo_r.values()):
            moved = False
            for link, q in todo_s.items():
                while q and link.proto.has_credit():
                    m = q.popleft()
                    if not q or not (m.cache.get(link.poster_key) or link._window_poster(m))():
                        link._post(m, more=bool(q))
                    moved = True
                if q:  # out of credits: look for returns (and keep data that arrives)
                    got = link._poll_rcq(False)
                    if got is not None:
                        link.proto.keep(got)
            for link, q in todo_r.items():
                while q:
                    got = link._recv_wc(False)
                    if got is None:
                        break
                    link._deliver(got, q.popleft())
                    moved = True
            if moved:
                deadline, spins = time.monotonic() + self.timeout, 0
            elif sleeper is not None:  # waits (and times out) in _poll; data that arrives is kept
                got = sleeper._poll_rcq(True, for_credit=True)
                if got is not None:
                    sleeper.proto.keep(got)
            else:
                spins += 1
                if self.yield_idle:
                    os.sched_yield()
                if (spins & SPIN_CHECK) == 0 and time.monotonic() > deadline:
                    raise PeerError(f"verbs progress: nothing moved within {self.timeout:g} s")
        for link in links:
            link._reap(True)

    def close(self) -> None:
        old, self.old_alarm = getattr(self, "old_alarm", None), None
        if old is not None:
            signal.signal(signal.SIGALRM, old[0] if old[0] is not None else signal.SIG_DFL)
        for link in self.links.values():
            link.close()
        ctx, self.ctx = getattr(self, "ctx", None), None
        if ctx is not None:
            ctx.close()  # pyverbs closes the QPs, CQs, MRs and the PD it created under this context
