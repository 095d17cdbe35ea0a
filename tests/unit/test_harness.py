"""Ground truth without root: the harness and the benchmarks' formulas over an in-process wire whose
per-message delay and rate are known, so latency, bandwidth, bibw, pairs, time mode, precision mode
and all-reduce must come out at known answers; the PS emulator is exact for every W; statistics
follow their rules; the results schema is pinned."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from wire import DELAY, RATE, Wire, WireLink, one, run_ranks, settled

from commbench.benchmarks.allreduce import AllReduceBench
from commbench.benchmarks.p2p_bandwidth import P2PBandwidth, P2PBibw
from commbench.benchmarks.p2p_latency import P2PLatency
from commbench.benchmarks.ps_throughput import PSThroughput
from commbench.core.measure.harness import Loops, Side, Summary, Timing, median_ci
from commbench.core.measure.message import Message
from commbench.core.measure.payload import Payload
from commbench.emulators.ps import Shard, Worker, expected_value


def test_latency_is_delay_plus_size_over_rate():
    size = 100_000
    row = run_ranks(P2PLatency, 2, one(size), Loops(30, 3))
    truth = (DELAY + size / RATE) * 1e6  # one way, us
    assert truth <= row["p50_us"] < 1.15 * truth, row
    assert row["min_us"] >= truth and row["iterations"] == 30 and row["wrong"] == 0
    assert row["p99_us"] is None and row["p999_us"] is None  # fewer than 100 samples


def test_steps_of_several_calls_count_calls():
    """A step making k calls (tf-grpc's round trips in one tf.function): n iterations are ceil(n / k)
    steps, and latency is a step's time over 2 k."""
    steps = []
    side = Side(step=lambda: steps.append(1), calls=3)
    samples, _ = side.go(10)
    assert len(steps) == 4 and len(samples) == 4
    timing = Timing(10, 1, np.array([6000] * 4), calls=3)  # 6 us per step of 3 round trips
    row = P2PLatency.__new__(P2PLatency).row(one(8), timing, [])
    assert row["iterations"] == 12 and row["p50_us"] == pytest.approx(1.0)


def test_bandwidth_window_formula():
    size, w = 1_000_000, 8  # 8 MB a window at 200 MB/s: 40 ms, plus a message's and the ack's delay
    truth = size * w / (size * w / RATE + 2 * DELAY) / 1e6
    row = settled(lambda: run_ranks(P2PBandwidth, 2, one(size), Loops(5, 1), window=w),
                  lambda r: 0.9 * truth <= r["mb_s"] <= truth * 1.001)
    assert 0.9 * truth <= row["mb_s"] <= truth * 1.001, (row, truth)
    assert row["msg_s"] == pytest.approx(row["mb_s"] * 1e6 / size)


def test_bibw_counts_both_directions():
    size, w = 1_000_000, 8
    truth = 2 * size * w / (size * w / RATE + DELAY) / 1e6  # each direction has its own wire
    row = settled(lambda: run_ranks(P2PBibw, 2, one(size), Loops(5, 1), window=w),
                  lambda r: 0.85 * truth <= r["mb_s"])
    assert 0.85 * truth <= row["mb_s"] <= truth * 1.001, (row, truth)


def test_pairs_add_up_over_the_slowest_pair():
    size, w = 1_000_000, 8
    truth = 2 * size * w / (size * w / RATE + 2 * DELAY) / 1e6
    row = settled(lambda: run_ranks(P2PBandwidth, 4, one(size), Loops(4, 1), window=w, pairs=2),
                  lambda r: 0.85 * truth <= r["mb_s"])
    assert row["pairs"] == 2 and 0.85 * truth <= row["mb_s"] <= truth * 1.001, (row, truth)


def test_time_mode_runs_for_the_time_asked():
    """--time: batches until the timed clock has reached the time asked, whatever the machine's pace
    (the iterations times their measured round trip, so a loaded machine's slower steps count as they
    were); at most one batch's misjudgement over it."""
    size = 10_000
    row = run_ranks(P2PLatency, 2, one(size), Loops(time=0.3, warmup_time=0.05))
    rtt = 2 * row["avg_us"] / 1e6
    spent = row["iterations"] * rtt
    assert row["stop"] == "time" and 0.3 - rtt <= spent <= 2 * 0.3 + rtt, row


def test_point_cap_cuts_default_counts_to_the_time_asked():
    """--point-cap: OSU's default 1,000 round trips of 4 ms would take 4 s; the warm-up (10) says so and
    the point runs about 0.2 s, its row saying "cap"; -i counts exactly; never below 10 iterations."""
    size = 10_000
    per = 2 * (DELAY + size / RATE)
    row = settled(lambda: run_ranks(P2PLatency, 2, one(size), Loops(point_cap=0.2)),
                  lambda r: 0.7 * 0.2 / per <= r["iterations"])
    assert row["stop"] == "cap" and 0.7 * 0.2 / per <= row["iterations"] <= 0.2 / per * 1.01, row
    exact = run_ranks(P2PLatency, 2, one(size), Loops(iterations=60, point_cap=0.2))
    assert exact["iterations"] == 60 and "stop" not in exact
    assert run_ranks(P2PLatency, 2, one(size), Loops(point_cap=0.001))["iterations"] == 10
    assert "cut to about 0.2 s" in Loops(point_cap=0.2).describe() and "cut" not in Loops(point_cap=0).describe()


def test_precision_mode_stops_when_the_interval_is_tight():
    row = run_ranks(P2PLatency, 2, one(1000), Loops(warmup=2, precision=5.0, max_time=5))
    assert row["stop"] == "precision" and row["p50_ci_pct"] <= 5.0, row


def test_ring_allreduce_time_and_bus_bandwidth():
    n, count = 4, 250_000  # 1 MB of float32: 2 (n - 1) steps of a quarter each way
    step = DELAY + 4 * count / n / RATE
    truth = 2 * (n - 1) * step * 1e6
    row = settled(lambda: run_ranks(AllReduceBench, n, Payload(str(4 * count), (4 * count,)), Loops(10, 1),
                                    validate="untimed"),
                  lambda r: r["time_us"] < 1.3 * truth and r["time_max_us"] < 1.5 * truth)
    # checked in an untimed round: with every iteration checked, four threads' numpy work on two cores
    # added 1.22-1.33x (10 runs); untimed 1.10-1.13x
    assert truth <= row["time_min_us"] <= row["time_us"] < 1.3 * truth, (row, truth)
    assert row["time_us"] <= row["time_max_us"] < 1.5 * truth, (row, truth)
    assert row["busbw"] == pytest.approx(row["algbw"] * 2 * (n - 1) / n) and row["wrong"] == 0


@pytest.mark.parametrize("bench,n,opts,wrong", [
    (P2PLatency, 2, {}, 2 * 6 // 3),  # 6 round trips, every 3rd message each way
    (P2PBibw, 2, {"window": 3}, 2 * 18 // 3),  # 6 windows of 3 each way
    (AllReduceBench, 3, {}, None),
])
def test_validation_counts_corruption(bench, n, opts, wrong):
    payload = one(3000)
    row = run_ranks(bench, n, payload, Loops(5, 1), validate="every", corrupt=3, **opts)
    if bench is AllReduceBench:  # iterations 3 and 6 of 7 (1 warm-up): one element off on every rank
        assert row["wrong"] == 2 * n, row
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


