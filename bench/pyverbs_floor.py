"""The floor for Python over pyverbs: perftest's loops (ib_send_lat's ping-pong, ib_send_bw's stream)
in bare pyverbs, and nothing else.

No credits, adverts, closures, harness or watchdog: one RC queue pair, one registered buffer per
direction, SEND into pre-posted receives, each receive re-posted at once. The ping-pong signals
every 32nd send; the stream (``--messages N``) keeps up to 128 sends outstanding, every 100th
signaled, against 512 posted receives (ib_send_bw's -t, --cq-mod and -r defaults).
Completions are busy-polled (an extended CQ read in place where the device has one, as commbench
does) or, with ``--events``, waited for as ``ib_send_lat -e`` does: ibv_get_cq_event, ack, re-arm,
poll; pyverbs can arm only a classic CQ, whose poll makes a ``WC`` object per completion. Whatever
commbench's verbs latency costs beyond this, commbench's own code costs; what this costs beyond
perftest, Python and pyverbs cost. ``bench/vs_perftest.py --floor`` runs it beside both.

    bash launchers/rxe-guest.sh .venv/bin/python bench/pyverbs_floor.py --size 65536 [--events] [--messages 2000]

Prints one JSON line: the ping-pong's one-way p50 and p10/p90 in us (half of each round trip, as
perftest's t_typical), or the stream's MB/s (10^6 B/s, the sender's first post to its last
completion). Set-up goes through a TCP socket on 127.0.0.1 (a JSON line each way: QP number, PSN,
GID, LID, MTU); no pickle, no eval.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import socket
import subprocess
import sys
import time

import numpy as np

SIGNAL_EVERY = 32  # ping-pong: every 32nd send is signaled
TX_DEPTH, RX_DEPTH, CQ_MOD = 128, 512, 100  # the stream: ib_send_bw's defaults (-t, -r, --cq-mod)
CQ_DEPTH = TX_DEPTH + RX_DEPTH  # never overrun: an overrun CQ puts its QPs in the error state


def endpoint(dev: str, gid_index: int, size: int, events: bool):
    """(namespace of pyverbs objects, local info for the peer) for one side, its QP in INIT."""
    import pyverbs.enums as e
    from pyverbs import cq, device, mr, pd, qp

    ctx = device.Context(name=dev)
    pattr = ctx.query_port(1)
    gid = str(ctx.query_gid(1, gid_index).gid)
    prot = pd.PD(ctx)
    access = e.IBV_ACCESS_LOCAL_WRITE
    n = max(size, 1)
    smr, rmr = mr.MR(prot, n, access), mr.MR(prot, n, access)
    for m, value in ((smr, 1), (rmr, 0)):  # touched: no first-touch page faults inside the loop
        np.ctypeslib.as_array((ctypes.c_uint8 * n).from_address(m.buf))[:] = value
    channel = cq.CompChannel(ctx) if events else None
    schannel = cq.CompChannel(ctx) if events else None  # the stream's sender sleeps on its send CQ
    scq, take_s = make_cq(cq, e, ctx, schannel)
    rcq, take_r = make_cq(cq, e, ctx, channel)
    inline = 64 if size <= 64 else 0
    cap = qp.QPCap(max_send_wr=TX_DEPTH, max_recv_wr=RX_DEPTH, max_send_sge=1, max_recv_sge=1, max_inline_data=inline)
    init = qp.QPInitAttr(qp_type=e.IBV_QPT_RC, scq=scq, rcq=rcq, cap=cap, sq_sig_all=0)
    attr = qp.QPAttr(port_num=1)
    attr.qp_access_flags = access
    q = qp.QP(prot, init, attr)
    psn = int.from_bytes(os.urandom(3), "big")
    me = {"qpn": q.qp_num, "psn": psn, "gid": gid, "lid": int(pattr.lid), "mtu": int(pattr.active_mtu)}
    ns = argparse.Namespace(ctx=ctx, pd=prot, smr=smr, rmr=rmr, channel=channel, schannel=schannel, scq=scq,
                            rcq=rcq, take_s=take_s, take_r=take_r, qp=q, psn=psn, e=e, inline=inline,
                            gid_index=gid_index, size=size)
    ns.rwr, ns.quiet, ns.loud = work_requests(ns)
    return ns, me


def make_cq(cq_mod, e, ctx, channel):
    """(CQ, take()): take() gives the next completion's (status, wr_id) or None. Extended and read in
    place where the device has extended CQs and no channel is wanted; else classic (a WC object a poll)."""
    from pyverbs.pyverbs_error import PyverbsError

    if channel is None and hasattr(cq_mod, "CQEX"):
        attr = cq_mod.CqInitAttrEx(cqe=CQ_DEPTH, wc_flags=e.IBV_WC_EX_WITH_BYTE_LEN,
                                   comp_mask=e.IBV_CQ_INIT_ATTR_MASK_FLAGS, flags=0)
        try:
            cqx = cq_mod.CQEX(ctx, attr)
        except PyverbsError:  # a device without extended CQs: a classic one
            pass
        else:
            pattr = cq_mod.PollCqAttr()

            def in_place():
                if cqx.start_poll(pattr):
                    return None
                got = (cqx.status, cqx.wr_id)
                cqx.end_poll()
                return got
            return cqx, in_place
    c = cq_mod.CQ(ctx, CQ_DEPTH, None, channel, 0)

    def by_object():
        k, wcs = c.poll(1)
        return (wcs[0].status, wcs[0].wr_id) if k else None
    return c, by_object


def connect(ns, peer: dict) -> None:
    from pyverbs import addr, qp

    e = ns.e
    attr = qp.QPAttr(port_num=1)
    attr.qp_access_flags = e.IBV_ACCESS_LOCAL_WRITE
    attr.path_mtu = min(peer["mtu"], ns.ctx.query_port(1).active_mtu)
    attr.dest_qp_num, attr.rq_psn, attr.sq_psn = peer["qpn"], peer["psn"], ns.psn
    attr.max_dest_rd_atomic = attr.max_rd_atomic = 1
    attr.min_rnr_timer, attr.timeout, attr.retry_cnt, attr.rnr_retry = 12, 14, 7, 7
    gr = addr.GlobalRoute(dgid=addr.GID(peer["gid"]), sgid_index=ns.gid_index)
    attr.ah_attr = addr.AHAttr(port_num=1, is_global=1, gr=gr, dlid=peer["lid"])
    ns.qp.to_rts(attr)


def work_requests(ns):
    """(the receive, an unsignaled send, a signaled send): every receive lands in the one receive
    buffer and every send leaves from the one send buffer, as perftest's do."""
    from pyverbs import wr

    e = ns.e
    rwr = wr.RecvWR(wr_id=1, num_sge=1, sg=[wr.SGE(ns.rmr.buf, max(ns.size, 1), ns.rmr.lkey)])
    sge = wr.SGE(ns.smr.buf, ns.size, 0 if ns.inline else ns.smr.lkey)
    flags = e.IBV_SEND_INLINE if ns.inline else 0
    quiet = wr.SendWR(wr_id=2, opcode=e.IBV_WR_SEND, num_sge=1, sg=[sge], send_flags=flags)
    loud = wr.SendWR(wr_id=3, opcode=e.IBV_WR_SEND, num_sge=1, sg=[sge], send_flags=flags | e.IBV_SEND_SIGNALED)
    return rwr, quiet, loud


def check(c, what: str):
    if c[0]:
        raise SystemExit(f"pyverbs_floor: a {what} failed with status {c[0]}")
    return c


def pingpong(ns, first: bool, iters: int, warmup: int) -> np.ndarray:
    """Round trips in ns (first: this side sends first and times)."""
    rwr, quiet, loud = ns.rwr, ns.quiet, ns.loud
    post_recv, post_send, take_r, take_s = ns.qp.post_recv, ns.qp.post_send, ns.take_r, ns.take_s
    for _ in range(4):
        post_recv(rwr)
    channel, rcq = ns.channel, ns.rcq
    if channel is not None:
        rcq.req_notify()

    def wait() -> None:
        if channel is None:
            c = take_r()
            while c is None:
                c = take_r()
        else:  # as perftest's ctx_notify_events, then one poll
            while True:
                channel.get_cq_event(rcq)
                rcq.ack_events(1)
                rcq.req_notify()
                c = take_r()
                if c is not None:
                    break
        check(c, "receive")
        post_recv(rwr)

    sent = 0

    def send() -> None:
        nonlocal sent
        sent += 1
        if sent % SIGNAL_EVERY:
            post_send(quiet)
            return
        post_send(loud)
        c = take_s()
        while c is None:
            c = take_s()
        check(c, "send")

    total = warmup + iters
    stamps = np.zeros(total + 1, np.int64)
    clock = time.perf_counter_ns
    if first:
        for i in range(total):
            stamps[i] = clock()
            send()
            wait()
        stamps[total] = clock()
    else:
        for _ in range(total):
            wait()
            send()
    return np.diff(stamps)[warmup:]


def next_completion(take, cq, channel):
    """The next completion: busy-polled, or (a channel) polled, armed, polled again, then slept for."""
    c = take()
    while c is None and channel is not None:
        cq.req_notify()
        c = take()
        if c is None:
            channel.get_cq_event(cq)
            cq.ack_events(1)
            c = take()
    while c is None:
        c = take()
    return c


def stream(ns, messages: int) -> int:
    """ib_send_bw's sender: up to TX_DEPTH sends outstanding, every CQ_MOD-th signaled. Its time from
    the first post to the last completion, ns."""
    quiet, loud = ns.quiet, ns.loud
    post_send, take, cq, channel = ns.qp.post_send, ns.take_s, ns.scq, ns.schannel
    posted = completed = 0
    t0 = time.perf_counter_ns()
    while completed < messages:
        while posted < messages and posted - completed < TX_DEPTH:
            posted += 1
            post_send(loud if posted % CQ_MOD == 0 or posted == messages else quiet)
        check(next_completion(take, cq, channel), "send")
        completed = min(completed + CQ_MOD, messages)
    return time.perf_counter_ns() - t0


def receive_stream(ns, messages: int) -> None:
    """ib_send_bw's receiver: RX_DEPTH receives posted before the sender may start (``ready``), each
    re-posted as it completes."""
    rwr, take, cq, channel, post_recv = ns.rwr, ns.take_r, ns.rcq, ns.channel, ns.qp.post_recv
    for _ in range(messages):
        check(next_completion(take, cq, channel), "receive")
        post_recv(rwr)


def side(args) -> None:
    ns, me = endpoint(args.dev, args.gid_index, args.size, args.events)
    if args.role == "server":
        srv = socket.create_server(("127.0.0.1", 0))
        print(srv.getsockname()[1], flush=True)
        srv.settimeout(120)
        sock, _ = srv.accept()
    else:
        sock = socket.create_connection(("127.0.0.1", args.port), timeout=120)
    f = sock.makefile("rwb")
    f.write(json.dumps(me).encode() + b"\n")
    f.flush()
    peer = json.loads(f.readline())
    if set(peer) != set(me) or not all(isinstance(v, (int, str)) for v in peer.values()):
        raise SystemExit("pyverbs_floor: a malformed set-up line from the peer")
    connect(ns, peer)
    if args.messages and args.role == "server":
        for _ in range(RX_DEPTH):  # the stream's receives, posted before the peer may send
            ns.qp.post_recv(ns.rwr)
    f.write(b"r\n")  # both QPs are RTS before anyone sends
    f.flush()
    if f.readline() != b"r\n":
        raise SystemExit("pyverbs_floor: the peer went away during set-up")
    if args.messages:
        if args.role == "client":
            took = stream(ns, args.messages)
            print(json.dumps({"size": args.size, "messages": args.messages, "events": args.events,
                              "mb_s": round(args.size * args.messages / took * 1000, 3)}), flush=True)
        else:
            receive_stream(ns, args.messages)
        f.close()
        sock.close()
        return
    rtt = pingpong(ns, args.role == "client", args.iterations, args.warmup)
    if args.role == "client":
        one_way = rtt / 2 / 1000
        p10, p50, p90 = np.percentile(one_way, [10, 50, 90])
        print(json.dumps({"size": args.size, "iterations": args.iterations, "events": args.events,
                          "p50_us": round(float(p50), 2), "p10_us": round(float(p10), 2),
                          "p90_us": round(float(p90), 2)}), flush=True)
    f.close()
    sock.close()


def run(dev: str, gid_index: int, size: int, events: bool, iterations: int = 200, warmup: int = 20,
        messages: int = 0) -> dict:
    """Both sides as processes of their own; the client's result (``messages``: the stream instead)."""
    common = [sys.executable, __file__, "--dev", dev, "--gid-index", str(gid_index), "--size", str(size),
              "-i", str(iterations), "-x", str(warmup), "--messages", str(messages),
              *(["--events"] if events else [])]
    srv = subprocess.Popen([*common, "--role", "server"], stdout=subprocess.PIPE, text=True)
    try:
        port = srv.stdout.readline().strip()
        if not port:
            raise SystemExit("pyverbs_floor: the server side did not start")
        out = subprocess.run([*common, "--role", "client", "--port", port], capture_output=True, text=True,
                             timeout=600)
        if out.returncode:
            raise SystemExit(f"pyverbs_floor: the client failed:\n{out.stderr}")
        srv.wait(timeout=120)
    finally:
        if srv.poll() is None:
            srv.kill()
            srv.wait()
    return json.loads(out.stdout.splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dev", default=os.environ.get("COMMBENCH_IB_DEV", "rxe0"))
    ap.add_argument("--gid-index", type=int, default=int(os.environ.get("COMMBENCH_GID_INDEX", "1")))
    ap.add_argument("--size", type=int, default=65536)
    ap.add_argument("--events", action="store_true", help="wait for receives with completion events (as -e)")
    ap.add_argument("-i", "--iterations", type=int, default=200)
    ap.add_argument("-x", "--warmup", type=int, default=20)
    ap.add_argument("--messages", type=int, default=0,
                    help="stream this many messages one way, as ib_send_bw, instead of the ping-pong")
    ap.add_argument("--role", choices=("server", "client"), help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.role:
        side(args)
    else:
        print(json.dumps(run(args.dev, args.gid_index, args.size, args.events, args.iterations, args.warmup,
                             args.messages)))


if __name__ == "__main__":
    main()
