"""The one timing harness: iteration counts, warm-up, time-based runs, per-iteration samples, statistics.

A benchmark hands the harness ``run(n)``: run n iterations of this rank's side and, on a rank
that times, return the per-iteration durations in ns. Everything else lives here.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from commbench.core.errors import UsageError
from commbench.core.world import World

LARGE_MESSAGE = 8192  # OSU's switch between the small- and large-message loop counts


@dataclass(frozen=True)
class LoopDefaults:
    """OSU's (iterations, warm-up) for small and large messages."""

    small: tuple[int, int]
    large: tuple[int, int]


LATENCY_LOOPS = LoopDefaults((10000, 100), (1000, 10))
BANDWIDTH_LOOPS = LoopDefaults((100, 10), (20, 2))


@dataclass(frozen=True)
class Loops:
    """What the user asked for: counts (``-i``, ``-x``) or a duration (``--time``, ``--warmup-time``)."""

    iterations: int | None = None
    warmup: int | None = None
    time: float | None = None
    warmup_time: float = 2.0

    def __post_init__(self) -> None:
        if self.iterations is not None and self.iterations <= 0:
            raise UsageError(f"-i/--iterations must be a positive number, not {self.iterations}")
        if self.warmup is not None and self.warmup < 0:
            raise UsageError(f"-x/--warmup must be zero or more, not {self.warmup}")
        if self.time is not None and self.time <= 0:
            raise UsageError(f"--time must be a positive number of seconds, not {self.time:g}")
        if self.warmup_time < 0:
            raise UsageError(f"--warmup-time must be zero or more seconds, not {self.warmup_time:g}")

    def counts(self, defaults: LoopDefaults, nbytes: int) -> tuple[int, int]:
        n, w = defaults.large if nbytes > LARGE_MESSAGE else defaults.small
        return (self.iterations or n, w if self.warmup is None else self.warmup)


def timed_loop(step: Callable[[], object], n: int) -> np.ndarray:
    """Call ``step`` n times; return each call's duration in ns.

    Each sample is taken around the call alone (as sockperf and mpi4py.bench do), so the loop's
    own bookkeeping between iterations is not counted as the transport's. Stamps are preallocated.
    """
    stamps = [0] * (2 * n)
    clock = time.perf_counter_ns
    for i in range(0, 2 * n, 2):
        stamps[i] = clock()
        step()
        stamps[i + 1] = clock()
    s = np.asarray(stamps, dtype=np.int64)
    return s[1::2] - s[0::2]


def untimed_loop(step: Callable[[], object], n: int) -> None:
    for _ in range(n):
        step()


def measure(world: World, loops: Loops, defaults: LoopDefaults, nbytes: int,
            run: Callable[[int], np.ndarray | None]) -> np.ndarray | None:
    """Warm up, then measure. Rank 0 decides counts in time mode and tells the others (untimed)."""
    if loops.time is None:
        n, warmup = loops.counts(defaults, nbytes)
        if warmup:
            run(warmup)
        return run(n)
    k, spent = 1, 0
    budget = loops.warmup_time * 1e9
    while True:
        d = run(k)
        decision = None
        if world.rank == 0:
            total = int(d.sum())
            spent += total
            per = max(total / k, 1.0)
            if spent >= budget:
                decision = [0, max(1, int(loops.time * 1e9 / per))]
            else:
                decision = [max(1, min(2 * k, int((budget - spent) / per) + 1)), 0]
        k, n = world.bcast_json("loops", decision)
        if k == 0:
            return run(n)


@dataclass(frozen=True)
class Summary:
    """Statistics of per-iteration samples, in the unit the benchmark reports (us)."""

    n: int
    avg: float
    min: float
    p50: float
    p99: float
    p999: float
    max: float
    stdev: float

    @classmethod
    def of(cls, samples_ns: np.ndarray, scale: float) -> Summary:
        s = samples_ns.astype(np.float64) * scale
        p50, p99, p999 = np.percentile(s, [50, 99, 99.9])
        return cls(len(s), float(s.mean()), float(s.min()), float(p50), float(p99), float(p999), float(s.max()),
                   float(s.std(ddof=1)) if len(s) > 1 else 0.0)

    def as_row(self, suffix: str = "_us") -> dict[str, float]:
        return {f"{k}{suffix}": getattr(self, k) for k in ("avg", "min", "p50", "p99", "p999", "max", "stdev")}
