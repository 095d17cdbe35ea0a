"""An in-memory RC fabric with pyverbs' object shapes, for testing the verbs transport's protocol here
(no RDMA device). It enforces what hardware would: sends only from RTS, receives must be posted
(else an RNR error completion), scatter/gather entries must lie in a registered region with the
right lkey (inline data excepted), RDMA writes need a matching rkey, range and remote-write access,
receive SGEs must hold the data. An MR nothing holds any more is deregistered (pyverbs deregisters
on deallocation), and registering user memory takes a while (pinning its pages), as on a device,
so that threads may switch meanwhile. Real pyverbs supplies the enums and error classes.
"""

from __future__ import annotations

import ctypes
import errno
import itertools
import threading
import time
import weakref
from collections import deque
from types import SimpleNamespace

import numpy as np
import pyverbs.enums as e
from pyverbs.pyverbs_error import PyverbsError, PyverbsRDMAError

LOCK = threading.RLock()
QPS: dict[int, FakeQP] = {}
KEYS = itertools.count(0x1000)
QPNS = itertools.count(0x100)
PIN_S = 0.002  # s to register user memory


def registered(pd) -> list:
    """The regions registered in ``pd`` now: a WeakSet another rank's thread may add to while it is read
    (its iteration then raises), so read again until a whole snapshot is had."""
    while True:
        try:
            return list(pd.mrs)
        except RuntimeError:  # changed size during iteration
            continue


class Stats:
    posts = 0  # ibv_post_send calls (each may carry several work requests)
    posted_sends = 0
    sge_counts: list[int] = []
    inline_sends = 0
    signaled_sends = 0
    registrations = 0
    cqex = 0  # extended CQs made


class Dev:
    def __init__(self, name: str) -> None:
        self.name = name.encode()


class FakeContext:
    max_sge = 4
    port_state = 4
    link_layer = 1
    lid = 7

    def __init__(self, name: str) -> None:
        self.name = name
        self.closed = False

    def query_device(self):
        return SimpleNamespace(phys_port_cnt=1, max_sge=self.max_sge, max_mr_size=1 << 40, max_qp_wr=16384)

    def query_port(self, port: int):
        return SimpleNamespace(state=self.port_state, link_layer=self.link_layer, lid=self.lid, active_mtu=5,
                               gid_tbl_len=4)

    def query_gid(self, port: int, index: int):
        return SimpleNamespace(gid="fe80:0000:0000:0000:0202:c9ff:fe00:%04x" % (index + 1))

    def close(self) -> None:
        self.closed = True


class FakePD:
    def __init__(self, ctx) -> None:
        self.ctx = ctx
        self.mrs: weakref.WeakSet[FakeMR] = weakref.WeakSet()  # the registered, while something holds them


class FakeMR:
    def __init__(self, pd: FakePD, length: int, access: int, address: int | None = None) -> None:
        self.length = length
        if address is None:
            self.mem = np.zeros(max(length, 1), dtype=np.uint8)
            address = self.mem.ctypes.data
        else:
            time.sleep(PIN_S)
        self.buf = address
        self.lkey = next(KEYS)
        self.rkey = next(KEYS)
        self.access = access
        pd.mrs.add(self)
        Stats.registrations += 1

    def covers(self, addr: int, length: int) -> bool:
        return self.buf <= addr and addr + length <= self.buf + self.length


class WC(SimpleNamespace):
    vendor_err = 0


class FakeCQ:
    def __init__(self, ctx, cqe, cq_context=None, channel=None, comp_vector=0) -> None:
        self.q: deque[WC] = deque()
        self.cqe = cqe
        self.events = 0  # sleeps in get_cq_event on this CQ

    def push(self, wc: WC) -> None:
        with LOCK:
            if len(self.q) >= self.cqe:
                raise AssertionError("CQ overrun: the transport let more completions pile up than its CQ holds")
            self.q.append(wc)

    def _pop(self) -> WC:
        wc = self.q.popleft()
        if getattr(wc, "qp", None) is not None:  # a send completion frees its slot and those of the
            wc.qp.sq_used -= wc.frees  # unsignaled sends before it
        return wc

    def poll(self, n: int = 1):
        with LOCK:
            out = [self._pop() for _ in range(min(n, len(self.q)))]
        return len(out), out

    def req_notify(self, solicited_only: int = 0) -> None:
        pass

    def ack_events(self, n: int) -> None:
        pass


class CqInitAttrEx(SimpleNamespace):
    pass


class PollCqAttr:
    pass


class FakeCQEX(FakeCQ):
    """An extended CQ (pyverbs CQEX): completions read in place between start_poll and end_poll."""

    def __init__(self, ctx, attr: CqInitAttrEx) -> None:
        super().__init__(ctx, attr.cqe)
        self.cur: WC | None = None
        Stats.cqex += 1

    def poll(self, n: int = 1):
        raise AssertionError("an extended CQ has no poll(): start_poll/end_poll")

    def start_poll(self, attr: PollCqAttr) -> int:
        assert self.cur is None, "start_poll twice without end_poll"
        with LOCK:
            if not self.q:
                return errno.ENOENT
            self.cur = self._pop()
        return 0

    def end_poll(self) -> None:
        assert self.cur is not None, "end_poll without start_poll"
        self.cur = None

    status = property(lambda self: self.cur.status)
    wr_id = property(lambda self: self.cur.wr_id)

    def read_imm_data(self) -> int:
        return getattr(self.cur, "imm_data", 0)

    def read_opcode(self) -> int:
        return self.cur.opcode

    def read_byte_len(self) -> int:
        return self.cur.byte_len

    def read_vendor_err(self) -> int:
        return self.cur.vendor_err


class FakeChannel:
    def __init__(self, ctx) -> None:
        pass

    def get_cq_event(self, cq: FakeCQ) -> None:
        cq.events += 1
        while not cq.q:
            time.sleep(0.0005)


class SGE:
    def __init__(self, addr: int, length: int, lkey: int) -> None:
        self.addr, self.length, self.lkey = addr, length, lkey


class RecvWR:
    def __init__(self, wr_id: int = 0, num_sge: int = 1, sg=None) -> None:
        if not sg:
            raise PyverbsError("A WR needs at least one SGE")
        self.wr_id, self.num_sge, self.sg = wr_id, num_sge, list(sg)


class SendWR:
    def __init__(self, wr_id=0, opcode=e.IBV_WR_SEND, num_sge=1, imm_data=0, sg=None,
                 send_flags=e.IBV_SEND_SIGNALED) -> None:  # pyverbs' default: signaled
        if not sg:
            raise PyverbsError("A WR needs at least one SGE")
        self.wr_id, self.opcode, self.num_sge, self.imm_data = wr_id, opcode, num_sge, imm_data
        self.sg, self.send_flags = list(sg), send_flags
        self.rkey = self.remote_addr = 0
        self._next: SendWR | None = None

    @property
    def next_wr(self) -> SendWR | None:
        return self._next

    @next_wr.setter
    def next_wr(self, wr: SendWR) -> None:  # as pyverbs: a list is made, never unmade
        if wr is None:
            raise TypeError("Argument 'val' must not be None")
        self._next = wr

    def set_wr_rdma(self, rkey: int, addr: int) -> None:
        self.rkey, self.remote_addr = rkey, addr


class QPInitAttr:
    def __init__(self, qp_type, scq, rcq, cap, sq_sig_all=0, **kw) -> None:
        self.qp_type, self.scq, self.rcq, self.cap, self.sq_sig_all = qp_type, scq, rcq, cap, sq_sig_all


class FakeQP:
    def __init__(self, pd: FakePD, init: QPInitAttr, attr) -> None:
        self.pd, self.init = pd, init
        self.qp_num = next(QPNS)
        self.rq: deque[RecvWR] = deque()
        self.state = "init"
        self.dest = None
        self.sq_used = 0  # send queue slots taken: freed when a signaled completion is polled
        self.unsignaled = 0  # sends posted without a completion since the last signaled one
        QPS[self.qp_num] = self

    def post_recv(self, wr: RecvWR) -> None:
        with LOCK:
            if len(self.rq) >= self.init.cap.max_recv_wr:
                raise PyverbsRDMAError("Failed to post recv (RQ full)")
            self.rq.append(wr)

    def to_rts(self, attr) -> None:
        self.dest = attr.dest_qp_num
        self.state = "rts"

    def _gather(self, wr: SendWR) -> bytes | None:
        inline = wr.send_flags & e.IBV_SEND_INLINE
        data = b""
        for s in wr.sg[:wr.num_sge]:
            if not inline and not any(m.lkey == s.lkey and m.covers(s.addr, s.length) for m in registered(self.pd)):
                return None
            data += ctypes.string_at(s.addr, s.length)
        return data

    def post_send(self, wr: SendWR) -> None:
        """Post wr and the work requests linked behind it, in order (one ibv_post_send)."""
        Stats.posts += 1
        while wr is not None:
            self._post_one(wr)
            wr = wr.next_wr

    def _post_one(self, wr: SendWR) -> None:
        if self.state != "rts":
            raise PyverbsRDMAError(f"Failed to post send (QP in {self.state})")
        Stats.posted_sends += 1
        Stats.sge_counts.append(wr.num_sge)
        Stats.inline_sends += bool(wr.send_flags & e.IBV_SEND_INLINE)
        with LOCK:
            if self.sq_used >= self.init.cap.max_send_wr:
                raise PyverbsRDMAError("Failed to post send (SQ full: unsignaled sends never reaped)")
            self.sq_used += 1
            status = self._deliver(wr)
            signaled = wr.send_flags & e.IBV_SEND_SIGNALED or self.init.sq_sig_all
            Stats.signaled_sends += bool(signaled)
            if signaled or status:  # a failed send always completes, as on a device
                self.init.scq.push(WC(status=status, wr_id=wr.wr_id, opcode=e.IBV_WC_SEND, byte_len=0, imm_data=0,
                                      qp=self, frees=self.unsignaled + 1))
                self.unsignaled = 0
            else:
                self.unsignaled += 1

    def _deliver(self, wr: SendWR) -> int:
        peer = QPS.get(self.dest)
        data = self._gather(wr)
        if data is None:
            return e.IBV_WC_LOC_PROT_ERR
        if peer is None or peer.state != "rts":
            return e.IBV_WC_RETRY_EXC_ERR
        writable = any(m.rkey == wr.rkey and m.covers(wr.remote_addr, len(data))
                       and m.access & e.IBV_ACCESS_REMOTE_WRITE for m in registered(peer.pd))
        if wr.opcode in (e.IBV_WR_RDMA_WRITE, e.IBV_WR_RDMA_WRITE_WITH_IMM) and not writable:
            return e.IBV_WC_REM_ACCESS_ERR
        if wr.opcode == e.IBV_WR_RDMA_WRITE:  # one-sided: no receive consumed, nothing on the peer's CQ
            ctypes.memmove(wr.remote_addr, data, len(data))
            return 0
        if not peer.rq:
            return e.IBV_WC_RNR_RETRY_EXC_ERR
        rwr = peer.rq.popleft()
        if wr.opcode == e.IBV_WR_SEND_WITH_IMM:
            room = rwr.sg[0]
            if len(data) > room.length:
                return e.IBV_WC_REM_INV_REQ_ERR
            ctypes.memmove(room.addr, data, len(data))
            opcode = e.IBV_WC_RECV
        elif wr.opcode == e.IBV_WR_RDMA_WRITE_WITH_IMM:
            ctypes.memmove(wr.remote_addr, data, len(data))
            opcode = e.IBV_WC_RECV_RDMA_WITH_IMM
        else:
            raise AssertionError(f"unexpected opcode {wr.opcode}")
        peer.init.rcq.push(WC(status=0, wr_id=rwr.wr_id, opcode=opcode, byte_len=len(data), imm_data=wr.imm_data))
        return 0


def api(devices=("fake_0",), extended: bool = True) -> SimpleNamespace:
    """The fake pyverbs API; ``extended``: with extended CQs (CQEX), as rdma-core has them."""
    import pyverbs.addr as addr
    import pyverbs.qp as real_qp

    return SimpleNamespace(
        device=SimpleNamespace(get_device_list=lambda: [Dev(n) for n in devices], Context=FakeContext),
        pd=SimpleNamespace(PD=FakePD), mr=SimpleNamespace(MR=FakeMR),
        cq=SimpleNamespace(CQ=FakeCQ, CompChannel=FakeChannel, **(
            {"CQEX": FakeCQEX, "CqInitAttrEx": CqInitAttrEx, "PollCqAttr": PollCqAttr} if extended else {})),
        qp=SimpleNamespace(QP=FakeQP, QPInitAttr=QPInitAttr, QPCap=real_qp.QPCap, QPAttr=real_qp.QPAttr),
        wr=SimpleNamespace(SGE=SGE, RecvWR=RecvWR, SendWR=SendWR), addr=addr, e=e,
        Error=PyverbsError, RDMAError=PyverbsRDMAError)


class FakeWorld:
    """Two or more ranks in threads of one process: the collectives the transport uses."""

    def __init__(self, rank: int, size: int, shared: dict) -> None:
        self.rank, self.size, self.shared = rank, size, shared
        self.host = "localhost"
        self.hosts = [self.host] * size

    def describe(self, rank: int) -> str:
        return f"rank {rank} on host localhost"

    def check_alive(self) -> None:
        """A long wait asks whether a rank died: the threads of one process never do."""

    def allgather_json(self, name: str, obj):
        import json

        s = self.shared
        with s["lock"]:
            s.setdefault(name, {})[self.rank] = json.loads(json.dumps(obj))
        s["barrier"].wait(10)
        return [s[name][r] for r in range(self.size)]

    def exchange_json(self, name: str, obj, peers) -> dict:
        """Every rank publishes obj and reads its peers' (core/run/collectives.py)."""
        everyone = self.allgather_json(name, obj)
        return {p: everyone[p] for p in sorted(set(peers)) if p != self.rank}

    def barrier(self, name: str = "barrier") -> None:
        self.shared["barrier"].wait(10)


def worlds(size: int = 2) -> list[FakeWorld]:
    shared = {"lock": threading.Lock(), "barrier": threading.Barrier(size)}
    return [FakeWorld(r, size, shared) for r in range(size)]
