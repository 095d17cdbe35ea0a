"""The verbs transport's device layer: pyverbs loaded, a port opened and checked, memory registered
once per backing array, completion queues read in place where the device allows."""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from functools import partial
from types import SimpleNamespace

import numpy as np

from commbench.core.errors import Unavailable, UsageError
from commbench.core.measure.message import Message
from commbench.transports._verbs_plan import port_problem
from commbench.transports._verbs_protocol import layout_of

WC_ERRORS = {12: "the peer stopped acknowledging (transport retries exhausted): it died or its port went down",
             13: "the peer had no receive posted (RNR retries exhausted)",
             5: "the queue pair was flushed after an earlier error",
             2: "local queue-pair operation error: on Soft-RoCE, a send from memory no longer registered",
             10: "the peer refused the remote access (rkey/address)",
             4: "local protection error (a buffer that is not registered)"}


def load_api() -> SimpleNamespace:
    """The pyverbs modules this transport uses, or a one-line UsageError on how to get them."""
    try:
        import pyverbs.enums as enums
        from pyverbs import addr, cq, device, mr, pd, qp, wr
        from pyverbs.pyverbs_error import PyverbsError, PyverbsRDMAError
    except ImportError as exc:
        raise Unavailable(f"pyverbs is not importable ({exc}): install the distribution's python3-pyverbs "
                          "(rdma-core) and re-run launchers/setup.sh, which links it into .venv") from None
    return SimpleNamespace(addr=addr, cq=cq, device=device, mr=mr, pd=pd, qp=qp, wr=wr, e=enums,
                           Error=PyverbsError, RDMAError=PyverbsRDMAError)


def _name(dev) -> str:
    n = dev.name
    return n.decode() if isinstance(n, bytes) else str(n)


def open_port(api: SimpleNamespace, dev: str | None, port: int, gid_index: int):
    """(context, device name, port attributes, GID string, device attributes) after every check."""
    try:
        devs = api.device.get_device_list()
    except api.Error as exc:
        devs, why = [], str(exc)
    else:
        why = "the device list is empty"
    names = [_name(d) for d in devs]
    if not names:
        raise Unavailable(f"no RDMA device found (pyverbs: {why})")
    if dev is None:
        dev = names[0]
    elif dev not in names:
        raise UsageError(f"--ib-dev {dev}: no such RDMA device; devices here: {', '.join(names)}")
    try:
        ctx = api.device.Context(name=dev)
        dattr = ctx.query_device()
        if not 1 <= port <= dattr.phys_port_cnt:
            ctx.close()
            raise UsageError(f"--ib-port {port}: {dev} has ports 1..{dattr.phys_port_cnt}")
        pattr = ctx.query_port(port)
        gid = None
        if gid_index < pattr.gid_tbl_len:
            gid = ctx.query_gid(port, gid_index).gid
    except api.Error as exc:
        raise UsageError(f"cannot open port {port} of RDMA device {dev}: {exc}") from None
    problem = port_problem(dev, port, int(pattr.state), int(pattr.link_layer), int(pattr.lid), gid)
    if gid_index >= pattr.gid_tbl_len:
        problem = f"--gid-index {gid_index}: port {port} of {dev} has {pattr.gid_tbl_len} GIDs"
    if problem:
        ctx.close()
        raise UsageError(problem)
    return ctx, dev, pattr, gid, dattr


class Registry:
    """Memory registered once per backing array (the root of a numpy view chain), kept alive with it.
    Registered for remote writes too: a receive buffer may be advertised to the peer (only ever to the
    peer of this run's queue pairs, and only while a receive waits in it). Thread-safe: a rank serving
    several peers from threads of its own (the PS emulator) sends the same arrays on each; two
    registrations of one array would leave one MR dropped, and its lkey invalid, under a send."""

    def __init__(self, api: SimpleNamespace, pd) -> None:
        self.api, self.pd = api, pd
        self.mrs: dict[tuple[int, int], tuple[object, np.ndarray]] = {}
        self.lock = threading.Lock()

    def _mr(self, arr: np.ndarray):
        """(MR, start, size) of the registration covering arr."""
        root = arr
        while isinstance(root.base, np.ndarray):
            root = root.base
        start, size = root.ctypes.data, root.nbytes
        a = arr.ctypes.data
        if not (start <= a and a + arr.nbytes <= start + size):  # not a plain view: register the array itself
            root, start, size = arr, a, arr.nbytes
        with self.lock:
            hit = self.mrs.get((start, size))
            if hit is None:
                e = self.api.e
                mr = self.api.mr.MR(self.pd, size, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE,
                                    address=start)
                hit = self.mrs[(start, size)] = (mr, root)
        return hit[0], start, size

    def lkey(self, arr: np.ndarray) -> int:
        return self._mr(arr)[0].lkey

    def span(self, msg: Message) -> tuple[int, int, int, int, int] | None:
        """(address, bytes, lkey, rkey, layout) of one registered range holding all of msg's buffers
        (a message carved from one mapping, padding included), or None if they are not in one."""
        hit: object = msg.cache.get("verbs-span")
        if hit is None:
            arrays = [a for a in msg.arrays if len(a)]
            hit = False
            if arrays:
                mr, start, size = self._mr(arrays[0])
                addrs = [a.ctypes.data for a in arrays]
                first, end = addrs[0], addrs[-1] + len(arrays[-1])
                apart = all(a + len(x) <= b for a, x, b in zip(addrs, arrays, addrs[1:], strict=False))
                if apart and start <= first and end <= start + size:
                    hit = (first, end - first, mr.lkey, mr.rkey, layout_of(addrs, tuple(len(a) for a in arrays)))
            msg.cache["verbs-span"] = hit
        return hit if isinstance(hit, tuple) else None


def region(mr, size: int) -> np.ndarray:
    """A numpy view of a pyverbs MR's own buffer."""
    return np.ctypeslib.as_array((ctypes.c_uint8 * size).from_address(mr.buf))


Completion = tuple[int, int, int, int, int, int]  # status, wr_id, imm_data, opcode, byte_len, vendor_err


def make_cq(api: SimpleNamespace, ctx, depth: int, channel) -> tuple[object, Callable[[], Completion | None]]:
    """A completion queue and its take() (the next completion, or None). Extended (ibv_create_cq_ex, read
    in place with ibv_start_poll) where the device has them and no completion channel is wanted (pyverbs
    cannot arm an extended CQ): a classic poll makes a pyverbs WC object per completion, a cost paid
    between a completion and the receiver seeing it (docs/notes/verbs-performance.md)."""
    if channel is None and hasattr(api.cq, "CQEX"):
        e = api.e
        attr = api.cq.CqInitAttrEx(cqe=depth, wc_flags=e.IBV_WC_EX_WITH_BYTE_LEN | e.IBV_WC_EX_WITH_IMM,
                                   comp_mask=e.IBV_CQ_INIT_ATTR_MASK_FLAGS, flags=0)
        try:
            cq = api.cq.CQEX(ctx, attr)
        except api.Error:
            pass  # no extended CQs on this device: a classic one
        else:
            return cq, partial(_take_in_place, cq, api.cq.PollCqAttr())
    cq = api.cq.CQ(ctx, depth, None, channel, 0)
    return cq, partial(_take_wc, cq)


def _take_in_place(cq, attr) -> Completion | None:
    if cq.start_poll(attr):  # ENOENT: none
        return None
    status, wr_id, imm = cq.status, cq.wr_id, cq.read_imm_data()
    rest = (cq.read_opcode(), cq.read_byte_len(), cq.read_vendor_err()) if status else (0, 0, 0)
    cq.end_poll()
    return (status, wr_id, imm, *rest)


def _take_wc(cq) -> Completion | None:
    n, wcs = cq.poll(1)
    if not n:
        return None
    w = wcs[0]
    return w.status, w.wr_id, w.imm_data, w.opcode, w.byte_len, w.vendor_err


