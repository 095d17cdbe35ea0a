"""The one timing harness: iteration counts, warm-up, barriers, time-based and precision-based runs,
per-iteration samples, wall clocks and statistics.

A benchmark hands the harness a ``Side`` per rank: ``run(n)`` runs n iterations of this rank's part;
on a rank that times, ``step()`` is one iteration and every one is timed around the call. The
harness warms up, waits at a barrier, runs the timed loop, and returns a ``Timing`` (the samples and
the loop's wall clock). Nothing in a timed loop allocates, logs or formats.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import cast

import numpy as np

from commbench.core.errors import UsageError
from commbench.core.measure.samples import Reservoir

Step = Callable[[], object] | tuple[Callable[[], object], Callable[[], object]]  # one timed iteration

LARGE_MESSAGE = 8192  # OSU's switch between the small- and large-message loop counts
BATCH_S = 0.2  # --precision: at most this many seconds per batch between checks of the confidence interval
TIME_BATCH_S = 2.0  # --time: at most this many seconds per batch between re-estimates of the rate
FIRST_BATCH_S = 0.005  # --precision: the first batch; each next one is twice as long, up to BATCH_S
MIN_PRECISION_SAMPLES = 30
MIN_CAPPED = 10  # --point-cap never cuts a point below this many iterations
Z95 = 1.959964


@dataclass(frozen=True)
class LoopDefaults:
    """OSU's (iterations, warm-up) for small and large messages."""

    small: tuple[int, int]
    large: tuple[int, int]


LATENCY_LOOPS = LoopDefaults((10000, 100), (1000, 10))
BANDWIDTH_LOOPS = LoopDefaults((100, 10), (20, 2))
COLLECTIVE_LOOPS = LoopDefaults((1000, 100), (100, 10))  # OSU's collectives


def _finite(name: str, value: float | None, positive: bool = True) -> None:
    """A float option: finite, and positive (or zero or more); else one line naming the flag."""
    if value is None or (math.isfinite(value) and (value > 0 if positive else value >= 0)):
        return
    unit = "percentage" if name == "--precision" else "number of seconds"
    raise UsageError(f"{name} must be a positive {unit}, not {value:g}" if positive else
                     f"{name} must be zero or more seconds, not {value:g}")


@dataclass(frozen=True)
class Loops:
    """What the user asked for: counts (``-i``, ``-x``), a duration (``--time``, ``--warmup-time``), or a
    precision (``--precision PCT`` within ``--max-time``). With OSU's default counts, ``point_cap`` cuts a
    point whose warm-up says it would run longer than that many seconds (0: never)."""

    iterations: int | None = None
    warmup: int | None = None
    time: float | None = None
    warmup_time: float = 2.0
    precision: float | None = None
    max_time: float = 30.0
    point_cap: float = 0.0

    def __post_init__(self) -> None:
        if self.iterations is not None and self.iterations <= 0:
            raise UsageError(f"-i/--iterations must be a positive number, not {self.iterations}")
        if self.warmup is not None and self.warmup < 0:
            raise UsageError(f"-x/--warmup must be zero or more, not {self.warmup}")
        _finite("--time", self.time)
        _finite("--warmup-time", self.warmup_time, positive=False)
        _finite("--precision", self.precision)
        _finite("--max-time", self.max_time)
        _finite("--point-cap", self.point_cap, positive=False)
        if self.time is not None and self.precision is not None:
            raise UsageError("--time and --precision both say when to stop; give one of them")

    def counts(self, defaults: LoopDefaults, nbytes: int) -> tuple[int, int]:
        n, w = defaults.large if nbytes > LARGE_MESSAGE else defaults.small
        return (self.iterations or n, w if self.warmup is None else self.warmup)

    def describe(self, source: str = "OSU") -> str:
        if self.time is not None:
            return f"time-based: {self.time:g} s measured after {self.warmup_time:g} s warm-up"
        wu = self.warmup if self.warmup is not None else f"{source} default"
        if self.precision is not None:
            return (f"until the 95 % CI of the median is within +-{self.precision:g} % (at most {self.max_time:g} s), "
                    f"after {wu} warm-up")
        cap = f", each point cut to about {self.point_cap:g} s (--point-cap)" if self.capped else ""
        if self.iterations is None and self.warmup is None:
            return f"{source} defaults by size (small <= 8 KiB / large){cap}"
        it = self.iterations if self.iterations is not None else f"{source} default"
        return f"{it} iterations after {wu} warm-up{cap}"

    @property
    def capped(self) -> bool:
        """Whether --point-cap may cut a counted point: default counts, a cap, and a warm-up to judge by."""
        return self.iterations is None and self.point_cap > 0 and self.warmup != 0


def timed_loop(step: Step, n: int) -> np.ndarray:
    """Call ``step`` n times; return each call's duration in ns.

    Each sample is taken around the call alone (as sockperf and mpi4py.bench do), so the loop's
    own bookkeeping between iterations is not counted as the transport's. Stamps are preallocated.
    A step may be a pair of callables run one after the other (a send and a receive bound in C):
    then no Python frame of commbench's sits between the clock reads.
    """
    stamps = [0] * (2 * n)
    clock = time.perf_counter_ns
    if isinstance(step, tuple):
        first, second = step
        for i in range(0, 2 * n, 2):
            stamps[i] = clock()
            first()
            second()
            stamps[i + 1] = clock()
    else:
        for i in range(0, 2 * n, 2):
            stamps[i] = clock()
            step()
            stamps[i + 1] = clock()
    s = np.asarray(stamps, dtype=np.int64)
    return s[1::2] - s[0::2]


def untimed_loop(step: Callable[[], object], n: int) -> None:
    for _ in range(n):
        step()


def harness_overhead_ns(n: int = 20000) -> float:
    """The harness's own cost per timed call: the median sample of an empty step (recorded in metadata)."""
    return float(np.median(timed_loop(lambda: None, n)))


@dataclass
class Side:
    """One rank's part of a point, prepared (buffers allocated and touched) by a benchmark.

    ``run(n)``: n iterations, untimed (a rank that only answers); ``step()``: one iteration, for a rank
    whose every iteration is timed; ``report()``: what this rank adds to the row (gathered on rank 0);
    ``wrong()``: messages or elements this rank found wrong under --validate; ``begin(n)``: called
    before each loop of n iterations, untimed (preallocating per-iteration records); ``calls``: how
    many iterations one ``step`` makes (1; tf-grpc runs many round trips in one tf.function), so n
    iterations are ceil(n / calls) steps and each sample covers ``calls`` iterations.
    """

    run: Callable[[int], object] | None = None
    step: Step | None = None
    begin: Callable[[int], object] | None = None
    report: Callable[[], dict] = dict
    wrong: Callable[[], int] = lambda: 0
    calls: int = 1

    def go(self, n: int) -> tuple[np.ndarray | None, int]:
        """n iterations: (per-step samples or None, wall-clock ns of the whole loop)."""
        if self.begin is not None:
            self.begin(n)
        t0 = time.perf_counter_ns()
        if self.step is not None:
            samples = timed_loop(self.step, -(-n // self.calls))
        else:
            samples = None
            if self.run is not None:
                self.run(n)
        return samples, time.perf_counter_ns() - t0


@dataclass
class Timing:
    """A point's timed loop on this rank: iterations, wall clock, per-iteration samples (timing ranks)."""

    n: int
    wall_ns: int
    samples: np.ndarray | None = None
    stop: str = "count"  # why the loop ended: count, cap (--point-cap), time, precision, max-time
    calls: int = 1  # iterations per sample (Side.calls)


class Sync:
    """What the harness needs from the run: rank, a barrier, rank 0's decisions sent to all, and
    ``quiet``: a context in which the run's own background work (the watchdog's heartbeats) sleeps."""

    def __init__(self, rank: int, barrier: Callable[[], None], bcast: Callable[[str, object], object],
                 quiet: Callable[[], AbstractContextManager] = nullcontext) -> None:
        self.rank, self.barrier, self.bcast, self.quiet = rank, barrier, bcast, quiet
        self.window = [0, 0]  # wall clock (ns) from the first timed iteration to the last: --traffic's window

    def bcast_count(self, key: str, count: int | None) -> int:
        """Rank 0's ``count`` (an iteration count it decided), on every rank."""
        return int(cast(int, self.bcast(key, count)))

    def timed(self, side: Side, n: int) -> tuple[np.ndarray | None, int]:
        """n timed iterations with the process quiet."""
        start = time.time_ns()
        with self.quiet():
            got = side.go(n)
        self.window = [self.window[0] or start, time.time_ns()]
        return got


def per_iteration(samples: np.ndarray | None, wall: int, n: int, calls: int) -> float:
    """ns one iteration takes, from a warm-up: the median step where every step was timed (one
    preemption in the warm-up does not move it), else the warm-up's wall clock over its iterations."""
    if samples is not None and len(samples):
        return max(float(np.median(samples)) / calls, 1.0)
    return max(wall / max(n, 1), 1.0)


def measure(sync: Sync, loops: Loops, defaults: LoopDefaults, nbytes: int, side: Side) -> Timing:
    """Warm up, barrier, then the timed loop: counted, time-based or precision-based (rank 0 decides)."""
    if loops.time is None and loops.precision is None:
        n, warmup = loops.counts(defaults, nbytes)
        stop = "count"
        if warmup:
            warm, wall = side.go(warmup)
            if loops.capped:  # rank 0 judges from its warm-up how many iterations fit the cap
                fit = max(MIN_CAPPED, int(loops.point_cap * 1e9 / per_iteration(warm, wall, warmup, side.calls))) \
                    if sync.rank == 0 else None
                fit = sync.bcast_count("cap", fit)
                if fit < n:
                    n, stop = fit, "cap"
        sync.barrier()
        samples, wall = sync.timed(side, n)
        return Timing(n, wall, samples, stop, side.calls)
    per = _calibrate(sync, loops, defaults, nbytes, side)
    sync.barrier()
    if loops.time is not None:
        return _for_time(sync, loops.time, side, per)
    return _until_precise(sync, loops, side, per, cast(float, loops.precision))  # neither counted nor timed


def _for_time(sync: Sync, seconds: float, side: Side, per: float) -> Timing:
    """Batches of at most TIME_BATCH_S s until rank 0's timed wall clock reaches --time, the rate
    re-measured from each batch (a warm-up's estimate alone ran a 1,800 s point for 1,457 s when the
    machine sped up); the samples kept in fixed memory (samples.Reservoir: every one up to its cap)."""
    budget = seconds * 1e9
    keep: Reservoir | None = None
    n = wall = 0
    decision = max(1, int(min(budget, TIME_BATCH_S * 1e9) / per)) if sync.rank == 0 else None
    batch = sync.bcast_count("loops", decision)
    while batch:
        samples, w = sync.timed(side, batch)
        n, wall = n + batch, wall + w
        if samples is not None:
            keep = keep or Reservoir()
            keep.add(samples)
        if sync.rank == 0:
            per = max(w / batch, 1.0)
            left = budget - wall
            decision = max(1, int(min(left, TIME_BATCH_S * 1e9) / per)) if left > per / 2 else 0
        batch = sync.bcast_count("loops", decision)
    return Timing(n, wall, keep.values() if keep else None, "time", side.calls)


def _calibrate(sync: Sync, loops: Loops, defaults: LoopDefaults, nbytes: int, side: Side) -> float:
    """Warm-up that also measures ns per iteration on rank 0 (doubling batches for --time's warm-up time)."""
    if loops.precision is not None:
        warmup = loops.counts(defaults, nbytes)[1]
        k, budget = max(1, warmup), 0.0
    else:
        k, budget = 1, loops.warmup_time * 1e9
    spent = 0
    while True:
        samples, wall = side.go(k)
        decision = None
        if sync.rank == 0:
            spent += wall
            per = max(wall / k, 1.0)
            decision = [0, per] if spent >= budget else [max(1, min(2 * k, int((budget - spent) / per) + 1)), per]
        k, per = sync.bcast("warmup", decision)  # type: ignore[misc]
        if k == 0:
            return float(per)


def _until_precise(sync: Sync, loops: Loops, side: Side, per: float, precision: float) -> Timing:
    """Batches growing geometrically (FIRST_BATCH_S doubling to BATCH_S) until rank 0's samples give
    a median CI within --precision or --max-time is spent."""
    batch = max(MIN_PRECISION_SAMPLES, int(FIRST_BATCH_S * 1e9 / per))
    largest = max(batch, int(BATCH_S * 1e9 / per))
    whole: np.ndarray | None = None  # rank 0's samples so far
    n = wall = 0
    while True:
        samples, w = sync.timed(side, batch)
        n, wall = n + batch, wall + w
        batch = min(2 * batch, largest)
        decision = None
        if sync.rank == 0:
            if samples is None:
                raise UsageError("--precision needs a benchmark whose rank 0 times every iteration")
            whole = samples if whole is None else np.concatenate([whole, samples])
            pct = ci_halfwidth_pct(np.sort(whole))
            decision = "precision" if pct is not None and pct <= precision else \
                "max-time" if wall / 1e9 >= loops.max_time else ""
        stop = sync.bcast("precision", decision)
        if stop:
            return Timing(n, wall, whole, str(stop), side.calls)


def median_ci(sorted_samples: np.ndarray) -> tuple[float, float] | None:
    """Distribution-free 95 % confidence interval of the median (order statistics, normal approximation
    to the binomial); None below 20 samples, where it says little."""
    n = len(sorted_samples)
    if n < 20:
        return None
    half = Z95 * math.sqrt(n) / 2
    lo, hi = max(0, math.floor(n / 2 - half)), min(n - 1, math.ceil(n / 2 + half))
    return float(sorted_samples[lo]), float(sorted_samples[hi])


def halfwidth_pct(lo: float | None, hi: float | None, median: float) -> float | None:
    """A confidence interval's half-width as a percentage of the median (None without an interval)."""
    if lo is None or hi is None or median <= 0:
        return None
    return (hi - lo) / 2 / median * 100


def ci_halfwidth_pct(sorted_samples: np.ndarray) -> float | None:
    ci = median_ci(sorted_samples)
    return halfwidth_pct(*ci, float(np.median(sorted_samples))) if ci else None


@dataclass(frozen=True)
class Summary:
    """Statistics of per-iteration samples, in the unit the benchmark reports (us). Tail percentiles
    only where there are enough samples to have one: p99 from 100, p99.9 from 1000 (else None)."""

    n: int
    avg: float
    min: float
    p50: float
    p99: float | None
    p999: float | None
    max: float
    stdev: float
    ci_lo: float | None
    ci_hi: float | None

    @classmethod
    def of(cls, samples_ns: np.ndarray, scale: float) -> Summary:
        s = np.sort(samples_ns.astype(np.float64) * scale)
        n = len(s)
        ci = median_ci(s)
        return cls(n, float(s.mean()), float(s[0]), float(np.median(s)),
                   float(np.percentile(s, 99)) if n >= 100 else None,
                   float(np.percentile(s, 99.9)) if n >= 1000 else None,
                   float(s[-1]), float(s.std(ddof=1)) if n > 1 else 0.0,
                   ci[0] if ci else None, ci[1] if ci else None)

    @property
    def ci_pct(self) -> float | None:
        return halfwidth_pct(self.ci_lo, self.ci_hi, self.p50)

    def as_row(self, suffix: str = "_us") -> dict[str, float | None]:
        row: dict[str, float | None] = {f"{k}{suffix}": getattr(self, k)
                                        for k in ("avg", "min", "p50", "p99", "p999", "max", "stdev")}
        row[f"p50_ci_lo{suffix}"], row[f"p50_ci_hi{suffix}"] = self.ci_lo, self.ci_hi
        row["p50_ci_pct"] = self.ci_pct
        return row


def spread(values: list[float]) -> tuple[float, float, float]:
    """(average, minimum, maximum) of one number across ranks, as nccl-tests reports time."""
    arr = np.asarray(values, dtype=np.float64)
    return float(arr.mean()), float(arr.min()), float(arr.max())
