"""Ground truth without root: the harness and the benchmarks' formulas over an in-process wire whose
per-message delay and rate are known, so latency, bandwidth, bibw, pairs, time mode, precision mode
and all-reduce must come out at known answers; the PS emulator is exact for every W; statistics
follow their rules; the results schema is pinned."""

from __future__ import annotations

import argparse
import queue
import threading
import time

import numpy as np
import pytest

from commbench.benchmarks.allreduce import AllReduceBench
from commbench.benchmarks.base import Context, measure_point
from commbench.benchmarks.p2p_bandwidth import P2PBandwidth, P2PBibw
from commbench.benchmarks.p2p_latency import P2PLatency
from commbench.benchmarks.ps_throughput import PSThroughput
from commbench.core.harness import Loops, Summary, median_ci
from commbench.core.message import Message
from commbench.core.payload import Payload
from commbench.emulators.ps import Shard, Worker, expected_value
from commbench.transports.base import Link, Transport

DELAY = 0.002  # s per message
RATE = 200e6  # B/s per direction of a link


class ThreadWorld:
    """The World's collective calls for ranks that are threads of one process."""

    def __init__(self, rank: int, shared: dict) -> None:
        self.rank, self.size, self.shared = rank, shared["size"], shared
        self.hosts = ["here"] * self.size
        self.host = "here"
        self.seq = 0

    def _slot(self, name: str) -> dict:
        self.seq += 1
        with self.shared["lock"]:
            return self.shared["slots"].setdefault((self.seq, name), {})

    def barrier(self, name: str = "barrier") -> None:
        self.shared["barrier"].wait(10)

    def bcast_json(self, name: str, obj: object = None, root: int = 0, timeout: float | None = None) -> object:
        slot = self._slot(name)
        if self.rank == root:
            slot["v"] = obj
        self.barrier()
        return slot["v"]

    def gather_json(self, name: str, obj: object, root: int = 0) -> list | None:
        slot = self._slot(name)
        slot[self.rank] = obj
        self.barrier()
        return [slot[r] for r in range(self.size)] if self.rank == root else None

    def describe(self, rank: int) -> str:
        return f"rank {rank}"


class Wire:
    """One direction of a link: messages leave one after another at RATE and arrive DELAY later."""

    def __init__(self) -> None:
        self.q: queue.Queue = queue.Queue()
        self.free_at = 0.0


class WireLink(Link):
    def __init__(self, peer: int, out: Wire, inbox: Wire) -> None:
        super().__init__(peer, f"rank {peer}")
        self.out, self.inbox = out, inbox

    def send(self, msg: Message) -> None:
        start = max(time.perf_counter(), self.out.free_at)
        self.out.free_at = start + msg.nbytes / RATE
        self.out.q.put((self.out.free_at + DELAY, [bytes(v) for v in msg.views]))

    def recv_into(self, msg: Message) -> None:
        due, bufs = self.inbox.q.get(timeout=10)
        while (left := due - time.perf_counter()) > 0:
            time.sleep(left if left > 2e-4 else 0)
        assert msg.assign(bufs)


class WireTransport(Transport):
    name = "wire"
    help = "test wire"

    def __init__(self, world, wires: dict) -> None:
        self.world, self.wires, self.timeout = world, wires, 10.0

    def connect(self, peers) -> dict[int, Link]:
        me = self.world.rank
        return {p: WireLink(p, self.wires[(me, p)], self.wires[(p, me)]) for p in peers}

    def progress(self, sends, recvs) -> None:  # sends never block on the wire
        for link, msg in sends:
            link.send(msg)
        for link, msg in recvs:
            link.recv_into(msg)


def run_ranks(bench_cls, n: int, payload: Payload, loops: Loops, validate: str | None = None, **opts) -> dict:
    """Every rank a thread; returns rank 0's row."""
    args = argparse.Namespace(window=opts.get("window", 8), pairs=opts.get("pairs", 1), workers=opts.get("workers", 2),
                              ps=opts.get("ps", 1), placement="round-robin", mode="sync", algorithm="ring",
                              bucket_mb=None, ranks=n, np=n, payload=None)
    shared = {"size": n, "lock": threading.Lock(), "slots": {}, "barrier": threading.Barrier(n)}
    wires = {(a, b): Wire() for a in range(n) for b in range(n) if a != b}
    rows, errors = {}, []

    def rank(r: int) -> None:
        try:
            world = ThreadWorld(r, shared)
            bench = bench_cls(args)
            t = WireTransport(world, wires)
            ctx = Context(world, t, t.connect(bench.peers(world)), args, loops, validate, 1,
                          opts.get("corrupt", 0))
            rows[r] = measure_point(ctx, bench, payload)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
            errors.append(exc)
            shared["barrier"].abort()

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    if errors:
        raise errors[0]
    assert all(rows[r] is None for r in range(1, n))
    return rows[0]


def one(size: int) -> Payload:
    return Payload(str(size), (size,))


def test_latency_is_delay_plus_size_over_rate():
    size = 100_000
    row = run_ranks(P2PLatency, 2, one(size), Loops(30, 3))
    truth = (DELAY + size / RATE) * 1e6  # one way, us
    assert truth <= row["p50_us"] < 1.15 * truth, row
    assert row["min_us"] >= truth and row["iterations"] == 30 and row["wrong"] == 0
    assert row["p99_us"] is None and row["p999_us"] is None  # fewer than 100 samples


def test_bandwidth_window_formula():
    size, w = 1_000_000, 8  # 8 MB a window at 200 MB/s: 40 ms, plus a message's and the ack's delay
    row = run_ranks(P2PBandwidth, 2, one(size), Loops(5, 1), window=w)
    truth = size * w / (size * w / RATE + 2 * DELAY) / 1e6
    assert 0.9 * truth <= row["mb_s"] <= truth * 1.001, (row, truth)
    assert row["msg_s"] == pytest.approx(row["mb_s"] * 1e6 / size)


def test_bibw_counts_both_directions():
    size, w = 1_000_000, 8
    row = run_ranks(P2PBibw, 2, one(size), Loops(5, 1), window=w)
    truth = 2 * size * w / (size * w / RATE + DELAY) / 1e6  # each direction has its own wire
    assert 0.85 * truth <= row["mb_s"] <= truth * 1.001, (row, truth)


def test_pairs_add_up_over_the_slowest_pair():
    size, w = 1_000_000, 8
    row = run_ranks(P2PBandwidth, 4, one(size), Loops(4, 1), window=w, pairs=2)
    truth = 2 * size * w / (size * w / RATE + 2 * DELAY) / 1e6
    assert row["pairs"] == 2 and 0.85 * truth <= row["mb_s"] <= truth * 1.001, (row, truth)


def test_time_mode_runs_for_the_time_asked():
    size = 10_000
    row = run_ranks(P2PLatency, 2, one(size), Loops(time=0.3, warmup_time=0.05))
    per = 2 * (DELAY + size / RATE)
    assert row["stop"] == "time" and 0.6 * 0.3 / per <= row["iterations"] <= 0.3 / per * 1.01, row


def test_precision_mode_stops_when_the_interval_is_tight():
    row = run_ranks(P2PLatency, 2, one(1000), Loops(warmup=2, precision=5.0, max_time=5))
    assert row["stop"] == "precision" and row["p50_ci_pct"] <= 5.0, row


def test_ring_allreduce_time_and_bus_bandwidth():
    n, count = 4, 250_000  # 1 MB of float32: 2 (n - 1) steps of a quarter each way
    row = run_ranks(AllReduceBench, n, Payload(str(4 * count), (4 * count,)), Loops(4, 1), validate="every")
    step = DELAY + 4 * count / n / RATE
    truth = 2 * (n - 1) * step * 1e6
    assert truth <= row["time_min_us"] <= row["time_us"] <= row["time_max_us"] < 1.3 * truth, (row, truth)
    assert row["busbw"] == pytest.approx(row["algbw"] * 2 * (n - 1) / n) and row["wrong"] == 0


@pytest.mark.parametrize("bench,n,opts,wrong", [
    (P2PLatency, 2, {}, 2 * 6 // 3),  # 6 round trips, every 3rd message each way
    (P2PBibw, 2, {"window": 3}, 2 * 18 // 3),  # 6 windows of 3 each way
    (AllReduceBench, 3, {}, None),
])
def test_validation_counts_corruption(bench, n, opts, wrong):
    payload = one(3000)
    row = run_ranks(bench, n, payload, Loops(5, 1), validate="every", corrupt=3, **opts)
    if bench is AllReduceBench:  # the all-reduce checks sums, not messages: injection is on the message hook
        assert row["wrong"] == 0
    else:
        assert row["wrong"] == wrong, row


@pytest.mark.parametrize("mode", ["every", "untimed"])
def test_stale_data_is_caught(mode, monkeypatch):
    """A transport that delivers the previous message again is caught: contents change per iteration."""
    stale: dict = {}

    def recv_into(self, msg):
        due, bufs = self.inbox.q.get(timeout=10)
        prev, stale[self] = stale.get(self), bufs
        assert msg.assign(prev or bufs)

    monkeypatch.setattr(WireLink, "recv_into", recv_into)
    row = run_ranks(P2PLatency, 2, one(64), Loops(4, 0), validate=mode)
    assert row["wrong"] >= 2, row


@pytest.mark.parametrize("workers", range(1, 17))
def test_ps_is_exact_for_every_worker_count(workers):
    """Shard and workers over in-process links: every pull shows exactly the value the steps imply."""
    sizes, steps = [4096, 12, 40000], 5
    wires = {(a, b): Wire() for a in range(workers + 1) for b in range(workers + 1) if a != b}
    shard_links = {w: WireLink(w, wires[(workers, w)], wires[(w, workers)]) for w in range(workers)}
    shard = Shard(sizes, list(range(workers)), shard_links)
    errs: list = []
    ws = [Worker(w, workers, {workers: sizes}, {workers: WireLink(workers, wires[(w, workers)], wires[(workers, w)])},
                 True) for w in range(workers)]

    def work(wk: Worker) -> None:
        try:
            wk.start(steps)
            for _ in range(steps):
                wk.step()
        except BaseException as exc:  # noqa: BLE001
            errs.append(exc)

    threads = [threading.Thread(target=work, args=(wk,)) for wk in ws]
    for t in threads:
        t.start()
    for _ in range(steps):
        shard.step()
    for t in threads:
        t.join(30)
    assert not errs
    assert shard.wrong() == 0 and sum(wk.wrong for wk in ws) == 0
    assert float(shard.var_f[0][0]) == expected_value(steps, workers)


def test_ps_corruption_is_counted():
    row = run_ranks(PSThroughput, 3, Payload("x", (4096, 8192)), Loops(4, 1), validate="every", workers=2,
                    corrupt=2)
    assert row["wrong"] > 0 and row["ps_mode"] == "sync"


def test_summary_rules():
    s = Summary.of(np.arange(1, 51, dtype=np.int64) * 1000, 1e-3)
    assert s.p99 is None and s.p999 is None and s.ci_lo is not None
    s = Summary.of(np.arange(1, 1001, dtype=np.int64), 1.0)
    assert s.p99 is not None and s.p999 is not None
    lo, hi = median_ci(np.arange(1000, dtype=float))
    assert lo < 499.5 < hi and hi - lo < 80  # about 1.96 sqrt(n) ranks wide
    assert median_ci(np.arange(10, dtype=float)) is None


def test_touched_buffers_are_not_zero_pages():
    m = Message([4 << 20, 100])
    assert all(np.count_nonzero(a) > 0.9 * len(a) for a in m.arrays)
    assert len(np.unique(m.arrays[0][:4096])) > 200  # not a constant
