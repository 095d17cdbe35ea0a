"""The alpha-beta model of a training step: a link fitted to a p2p sweep, the PS's and the ring's
communication, the bounds the model leaves open, TF's runtime added, and the interval (the command,
training/predict.py, derives the whole in its docstring)."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from commbench.core.errors import UsageError
from commbench.emulators import tf_ps
from commbench.emulators.placement import place, shard_bytes

Curve = tuple[tuple[float, float], ...]  # (wire ms a step, ms of TF's runtime hidden under it), by wire


SLOPE_FROM = 64 << 10


# mirrored: collectives a worker launches per step. TF (graph mode, CommunicationOptions' bytes_per_pack
# 0, as train leaves it) concatenates every gradient into one pack and all-reduces it at once
# (cross_device_utils.group_by_size and CollectiveReplicaLauncher.batch_all_reduce), and the step's
# loss is all-reduced too: 2, whatever the number of tensors. Counted per tensor, a small_cnn
# calibration (20 units) made mobilenet_v2's 316 units cost 83 ms a step where the runs at 300 Mbit/s
# and 2 Gbit/s showed about 6.5 (docs/training.md).
COLLECTIVES_PER_STEP = 2


# ps: the middle between the workers' gradients crossing the link all at once and in turn, where no
# calibration run of the predicted W measured its gradients-ready lags (turn_of makes it from those). A packet
# capture (docs/training.md) saw both: the reads of one step end apart (the flows do not share the
# bottleneck evenly), so the gradients start apart and overlap in part.
TURN = 0.5


@dataclass(frozen=True)
class LinkModel:
    alpha_us: float
    beta_mb_s: float  # 10^6 B/s = bytes per microsecond
    source: str = ""

    def us(self, nbytes: float) -> float:
        return self.alpha_us + nbytes / self.beta_mb_s


@dataclass(frozen=True)
class Span:
    """A number and the low and high ends of its uncertainty."""

    mid: float
    lo: float
    hi: float

    @classmethod
    def of(cls, mid: float, lo: float | None = None, hi: float | None = None) -> Span:
        return cls(mid, min(mid, mid if lo is None else lo), max(mid, mid if hi is None else hi))


@dataclass(frozen=True)
class Link:
    """The fitted link and the fast and slow links its points' intervals allow."""

    mid: LinkModel
    fast: LinkModel
    slow: LinkModel


def fit(points: Sequence[tuple[int, float]], source: str = "") -> LinkModel:
    """alpha = one-way latency of the smallest message; beta = 1 / slope over messages >= 64 KiB
    (all of them if fewer than two are that large)."""
    pts = sorted((int(s), float(t)) for s, t in points)
    if len(pts) < 2:
        raise UsageError("predict needs a p2p-latency sweep of at least two sizes (e.g. -m 8:4M)")
    big = [p for p in pts if p[0] >= SLOPE_FROM]
    use = big if len(big) >= 2 else pts
    x = np.array([p[0] for p in use], dtype=np.float64)
    y = np.array([p[1] for p in use], dtype=np.float64)
    slope = float(np.polyfit(x, y, 1)[0]) if np.ptp(x) > 0 else 0.0
    if slope <= 0:
        raise UsageError("the p2p-latency sweep does not grow with size; measure larger sizes (-m 8:4M)")
    return LinkModel(pts[0][1], 1.0 / slope, source)


def fit_span(rows: Sequence[dict], source: str = "") -> Link:
    """The link fitted to the points' p50s, and to the low and high ends of their 95 % intervals
    (rows without an interval count as exact): fast = the lowest alpha and highest beta of the three."""
    mid = fit([(r["size"], r["p50_us"]) for r in rows], source)
    ends = [mid]
    for end in ("p50_ci_lo_us", "p50_ci_hi_us"):
        with contextlib.suppress(UsageError):  # an interval's end that does not grow with size bounds nothing
            ends.append(fit([(r["size"], r.get(end) or r["p50_us"]) for r in rows], source))
    return Link(mid, LinkModel(min(e.alpha_us for e in ends), max(e.beta_mb_s for e in ends), source),
                LinkModel(max(e.alpha_us for e in ends), min(e.beta_mb_s for e in ends), source))


@dataclass(frozen=True)
class Prediction:
    strategy: str
    workers: int
    ps: int
    batch: int
    compute_ms: float
    comm_ms: float
    terms: dict  # name -> ms
    step_ms: float
    images_s: float
    one_worker_images_s: float
    beta_bytes: float  # bytes the slowest link carries per step (what beta divides)
    gradients_turn: float | None = None  # ps: how far in turn the gradients crossed (predict_ps)

    @property
    def margin_ms(self) -> float:
        """What W workers gain per step over one worker's W steps (negative: they lose)."""
        return self.workers * self.compute_ms - self.step_ms


def as_variables(variables: Sequence[int | tf_ps.Variable]) -> list[tf_ps.Variable]:
    return [v if isinstance(v, tf_ps.Variable) else tf_ps.Variable(int(v)) for v in variables]


def ps_plan(variables: Sequence[int | tf_ps.Variable], ps: int, policy: str) -> list[tf_ps.ShardPlan]:
    vs = as_variables(variables)
    return tf_ps.plan(vs, ps, place([v.nbytes for v in vs], ps, policy))


def turn_of(lags: Sequence[Sequence[float]], one_ms: float, workers: int, read_ms: float = 0.0) -> float:
    """How far the workers' gradients cross the PS's link in turn (0: all at once, 1: one at a time) at
    ``one_ms`` a worker's gradients alone, from rounds' ``grads_lag_ms`` (how long before the last
    worker's each other's were ready, earliest first). The link takes them in order: the round's
    gradients end max_k((W - k) x one_ms - lag_k) after the last were ready (k = 0 the earliest; the last,
    lag 0: one_ms); averaged over the rounds, and placed between W x one_ms (0) and one_ms (1).
    ``read_ms``, a worker's reads alone at this link: the reads share the link too and end apart, from
    all at once (fair shares) to one a ``read_ms`` after another; the middle, half a ``read_ms`` apart
    (a packet trace at 280 Mbit/s: 3.8 ms, of 7.5), moves each worker's gradients by as much, in the
    lags' order: the first to read is the first to compute (the runs' own lags at shaped links grow
    to about this: small_cnn 10.4 ms at 190 Mbit/s against 5.4 unshaped and 5.5 half its reads;
    averaged with the other order, held-out rates fitted b = 0.87-0.93 of ps's wire term, with this
    order 0.95-1.00). Rounds of another W are left out; none left: TURN."""
    mine = [r for r in lags if len(r) == workers - 1]
    if workers < 2 or not mine or one_ms <= 0:
        return TURN
    spread = [i * read_ms / 2 for i in range(workers)]  # the reads' ends: earliest first
    ends = []
    for r in mine:
        ready = [-lag for lag in r] + [0.0]  # earliest first
        t = sorted(x + o for x, o in zip(ready, spread, strict=True))  # the first to read: the first to compute
        ends.append(max(one_ms, *((workers - k) * one_ms - (t[-1] - x) for k, x in enumerate(t))))
    return min(1.0, max(0.0, (workers * one_ms - float(np.mean(ends))) / ((workers - 1) * one_ms)))


def predict_ps(variables: Sequence[int | tf_ps.Variable], workers: int, ps: int, batch: int, compute_ms: float,
               link: LinkModel, policy: str = "round-robin", shared_host: bool = False,
               turn: float | None = 0.0, lags: Sequence[Sequence[float]] = ()) -> Prediction:
    """A round: every worker's reads share the busiest link, the workers compute, and the workers'
    gradients cross it. ``turn`` 0: all at once (the slow end); 1: in turn, since the workers finish
    computing at different times, so the round ends with the last worker's gradients crossing alone
    (a worker's own bytes: the fast end); between: that share of the way; None (the middle): as far as
    ``lags`` (measured rounds' gradients-ready lags) make it at this link (``turn_of``), else TURN."""
    plans = ps_plan(variables, ps, policy)
    reads, grads = [sum(p.reads()) for p in plans], [sum(p.pulls()) for p in plans]

    def busiest(per_shard: list[int], w: int = workers) -> int:
        return w * sum(per_shard) if shared_host else max(w * max(per_shard), sum(per_shard))

    if turn is None:
        turn = turn_of(lags, link.us(busiest(grads, 1)) / 1e3, workers, link.us(busiest(reads, 1)) / 1e3)
    x_read = busiest(reads)
    x_grad = round((1 - turn) * busiest(grads) + turn * busiest(grads, 1))
    read, grad = link.us(x_read) / 1e3, link.us(x_grad) / 1e3
    step = compute_ms + read + grad
    return Prediction("ps", workers, ps, batch, compute_ms, read + grad, {"read_ms": read, "gradients_ms": grad},
                      step, workers * batch / step * 1e3, batch / compute_ms * 1e3, x_read + x_grad, turn)


def predict_ring(total: int, workers: int, batch: int, compute_ms: float, link: LinkModel,
                 shared_host: bool = False) -> Prediction:
    w = workers
    byte_term = 2 * (w - 1) / w * total * (w if shared_host else 1)
    comm = (2 * (w - 1) * link.alpha_us + byte_term / link.beta_mb_s) / 1e3 if w > 1 else 0.0
    step = compute_ms + comm
    return Prediction("mirrored", w, 0, batch, compute_ms, comm, {"allreduce_ms": comm}, step,
                      w * batch / step * 1e3, batch / compute_ms * 1e3, byte_term)


def dominant(sizes: Sequence[int], names: Sequence[str], ps: int, policy: str, top: int = 3) -> list[str]:
    """Lines naming the busiest shard and the largest tensors (communication is proportional to bytes)."""
    total = sum(sizes)
    lines = []
    if ps:
        shards = shard_bytes(sizes, place(sizes, ps, policy), ps)
        k = int(np.argmax(shards))
        lines.append(f"busiest shard: {k} of {ps} holds {shards[k] / 1e6:.2f} MB ({100 * shards[k] / total:.0f} % "
                     f"of the model; an even split would be {100 / ps:.0f} %)")
    order = np.argsort(sizes)[::-1][:top]
    lines.append("largest tensors: " + ", ".join(f"{names[i]} {sizes[i] / 1e6:.2f} MB ({100 * sizes[i] / total:.0f} %)"
                                                 for i in order))
    return lines


def pct_off(predicted: float, measured: float | None) -> float | None:
    """predicted / measured - 1, in %; None where nothing positive was measured."""
    return 100 * (predicted / measured - 1) if measured and measured > 0 else None


def restepped(p: Prediction, step_ms: float, **fields) -> Prediction:
    """The prediction with another step time (and the images/s it gives) and these fields."""
    return replace(p, step_ms=step_ms, images_s=p.workers * p.batch / step_ms * 1e3, **fields)


def with_comm(p: Prediction, ms: float, source: str) -> Prediction:
    """The prediction with its modelled communication replaced by a measured time."""
    return restepped(p, p.compute_ms + ms, terms={f"measured_comm_ms ({source})": ms}, comm_ms=ms)


def hidden_at(curve: Curve, wire_ms: float) -> float:
    """How much of TF's runtime runs under ``wire_ms`` of communication: the calibration links' points
    (``fit_runtime``) joined by straight lines, the nearest point's beyond them, at most the wire; none
    without points. Negative where a link's step costs more than its wire and the unshaped link's runtime."""
    if not curve:
        return 0.0
    wire = max(0.0, wire_ms)
    return min(wire, float(np.interp(wire, [w for w, _ in curve], [h for _, h in curve])))


def with_runtime(p: Prediction, cost: float, curve: Curve = ()) -> Prediction:
    """The prediction with TF's runtime cost (ms a step) added, less the part of it that runs while the
    transfers are on the wire: as the calibration's curve gives it at this communication (``hidden_at``)."""
    hide = hidden_at(curve, p.comm_ms)
    terms = {**p.terms, "tf_runtime_ms": cost, **({"runtime_hidden_ms": -hide} if hide else {})}
    return restepped(p, p.step_ms + cost - hide, terms=terms, comm_ms=p.comm_ms + cost - hide)


COVERAGE = 0.90  # what the stated interval (images_lo - images_hi) claims to hold


Z_COVERAGE = 1.645  # its two-sided normal quantile


Z_INPUT = 1.96  # every input's interval is a 95 % one (a bound of the model's: taken as one too)


def interval_end(mid_ms: float, moved_ms: Sequence[float], slow: bool) -> float:
    """One end of the step's COVERAGE interval from the steps with one input at a time moved to the
    (slow or fast) end of its 95 % interval: independent errors, each end Z_INPUT sigma, added in
    quadrature. Moving every input to its end at once (the corners) claims no proportion and is wider
    than the errors are, since they do not all go the same way."""
    d = [max(0.0, (m - mid_ms) if slow else (mid_ms - m)) / Z_INPUT for m in moved_ms]
    return mid_ms + (1 if slow else -1) * Z_COVERAGE * math.hypot(*d)


def min_bandwidth(step_at: Callable[[float], Prediction]) -> float | None:
    """The bandwidth (MB/s) below which W workers are slower than one, by bisection over beta
    (``step_at(beta)`` predicts at it); None where no bandwidth makes them faster."""
    lo, hi = 1e-6, 1e9
    top = step_at(hi)
    if top.margin_ms <= 0 or top.workers < 2:
        return None
    if step_at(lo).margin_ms > 0:
        return 0.0
    for _ in range(100):
        mid = (lo * hi) ** 0.5
        lo, hi = (lo, mid) if step_at(mid).margin_ms > 0 else (mid, hi)
    return hi


@dataclass(frozen=True)
class Shape:
    """What is predicted: everything but the link, the compute time and TF's runtime cost."""

    strategy: str
    workers: int
    ps: int
    batch: int
    variables: tuple[tf_ps.Variable, ...]
    policy: str = "round-robin"
    shared_host: bool = False
    lags: tuple[tuple[float, ...], ...] = ()  # ps: measured rounds' grads_lag_ms (for turn None)

    def at(self, compute_ms: float, link: LinkModel, turn: float | None = 0.0) -> Prediction:
        """The prediction at this compute time and link; ps: ``turn`` of the way from the workers'
        gradients all at once (0) to in turn (1); None: as the shape's lags make it (``turn_of``)."""
        if self.strategy == "ps":
            return predict_ps(self.variables, self.workers, self.ps, self.batch, compute_ms, link, self.policy,
                              self.shared_host, turn=turn, lags=self.lags)
        total = sum(v.nbytes for v in self.variables if v.trainable)
        return predict_ring(total, self.workers, self.batch, compute_ms, link, self.shared_host)

    def units(self) -> int:
        """What TF's per-step runtime cost is taken to grow with: the RPCs of a step (ps: W worker-steps
        of the calls ``--rpc tf`` makes) or the collectives (mirrored: W x COLLECTIVES_PER_STEP)."""
        if self.strategy == "ps":
            return self.workers * tf_ps.rpcs_per_worker_step(ps_plan(self.variables, self.ps, self.policy))
        return self.workers * COLLECTIVES_PER_STEP

    def counts(self) -> tuple[int, ...]:
        """The counts TF's runtime terms cost each: ps (closures, RPCs): the chief schedules, dispatches and
        joins W closures a step whatever the model, and each of their RPCs costs its own; mirrored
        (collectives,)."""
        return (self.workers, self.units()) if self.strategy == "ps" else (self.units(),)


def with_wait(p: Prediction, slowest_ms: float) -> Prediction:
    """The step at the slowest worker's compute time: a synchronous step (a ps round, an all-reduce)
    waits for the last worker to finish computing; the median worker's stays ``compute_ms``."""
    wait = max(0.0, slowest_ms - p.compute_ms)
    return restepped(p, p.step_ms + wait, terms={**p.terms, "slowest_worker_ms": wait})
