"""Ground truth without root: the harness and the benchmarks' formulas over an in-process wire whose
per-message delay and rate are known, so latency, bandwidth, bibw, pairs, time mode, precision mode
and all-reduce must come out at known answers; the PS emulator is exact for every W; statistics
follow their rules; the results schema is pinned."""

from __future__ import annotations

import threading
import time

import pytest

from commbench.core.measure import buffers
from commbench.core.measure.harness import LoopDefaults, Loops, Side, Sync, measure


def test_one_stall_in_the_warm_up_does_not_cut_the_point():
    """The cap is judged from the warm-up's median step: with one 0.5 s preemption among 100 warm-up
    steps of about 1 ms, the warm-up's wall clock says 6 ms a step (about 166 would fit in 1 s); the
    median says 1 ms, so the point keeps most of its 1,000 iterations."""
    calls = {"n": 0}

    def step() -> None:
        calls["n"] += 1
        time.sleep(0.5 if calls["n"] == 50 else 0.001)

    sync = Sync(0, lambda: None, lambda key, value: value)
    timing = measure(sync, Loops(point_cap=1.0), LoopDefaults((1000, 100), (1000, 100)), 8, Side(step=step))
    assert timing.n >= 600 and calls["n"] == 100 + timing.n, (timing.n, timing.stop)


def test_watchdog_sleeps_through_timed_loops():
    """A beat is a long poll the store holds (for news, or ``wait`` s): while a timed loop runs, the
    watchdog asks for timeout / 2 s waits, so at most one beat starts during a loop shorter than that
    (the one that switches to the long wait); beats resume after it."""
    from commbench.core.run.watchdog import INTERVAL, Watchdog

    beats: list[float] = []
    gone = threading.Event()

    class Client:  # the store's side of a beat: answered after ``wait`` (no news in this run)
        def beat(self, stale_after: float, wait: float = 0.0) -> dict:
            beats.append(time.monotonic())
            gone.wait(wait)
            return {}

        def bye(self) -> None:
            gone.set()

        def close(self) -> None:
            pass

    class World:
        rank, host, timeout, tolerant = 0, "here", 4.0, False

    wd = Watchdog.__new__(Watchdog)
    wd.world, wd.timeout, wd.client = World(), 4.0, Client()
    wd.stopped, wd.loud = threading.Event(), threading.Event()
    wd.loud.set()
    wd.quiet_interval = max(INTERVAL, wd.timeout / 2)
    wd.thread = threading.Thread(target=wd._run, daemon=True)
    wd.thread.start()
    time.sleep(3 * INTERVAL)
    assert len(beats) >= 2
    sync = Sync(0, lambda: None, lambda name, obj=None: obj, wd.quiet)
    side = Side(step=lambda: time.sleep(0.01))
    before = len(beats)
    t0 = time.monotonic()
    samples, wall = sync.timed(side, 150)  # 1.5 s of timed loop: 3 loud beats' worth, under one quiet wait
    assert time.monotonic() - t0 >= 1.5 and len(samples) == 150
    assert len(beats) <= before + 1, "the watchdog beat again during the timed loop"
    during = len(beats)
    time.sleep(wd.quiet_interval + 2 * INTERVAL)
    assert len(beats) > during
    wd.stop()


@pytest.mark.skipif(buffers.system_thp() == "never",
                    reason="transparent huge pages are off in this kernel")
def test_page_backing_is_what_was_asked(tmp_path):
    """--hugepages on: both buffers of every point from 4 KiB up sit in huge pages (rows say so while the
    buffers exist); off: none."""
    from conftest import commbench

    from commbench.core.output.results import read_runs

    for mode in ("on", "off"):
        out = tmp_path / f"{mode}.jsonl"
        r = commbench("p2p-latency", "-m", "64K,1M,4M", "-i", "20", "-x", "2", "--hugepages", mode, "-o", str(out))
        assert r.code == 0, r.err
        (run,) = read_runs(out)
        assert run.meta["memory"]["hugepages"] == mode
        for row in run.rows:
            if mode == "off":
                assert row["huge_kb"] == 0, row
            else:  # s_buf and r_buf, each in whole 2 MiB pages
                assert row["huge_kb"] >= 2 * max(2048, row["size"] // 1024), row
