"""``commbench predict``: training step time and images/s from micro-benchmark results, a model's
variables and a measured compute time, with an uncertainty. It is a model (alpha-beta), and says so.

Link: ``t(n) = alpha + n / beta`` fitted to a p2p-latency sweep (one-way p50 us against bytes):
alpha is the smallest message's latency, beta the slope over messages of 64 KiB and more (1 MB/s
is 1 B/us). Fitted again to the ends of each point's 95 % interval, it gives a fast and a slow link.

PS (a round = every worker reads the variables, computes, and the PS reads the gradients; the bytes
and placement are those of ``ps-throughput --rpc tf``, which sends what TF sends): read = alpha +
X_read / beta, gradients = alpha + X_grad / beta, X the bytes the busiest link carries in that
direction. One rank per host: X = max(W x the busiest shard's bytes, a worker's bytes). All ranks
on one host (``--shared-host``): every transfer shares one path, X = W x a worker's bytes.
Mirrored (ring all-reduce): 2 (W - 1) alpha + 2 (W - 1) / W x model / beta (x W on one host).
Step = compute + communication + TF's runtime cost; images/s = W x batch / step. What the model
leaves open bounds it: the ps workers' gradients cross all at once (X_grad as above: the slow end) or
in turn (they finish computing at different times: the round ends with the last worker's gradients
alone, X_grad = a worker's bytes: the fast end). The middle is as far in turn as the calibration runs'
gradients-ready lags make it at the predicted link (``turn_of``: ``train`` stamps when each worker's
gradients are ready; the PS's link takes them in order, and the reads end half a worker's reads
apart, the first to read the first to compute), and halfway (``TURN``) where no run of this W
measured them (a packet trace at 280 Mbit/s: the gradients ended a median 8 ms apart, a worker's
alone took 7.5; three rounds of held-out rates fitted b = 0.83-0.89 of the halfway wire term, and
0.95-1.00 of this one: docs/notes/predict-rounds.md); at the slow end a synchronous step waits for
its slowest worker's compute, where the train run measured it for this W (``slowest_p50_ms``, every
worker computing at once).

TF's runtime, which those terms leave out, is calibrated once (``--overhead FILE``, repeatable, each
over its own link's sweep ``--overhead-p2p FILE``): ps, a cost per closure (the chief schedules,
dispatches and joins W a step, whatever the model) and per RPC (W x the RPCs of a worker-step as
``--rpc tf`` makes them); mirrored, a cost per collective (W x 2 a step: TF concatenates every
gradient into one all-reduce, and the loss is all-reduced). Fitted by non-negative least squares to
the calibration runs' steps less their compute and modelled communication; the two ps terms need two
models with different RPCs per closure, one model gives the RPC's term alone. Where calibration runs
of the predicted model and batch exist, they alone are fitted: on ranks that share cores the cost
grows with the batch (the workers' compute crowds the chief's and PS's threads), so the recipe
calibrates each model at its batch on the unshaped links and predicts the other links from their
sweeps. Calibrated once, the prediction is made for other W and links from micro-benchmark results
only (and for other models and batches from the terms' fit across the runs). Part of TF's runtime runs
while the transfers are on the wire (ps: one worker's closure work under the other's transfers), and a
slow emulated link's per-frame kernel cost adds to it: the step is compute + wire + runtime -
hidden(wire), the runtime fitted to the runs over the fastest link and hidden(wire) a curve through what
every slower calibration link's runs left (the recipe calibrates over two slow links too; unshaped links
alone cannot tell it: 0). The
model has no overlap of transfers with compute (but one worker's gradients with another's compute,
above): an overlap share fitted to runs at 100 Mbit/s made predictions at other rates worse
(docs/training.md).

Compute inside training: a worker computes slower inside training than alone (``train --compute-only``):
its cores also run TF's runtime threads, the PS or the collective's work and the kernel's share of the
transfers. ``--overhead-compute FILE`` gives compute-only runs made just before and after the calibration
runs; each calibration run's own compute (between its steps) over theirs is its load, and the prediction
computes the compute given (--compute, --compute-ms) times the runs' median load, with a 95 % interval for
one more run from their spread. The communication predicted (the step less that compute) is what it was;
the images/s is not: the load was 1.02-1.14x on these emulated hosts (docs/notes/predict-rounds.md).

Uncertainty: Low / High are a 90 % interval (``COVERAGE``). The prediction is made again with one
input at a time at the slow or the fast end of its 95 % interval (the compute time from
``--compute``: its median's interval widened by as far as the pace moved between that run's
measurements before and after, since the predicted run computes minutes later; TF's runtime: the
calibration runs' steps' intervals, widened to each repeat's own fit; the link's fit to the ends of
its points' intervals; the bounds the model leaves open: the slowest worker waited for, the ps
gradients all at once or in turn), and the moves are added in quadrature as independent errors. Every input at its
end at once (the corners) would claim no proportion and be wider than the errors are.
The verdicts ("pays off", the minimum bandwidth) still take the corners, and say "undecided" where
they disagree. A ``--train`` file with repeats of the shape (runs appended to it) gives the compute
time pooled over them and the measured images/s as their mean, with the ends of every repeat's 95 %
interval: the measurement is uncertain too: ``inside`` says whether their mean lies in Low-High,
``within`` whether the two intervals overlap. ``--measured FILE`` replaces the modelled
communication with what commbench's emulators measured for the same shape (ps-throughput rows with
this W and P; allreduce rows over W ranks, scaled to the model's bytes).

Answers as TBD's network profiler asked: which shards and tensors dominate communication, whether W
workers beat one, and the smallest bandwidth at which they do.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import datetime

import numpy as np

from commbench import presentation
from commbench.core.config.argtypes import RANKS, integer, number
from commbench.core.errors import UsageError
from commbench.core.output.table import header_line, row_line
from commbench.emulators import tf_ps
from commbench.emulators.placement import POLICIES, place, shard_bytes
from commbench.profiles import store
from commbench.training.predict_rows import COLUMNS, schema

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


def measured_comm(path: str, strategy: str, workers: int, ps: int, model: str, total: int) -> tuple[float, str]:
    """(communication ms per step, where it came from) from commbench's PS or all-reduce emulator."""
    runs = presentation.read_checked(path)
    if strategy == "ps":
        rows = [r for run in runs if run.meta.get("bench") == "ps-throughput" for r in run.rows
                if r.get("workers") == workers and r.get("ps") == ps]
        rows = [r for r in rows if str(r.get("payload", "")).startswith(model)] or rows
        if not rows:
            raise UsageError(f"{path}: predict --measured needs ps-throughput rows with --workers {workers} --ps {ps} "
                             f"(e.g. commbench ps-throughput -t grpc --workers {workers} --ps {ps} --payload {model})")
        r = rows[-1]
        source = f"ps-throughput {r['transport']} --rpc {r.get('rpc', 'packed')} {r['payload']}"
        if r.get("rpc") == "tf":  # the chief's round: one step of every worker at once, every RPC of it
            return 1e3 / r["steps_s"], source
        return r["pull_p50_ms"] + r["push_p50_ms"], source  # one packed pull and push per shard, in parallel
    rows = [r for run in runs if run.meta.get("bench") == "allreduce" and run.meta["options"].get("ranks") == workers
            for r in run.rows if r.get("size")]
    if not rows:
        raise UsageError(f"{path}: predict --measured needs allreduce rows over {workers} ranks "
                         f"(e.g. commbench allreduce -t grpc --ranks {workers} -b 1M -e 256M)")
    r = min(rows, key=lambda r: abs(r["size"] - total))
    return r["time_us"] / 1e3 * total / r["size"], f"allreduce {r['transport']} {r['algorithm']} at {r['size']} B"


def pct_off(predicted: float, measured: float | None) -> float | None:
    """predicted / measured - 1, in %; None where nothing positive was measured."""
    return 100 * (predicted / measured - 1) if measured and measured > 0 else None


def restepped(p: Prediction, step_ms: float, **fields) -> Prediction:
    """The prediction with another step time (and the images/s it gives) and these fields."""
    return replace(p, step_ms=step_ms, images_s=p.workers * p.batch / step_ms * 1e3, **fields)


def with_comm(p: Prediction, ms: float, source: str) -> Prediction:
    """The prediction with its modelled communication replaced by a measured time."""
    return restepped(p, p.compute_ms + ms, terms={f"measured_comm_ms ({source})": ms}, comm_ms=ms)


Curve = tuple[tuple[float, float], ...]  # (wire ms a step, ms of TF's runtime hidden under it), by wire


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


@dataclass(frozen=True)
class Calibrated:
    """One calibration run: its shape, link, step and compute time (and its slowest worker's)."""

    shape: Shape
    link: Link
    step: Span
    compute: Span
    slowest: Span | None = None


RUNTIME_TERMS = {"ps": ("closure", "RPC"), "mirrored": ("collective",)}


def nonnegative_fit(x: np.ndarray, r: np.ndarray) -> np.ndarray:
    """Least squares r ~ x @ k with k >= 0: every term where the counts tell them apart (x of full column
    rank), else or where a term comes out negative the last term alone (per RPC or collective)."""
    n = x.shape[1]
    for cols in ([*range(n)], [n - 1], *([[i] for i in range(n - 1)])):
        sub = x[:, cols]
        if np.linalg.matrix_rank(sub) < len(cols):
            continue
        k = np.linalg.lstsq(sub, r, rcond=None)[0]
        if (k >= 0).all():
            out = np.zeros(n)
            out[cols] = k
            return out
    return np.zeros(n)


@dataclass(frozen=True)
class Runtime:
    """TF's runtime cost per count (``Shape.counts``): the fit, and the fits at its low and high ends."""

    mid: tuple[float, ...]
    ends: tuple[tuple[float, ...], ...] = ()
    hidden: tuple[Curve, ...] = ()  # how much of it runs under the wire (hidden_at): the mid's, then each end's

    def pairs(self, shape: Shape, wire_ms: float) -> tuple[tuple[float, Curve], ...]:
        """(cost, curve) of the fit and of the end fits whose net cost (cost less what hides under
        ``wire_ms`` of communication) is lowest and highest there: (mid, low, high)."""
        hidden = self.hidden or ((),) * (1 + len(self.ends))
        every = [(self.cost(k, shape), h) for k, h in zip((self.mid, *self.ends), hidden, strict=True)]

        def net(pair: tuple[float, Curve]) -> float:
            return pair[0] - hidden_at(pair[1], wire_ms)
        return every[0], min(every, key=net), max(every, key=net)

    @staticmethod
    def cost(k: Sequence[float], shape: Shape) -> float:
        return float(np.dot(k, shape.counts())) if len(k) == len(shape.counts()) else 0.0

    def at(self, shape: Shape) -> Span:
        """The cost (ms a step) at a shape, with the lowest and highest of the end fits there (no
        calibration, ``Runtime(())``: nothing)."""
        every = [self.cost(k, shape) for k in (self.mid, *self.ends)]
        return Span.of(self.cost(self.mid, shape), min(every), max(every))

    def describe(self, strategy: str) -> str:
        terms = zip(self.mid, RUNTIME_TERMS[strategy], strict=True)  # Shape.counts' order
        return " + ".join(f"{k * 1e3:.1f} us per {name}" for k, name in terms)


def fit_runtime(runs: Sequence[Calibrated], pace: float | None = None) -> Runtime:
    """TF's runtime cost per count (``Shape.counts``), fitted by non-negative least squares to the
    calibration runs' steps less their compute and modelled communication. ``pace``: the compute time
    predicted with, for runs of the same model and batch: each run's cost is taken at that pace (times
    pace / the run's own compute time), for TF's runtime is CPU work on the cores the compute runs on, and
    a machine that computes 20 % slower runs it 20 % slower too. With one shape (or shapes
    whose counts are proportional) only the last term is fitted: its cost per RPC or collective. Its
    ends: the fits to the ends of every run's intervals and of the model's that make it high (high
    steps, low compute, the fast link, the gradients in turn) and low (the slowest worker waited for),
    widened to each repeat's own fit (the i-th run of every shape and link: the machine's phases move a run more
    than its interval says). Where the runs are over more than one link (the recipe calibrates over slow
    links too), the costs are fitted to the runs over the fastest (the shortest wire) alone, and every
    link's runs (of a shape) give a point of how much of the runtime runs while the transfers are on the
    wire: (their wire, their cost less their steps' rest), a curve ``hidden_at`` joins (the step is compute
    + wire + runtime - hidden_at(wire)). Part of TF's runtime overlaps long transfers and none overlaps
    short ones, and the emulated links' per-frame kernel cost adds to slow ones (docs/training.md, rounds
    13-19): no one formula held over rates; the curve holds what the calibration links measured."""
    def fit_at(end: int, which: Sequence[Calibrated]) -> tuple[tuple[float, ...], Curve]:
        r, x, w = [], [], []
        for c in which:
            step = (c.step.lo, c.step.mid, c.step.hi)[1 + end]
            link = (c.link.slow, c.link.mid, c.link.fast)[1 + end]
            p = c.shape.at((c.compute.hi, c.compute.mid, c.compute.lo)[1 + end], link, (0.0, None, 1.0)[1 + end])
            if c.slowest and end < 0:
                p = with_wait(p, c.slowest.hi)
            r.append((step - p.step_ms) * (pace / c.compute.mid if pace else 1.0))
            x.append(c.shape.counts())
            w.append(p.comm_ms)
        xs, rs, ws = (np.asarray(v, dtype=np.float64) for v in (x, r, w))
        links = {c.link.mid: [] for c in which}
        for i, c in enumerate(which):
            links[c.link.mid].append(i)
        if len(links) < 2:
            return tuple(float(v) for v in nonnegative_fit(xs, rs)), ()
        fastest = min(links.values(), key=lambda ix: float(np.mean(ws[ix])))
        k = nonnegative_fit(xs[fastest], rs[fastest])
        groups: dict[tuple, list[int]] = {}
        for i, c in enumerate(which):
            groups.setdefault((c.link.mid, c.shape.counts()), []).append(i)
        curve = sorted((float(np.mean(ws[ix])), float(np.mean(xs[ix] @ k - rs[ix]))) for ix in groups.values())
        return tuple(float(v) for v in k), tuple(curve)

    groups: dict[tuple, list[Calibrated]] = {}
    for c in runs:
        groups.setdefault((c.link.mid, c.shape.counts()), []).append(c)
    each = [fit_at(0, [g[i % len(g)] for g in groups.values()]) for i in range(max(map(len, groups.values())))]
    fits = [fit_at(0, runs), fit_at(-1, runs), fit_at(1, runs), *each]
    return Runtime(fits[0][0], tuple(k for k, _ in fits[1:]), tuple(h for _, h in fits))


# -- the command (its row: predict_rows) ---------------------------------------------------------
def add_parser(sub) -> None:
    p = sub.add_parser("predict", help="predict training images/s from p2p results, a model profile and "
                                       "a compute time; compare with a train run",
                       description=__doc__.split("\n\n")[0].replace("``", ""))
    p.add_argument("--p2p", required=True, metavar="FILE", help="p2p-latency results of a size sweep (jsonl/csv)")
    p.add_argument("--train", metavar="FILE", help="train results: model, strategy, W, P, batch, compute time and "
                                                   "the measured images/s to compare with")
    p.add_argument("--model", help="gradient profile (commbench payloads list); default: the train run's")
    p.add_argument("--strategy", choices=("ps", "mirrored"), help="default: the train run's")
    p.add_argument("--workers", type=RANKS, help="default: the train run's")
    p.add_argument("--ps", type=RANKS, help="default: the train run's")
    p.add_argument("--batch", type=integer(1, 1 << 20), help="images per worker per step; default: the train run's")
    p.add_argument("--compute", metavar="FILE",
                   help="`train --compute-only` results (or another train run) of this model, W and batch: the "
                        "compute step, measured apart from the run compared with (default: --train's own, "
                        "in-sample)")
    p.add_argument("--compute-ms", type=number(above=0, hi=1e7, what=" (ms)"),
                   help="one worker's step without communication (instead of --compute)")
    p.add_argument("--placement", choices=POLICIES, default="round-robin", help="PS variable placement")
    p.add_argument("--shared-host", choices=("auto", "yes", "no"), default="auto",
                   help="all ranks on one host share one path (auto: yes if the train run had one host)")
    p.add_argument("--overhead", metavar="FILE", action="append",
                   help="train runs of the same strategy that calibrate TF's runtime cost once (--batch 1 runs; any "
                        "model, W and link; repeats give the spread); repeatable")
    p.add_argument("--overhead-p2p", metavar="FILE", action="append",
                   help="the p2p-latency sweep of the link each --overhead file was run over, in the same order "
                        "(one for all: that one; default: --p2p)")
    p.add_argument("--overhead-compute", metavar="FILE", action="append",
                   help="`train --compute-only` runs made just before and after the --overhead runs (one file for "
                        "all, or one for each, in the same order): how much slower a worker computes inside "
                        "training than alone (the compute load), applied to --compute / --compute-ms")
    p.add_argument("--measured", metavar="FILE", help="ps-throughput or allreduce results: use their measured "
                                                      "communication time instead of the alpha-beta terms")
    p.add_argument("--json", action="store_true", help="print the prediction as JSON")
    p.add_argument("--label", default="", help="a name for this prediction in results files and reports (e.g. 1gbit)")
    p.add_argument("-o", "--output", metavar="FILE", help="append the prediction as a row: FILE.jsonl or FILE.csv")
    p.set_defaults(func=run)


def runs_of(path: str, bench: str, needs: str):
    """The runs of one benchmark in a results file (read once), or a one-line error naming what it holds."""
    every = presentation.read_checked(path)
    runs = [r for r in every if r.meta.get("bench") == bench and r.rows]
    if not runs:
        kinds = sorted({str(r.meta.get("bench")) for r in every})
        raise UsageError(f"{path}: {needs}; this file holds {kinds}")
    return runs


def p2p_link(path: str) -> Link:
    runs = runs_of(path, "p2p-latency", "predict --p2p needs p2p-latency results (a size sweep, e.g. "
                   "`commbench p2p-latency -t grpc -m 8:4M -o FILE`)")
    rows = [row for r in runs for row in r.rows if "p50_us" in row]
    o = runs[-1].meta.get("options", {})
    return fit_span(rows, f"{o.get('transport')} ({o.get('mode')}) from {path}")


def train_rows(path: str) -> list[tuple[dict, dict]]:
    """(row, metadata) of every train run in a file (repeats), in order."""
    return [(r.rows[-1], r.meta) for r in runs_of(path, "train", "predict needs `commbench train -o FILE` results")]


def compute_span(row: dict, compute_ms: float) -> Span:
    """A train row's compute time (or the one given) with its interval where the row has one."""
    return Span.of(compute_ms, row.get("compute_ci_lo_ms"), row.get("compute_ci_hi_ms"))


def own_compute_key(row: dict) -> str:
    """The keys a train row's own compute time is under: ``compute_during`` (the steps measured between
    its training steps, all workers at once) where it has them, else ``compute`` (before and after)."""
    return "compute" if row.get("compute_during_p50_ms") is None else "compute_during"


def own_compute(row: dict) -> Span:
    """A train row's compute time in its own conditions (``own_compute_key``)."""
    if own_compute_key(row) == "compute":
        return compute_span(row, row["compute_ms"])
    return Span.of(row["compute_during_p50_ms"], row.get("compute_during_ci_lo_ms"), row.get("compute_during_ci_hi_ms"))


def drifting(row: dict) -> Span:
    """A compute run's time for a run made after it: its interval, widened to how far the machine's pace
    moved between the run's two measurements (before and after: ``|after - before|`` either side of the
    middle). A later run computes at the pace of its own minutes, not at the median of these."""
    span, before, after = compute_span(row, row["compute_ms"]), row.get("compute_before_ms"), \
        row.get("compute_after_ms")
    if before is None or after is None:
        return span
    moved = abs(after - before)
    return Span.of(span.mid, min(span.lo, before, after, span.mid - moved),
                   max(span.hi, before, after, span.mid + moved))


def compute_rows(path: str, model: str, workers: int, batch: int, strategy: str) -> list[dict]:
    """The compute rows (``train --compute-only``, or train runs) of this model, W and batch in a file
    (``strategy``: the one predicted, for the command that measures them)."""
    every = presentation.read_checked(path)
    rows = [row for r in every for row in r.rows if row.get("bench", r.meta.get("bench")) in ("train-compute", "train")
            and row.get("compute_ms") is not None]
    if not rows:
        raise UsageError(f"{path}: predict --compute needs `commbench train --compute-only -o FILE` results")
    mine = [row for row in rows if (row.get("model"), row.get("workers"), row.get("batch")) == (model, workers, batch)]
    if not mine:
        have = sorted({f"{row.get('model')} W={row.get('workers')} batch {row.get('batch')}" for row in rows})
        raise UsageError(f"{path}: no compute time of {model} W={workers} batch {batch} (it holds {', '.join(have)}); "
                         f"measure it: commbench train --compute-only --strategy {strategy} --model {model} "
                         f"--workers {workers} --batch {batch} -o {path}")
    return mine


def slowest_span(row: dict) -> Span | None:
    """A train row's slowest worker's compute time (its median over the steps), where it has one."""
    mid = row.get("slowest_p50_ms")
    return None if mid is None else Span.of(mid, row.get("slowest_ci_lo_ms"), row.get("slowest_ci_hi_ms"))


def shape_of(row: dict) -> tuple:
    return row.get("strategy"), row.get("workers"), row.get("ps") or 0, row.get("batch"), row.get("model")


def repeats(runs: Sequence[tuple[dict, dict]]) -> list[dict]:
    """The rows of a train file's last run and of the runs before it with the same shape (repeats)."""
    return [row for row, _ in runs if shape_of(row) == shape_of(runs[-1][0])]


def pooled(spans_: Sequence[Span], centre: Callable = np.median) -> Span:
    """Repeats' numbers as one: their centre, and the farthest ends of their intervals."""
    return Span.of(float(centre([s.mid for s in spans_])), min(s.lo for s in spans_), max(s.hi for s in spans_))


def measured_span(rows: Sequence[dict]) -> Span:
    """The images/s the train runs measured: their mean, and the ends of every run's 95 % interval
    (its mean step's). What the prediction is compared with, uncertain too."""
    def images(row: dict) -> Span:
        step, per = spans(row)[0], row["workers"] * row["batch"] * 1e3
        return Span.of(per / step.mid, per / step.hi, per / step.lo)

    return pooled([images(r) for r in rows], np.mean)


def spans(row: dict) -> tuple[Span, Span]:
    """A train row's mean step (what its images/s is) and compute time, with the 95 % intervals of
    their medians (the step's moved to the mean)."""
    mean = row["workers"] * row["batch"] / row["images_s"] * 1e3 if row.get("images_s") else row["step_p50_ms"]
    lo, hi = row.get("step_ci_lo_ms"), row.get("step_ci_hi_ms")
    shift = mean - row["step_p50_ms"]
    return (Span.of(mean, None if lo is None else lo + shift, None if hi is None else hi + shift),
            own_compute(row))


def comm_span(row: dict) -> Span | None:
    """A train row's communication per step (its mean step less its own compute) with a 95 % interval:
    the two medians' intervals are independent estimates, their half-widths added in quadrature on
    each side. How finely the run measured what the prediction's communication is compared with; None
    where the row has no interval for either (fewer than 20 steps or compute steps: ``median_ci``)."""
    if any(row.get(f"{k}_ci_{end}_ms") is None for k in ("step", own_compute_key(row)) for end in ("lo", "hi")):
        return None
    step, own = spans(row)
    mid = step.mid - own.mid
    return Span.of(mid, mid - math.hypot(step.mid - step.lo, own.hi - own.mid),
                   mid + math.hypot(step.hi - step.mid, own.mid - own.lo))


def one_host(meta: dict) -> bool:
    return len(set(meta.get("hosts", []))) == 1


@dataclass(frozen=True)
class Calibration:
    """What the --overhead runs give a prediction: TF's runtime fitted to them, a line saying what it was
    fitted to, the pace it was taken at against theirs (None: other runs, not scaled), the ps
    gradients-ready lags of every round of the runs of this model, batch and W (``turn_of``; none: TURN),
    and the minutes from the first run fitted to to the last one's start (None: a run without a start)."""

    runtime: Runtime
    described: str = ""
    pace: float | None = None
    lags: tuple[tuple[float, ...], ...] = ()
    minutes: float | None = None
    load: Span | None = None
    load_runs: int = 0


def compute_load(cal: Sequence[tuple[Calibrated, str | None]], alone: Sequence[tuple[dict, str | None]]) -> list[float]:
    """How much slower a worker computes inside training than alone, once per calibration run (with its
    start): its own compute time (between its training steps) over the compute-only runs (rows with their
    starts) of its W and batch made next to it, the last before it and the first after, pooled as
    ``--compute`` pools them. On cores shared with TF's runtime threads, the PS and the other ranks'
    transfers, a step's compute is slower than the same compute alone (1.02-1.14x here)."""
    out = []
    for c, start in cal:
        same = sorted(((datetime.fromisoformat(s), r) for r, s in alone if s is not None
                       and (r.get("workers"), r.get("batch")) == (c.shape.workers, c.shape.batch)),
                      key=lambda x: x[0])
        if start is None or not same:
            continue
        t = datetime.fromisoformat(start)
        near = [r for s, r in same if s < t][-1:] + [r for s, r in same if s > t][:1]
        if near:
            out.append(c.compute.mid / pooled([drifting(r) for r in near]).mid)
    return out


def load_span(ratios: Sequence[float]) -> Span:
    """The compute load a later run will have: the calibration runs' median, and a 95 % interval for one
    more run (their spread: Z_INPUT standard deviations either side, never inside the farthest run)."""
    mid = float(np.median(ratios))
    sd = float(np.std(ratios, ddof=1)) if len(ratios) > 1 else 0.0
    return Span.of(mid, min(min(ratios), mid - Z_INPUT * sd), max(max(ratios), mid + Z_INPUT * sd))


def aligned(files: Sequence[str], to: Sequence[str], flag: str) -> list[str]:
    """One file of ``flag`` for every --overhead file: as many as those, or one for all."""
    if len(files) not in (1, len(to)):
        raise UsageError(f"predict: give one --{flag} for every --overhead file ({len(to)}), "
                         f"or one for all of them, not {len(files)}")
    return list(files) * len(to) if len(files) == 1 else list(files)


def calibrate(args: argparse.Namespace, strategy: str, model: str, batch: int, compute_ms: float,
              workers: int, alone: bool = True) -> Calibration:
    """TF's runtime fitted to the --overhead runs, each over its --overhead-p2p link. Where some of them
    are of the predicted model and batch, those alone: on a machine whose ranks share cores, what a step
    costs beyond compute and the wire grows with the batch (the workers' compute crowds the chief's and
    the PS's threads: 3.5 ms from batch 1 to 64 for small_cnn, docs/training.md), so a calibration at the
    batch trained is the runtime of that step; else every run (other models and batches: the terms'
    cross-model fit). Runs of the model and batch are taken at the pace of the compute time predicted
    with (``compute_ms`` alone, times the load; ``fit_runtime``). On a shared machine TF's runtime moves by
    2-4 ms for minutes at a time, so runs made back to back sample one phase of
    it: ``minutes``. With --overhead-compute (compute-only runs made next to the calibration runs) and a
    compute time measured ``alone`` (not a run's own, inside training already), the compute load of those of
    the model and batch (``compute_load``)."""
    sweeps = aligned(args.overhead_p2p or [args.p2p], args.overhead, "overhead-p2p")
    alone_files = aligned(args.overhead_compute, args.overhead, "overhead-compute") if args.overhead_compute \
        else [None] * len(args.overhead)
    runs: list[tuple[Calibrated, str, str, str | None, str | None]] = []  # (run, model, what, start, compute file)
    for path, sweep, alone_file in zip(args.overhead, sweeps, alone_files, strict=True):
        link = p2p_link(sweep)
        for row, meta in train_rows(path):
            if row.get("strategy") != strategy:
                raise UsageError(f"{path}: --overhead needs train runs of the {strategy} strategy, "
                                 f"not {row.get('strategy')}")
            prof = store.load(row["model"])
            shape = Shape(strategy, int(row["workers"]), int(row.get("ps") or 0), int(row["batch"]),
                          tuple(tf_ps.variables_of(prof)), args.placement,
                          args.shared_host == "yes" or (args.shared_host == "auto" and one_host(meta)),
                          tuple(tuple(r) for r in row.get("grads_lag_ms") or ()))
            runs.append((Calibrated(shape, link, *spans(row), slowest_span(row)), prof.name,
                         f"{prof.name} W={shape.workers}{f' P={shape.ps}' if strategy == 'ps' else ''} "
                         f"batch {shape.batch} over {sweep}", meta.get("start"), alone_file))
    mine = [r for r in runs if (r[0].shape.batch, r[1]) == (batch, model)]
    load, ratios = None, []
    if args.overhead_compute and alone:
        for f in dict.fromkeys(alone_files):
            rows = [(row, r.meta.get("start")) for r in runs_of(f, "train-compute", "predict --overhead-compute needs "
                                                                                     "`train --compute-only` results")
                    for row in r.rows if row.get("model") == model and row.get("compute_ms") is not None]
            ratios += compute_load([(r[0], r[3]) for r in mine if r[4] == f], rows)
        if not ratios:
            raise UsageError(f"predict: no `train --compute-only` run of {model} batch {batch} next to a calibration "
                             f"run of it in {', '.join(dict.fromkeys(alone_files))}; make one just before and after "
                             "each: commbench train --compute-only --strategy "
                             f"{strategy} --model {model} --batch {batch} -o FILE")
        load = load_span(ratios)
    fitted = mine or runs
    lags = tuple(lag for r in mine if r[0].shape.workers == workers for lag in r[0].shape.lags)
    starts = [r[3] for r in fitted]
    times = None if None in starts else [datetime.fromisoformat(t) for t in starts]
    described = "; ".join(f"{n}x {w}" for w, n in sorted(Counter(r[2] for r in fitted).items())) + (
        " (the runs of this model and batch)" if mine else "")
    inrun = compute_ms * (load.mid if load else 1.0)
    return Calibration(fit_runtime([r[0] for r in fitted], inrun if mine else None), described,
                       inrun / float(np.median([r[0].compute.mid for r in mine])) if mine else None,
                       lags, (max(times) - min(times)).total_seconds() / 60 if times else None, load, len(ratios))


def save(args: argparse.Namespace, out: dict) -> None:
    from commbench.core.output.results import ResultsWriter, check_output_path, run_metadata

    check_output_path(args.output)
    options = {k: v for k, v in vars(args).items() if isinstance(v, (str, int, float, bool, list, type(None)))}
    keys = list(schema())
    meta = {**run_metadata("predict", options, [], ("numpy",)), "metric": {"key": "images_s", "better": "higher"}}
    w = ResultsWriter(args.output, meta, keys)
    w.row({"bench": "predict", **{k: out[k] for k in keys[1:]}})
    w.close()


def min_bandwidth_line(workers: int, lo: float | None, hi: float | None, mid: float | None) -> str:
    """What the bandwidth at which W workers beat one (MB/s: at the fast end, the slow end, the middle) says."""
    if lo is None:
        return (f"no bandwidth makes {workers} workers faster than one: latency and TF's cost alone exceed what "
                "they save")
    if hi is None:
        return (f"minimum bandwidth for {workers} workers to beat one: undecided, {lo:.1f} MB/s at the fast end "
                f"({lo * 8 / 1e3:.2f} Gbit/s), none at the slow end")
    if hi / max(lo, 1e-12) > 1.0001:
        return (f"minimum bandwidth for {workers} workers to beat one: {mid or lo:.1f} MB/s, between {lo:.1f} and "
                f"{hi:.1f} ({lo * 8 / 1e3:.2f}-{hi * 8 / 1e3:.2f} Gbit/s)")
    return f"minimum bandwidth for {workers} workers to beat one: {lo:.1f} MB/s ({lo * 8 / 1e3:.2f} Gbit/s)"


def run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """predict, with numpy's warnings about absurd inputs (a sweep of 1e308 B: overflow, an ill-conditioned
    fit) kept off the terminal: what such inputs give is refused or printed, in one place each."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        warnings.simplefilter("ignore", np.exceptions.RankWarning)
        return _run(args, argv)


def _run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    link = p2p_link(args.p2p)
    runs = train_rows(args.train) if args.train else []
    row, meta = runs[-1] if runs else ({}, {})
    rows = repeats(runs) if runs else []

    def pick(v, name: str, key: str | None = None):
        if v is None:
            v = row.get(key or name)
        if v is None:
            raise UsageError(f"predict needs --{name.replace('_', '-')} (or --train FILE with it)")
        return v

    strategy = pick(args.strategy, "strategy")
    workers, batch = int(pick(args.workers, "workers")), int(pick(args.batch, "batch"))
    ps = int(pick(args.ps, "ps")) if strategy == "ps" else 0
    prof = store.load(pick(args.model, "model"))
    if args.compute and args.compute_ms is not None:
        raise UsageError("predict: give --compute FILE or --compute-ms, not both")
    if args.compute:
        given = compute_rows(args.compute, prof.name, workers, batch, strategy)
        compute, compute_from = pooled([drifting(r) for r in given]), args.compute
    elif args.compute_ms is not None:
        compute, compute_from, given = Span.of(args.compute_ms), "--compute-ms", []
    else:
        compute = pooled([own_compute(r) for r in rows if r.get("compute_ms") is not None] or
                         [compute_span(row, pick(args.compute_ms, "compute_ms"))])
        compute_from, given = "in-sample", rows
    sizes, names = [t.nbytes for t in prof.tensors], [t.name for t in prof.tensors]
    shared = args.shared_host == "yes" or (args.shared_host == "auto" and one_host(meta))
    shape = Shape(strategy, workers, ps, batch, tuple(tf_ps.variables_of(prof)), args.placement, shared)
    measured = measured_comm(args.measured, strategy, workers, ps, prof.name, sum(sizes)) if args.measured else None
    # the compute inside training: the compute alone (given) times the calibration's load; a run's own
    # compute (in-sample) was measured inside it already
    cal = calibrate(args, strategy, prof.name, batch, compute.mid, workers, compute_from != "in-sample") \
        if args.overhead else Calibration(Runtime(()))
    shape = replace(shape, lags=cal.lags)
    load = cal.load or Span.of(1.0)
    inrun = compute.mid * load.mid
    rt = cal.runtime.at(shape)  # TF's runtime at this shape (ms a step), with its ends
    same = bool(row) and shape_of(row) == (strategy, workers, ps, batch, prof.name)
    slowest_ = [s for s in map(slowest_span, given) if s] if same or args.compute else []
    slowest = pooled(slowest_) if slowest_ else None  # measured for this W: what its steps wait for
    slowest = Span.of(*(x * load.mid for x in (slowest.mid, slowest.lo, slowest.hi))) if slowest else None
    wire_mid = measured[0] if measured else shape.at(inrun, link.mid, None).comm_ms
    r_mid, r_lo, r_hi = cal.runtime.pairs(shape, wire_mid)  # (cost, curve): the fit, its low and high nets

    def at(c: float, s: float | None, lm: LinkModel, r: tuple[float, float], turn: float | None = None) -> Prediction:
        """At compute c (the median worker's), the step waiting for s (the slowest's; None: not), the
        link, TF's runtime r (ms a step, and the curve of how much hides under the wire), the ps gradients
        ``turn`` of the way to in turn (None: as the calibration's lags make it, else TURN)."""
        p = shape.at(c, lm, turn)
        p = with_comm(p, *measured) if measured else p
        p = with_wait(p, s) if s is not None else p
        return with_runtime(p, *r) if args.overhead else p

    def end(which: str) -> tuple:
        """at()'s inputs for the middle and the corners that make W workers least (tight) and most
        (roomy) worth it against one."""
        i = {"mid": 1, "tight": 0, "roomy": 2}[which]  # the compute time
        j = {"mid": 1, "tight": 2, "roomy": 0}[which]  # the rest
        s = slowest.hi if slowest and j == 2 else None  # the slow ends wait for the slowest worker
        return ((compute.lo * load.lo, inrun, compute.hi * load.hi)[i], s, (link.fast, link.mid, link.slow)[j],
                (r_lo, r_mid, r_hi)[j], (1.0, None, 0.0)[j])

    def min_beta(which: str) -> float | None:
        c, s, lm, r, turn = end(which)
        return None if measured else min_bandwidth(lambda beta: at(c, s, LinkModel(lm.alpha_us, beta), r, turn))

    pred, tight, roomy = (at(*end(w)) for w in ("mid", "tight", "roomy"))
    pays = True if tight.margin_ms > 0 else False if roomy.margin_ms < 0 else None
    mid = dict(zip(("c", "s", "lm", "r", "turn"), end("mid"), strict=True))

    def moved(**change) -> float:  # the step with one input moved
        return at(**{**mid, **change}).step_ms

    slow_moves = [moved(c=compute.hi * load.mid), moved(c=compute.mid * load.hi), moved(lm=link.slow),
                  moved(r=r_hi), moved(turn=0.0)] + ([moved(s=slowest.hi)] if slowest else [])
    fast_moves = [moved(c=compute.lo * load.mid), moved(c=compute.mid * load.lo), moved(lm=link.fast),
                  moved(r=r_lo), moved(turn=1.0)]
    slow = restepped(pred, interval_end(pred.step_ms, slow_moves, slow=True))
    fast = restepped(pred, max(1e-9, interval_end(pred.step_ms, fast_moves, slow=False)))
    meas = measured_span(rows) if same and row.get("images_s") else None
    out = {**asdict(pred), "min_beta_mb_s": min_beta("mid"), "min_beta_lo_mb_s": min_beta("roomy"),
           "min_beta_hi_mb_s": min_beta("tight"),
           "images_lo": slow.images_s, "images_hi": fast.images_s, "pays_off": pays,
           "overhead_ms": pred.terms.get("tf_runtime_ms"), "runtime_ms": asdict(rt),
           "model": prof.name, "link": asdict(link), "shared_host": shared,
           "measured_images_s": meas.mid if meas else None, "measured_lo": meas.lo if meas else None,
           "measured_hi": meas.hi if meas else None, "measured_runs": len(rows) if meas else None,
           "measured_step_ms": float(np.median([r["step_p50_ms"] for r in rows])) if meas else None}
    m = out["measured_images_s"]
    out["error_pct"] = 100 * (pred.images_s / m - 1) if m else None
    out["beyond_compute_ms"] = pred.step_ms - inrun
    mean_step = workers * batch / m * 1e3 if m else None  # the mean step, as images/s is
    meas_beyond = mean_step - inrun if mean_step is not None else None
    out["measured_beyond_compute_ms"] = meas_beyond
    out["beyond_compute_error_pct"] = pct_off(out["beyond_compute_ms"], meas_beyond)
    own = [own_compute(r).mid for r in rows if r.get("compute_ms") is not None] if m else []
    comm_meas = mean_step - float(np.median(own)) if own else None
    out["measured_comm_ms"] = comm_meas
    out["comm_error_pct"] = pct_off(out["beyond_compute_ms"], comm_meas)
    each = [comm_span(r) for r in rows if r.get("compute_ms") is not None and r.get("images_s")] if own else []
    each = [] if None in each else each  # a repeat without an interval: how finely they measured it is unknown
    out["measured_comm_lo_ms"] = min(c.lo for c in each) if each else None
    out["measured_comm_hi_ms"] = max(c.hi for c in each) if each else None
    out["within"] = (meas.lo <= fast.images_s and slow.images_s <= meas.hi) if meas else None
    out["inside"] = (slow.images_s <= meas.mid <= fast.images_s) if meas else None
    out["interval_coverage"] = COVERAGE
    out["label"], out["compute_from"], out["calibration"] = args.label, compute_from, cal.described or None
    out["runtime_pace"] = cal.pace
    out["compute_alone_ms"] = compute.mid
    out["runtime_hidden_limit_ms"] = max([0.0, *(h for _, h in r_mid[1])])
    out["runtime_hidden_curve"] = " ".join(f"{w:.2f}:{h:.2f}" for w, h in r_mid[1]) or None
    out["runtime_hidden_ms"] = -pred.terms.get("runtime_hidden_ms", 0.0)
    out["compute_load"], out["compute_load_lo"], out["compute_load_hi"] = load.mid, load.lo, load.hi
    out["compute_load_runs"] = cal.load_runs if cal.load else None
    out["calibration_minutes"] = cal.minutes
    out["gradients_lag_rounds"] = len(cal.lags) if strategy == "ps" else None
    if args.output:
        save(args, out)
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"# commbench predict: {strategy}, {prof.name} ({sum(sizes) / 1e6:.2f} MB in {len(sizes)} tensors), "
          f"batch {batch}; a model, not a measurement")
    print(f"# link: alpha {link.mid.alpha_us:.1f} us ({link.fast.alpha_us:.1f}-{link.slow.alpha_us:.1f}), beta "
          f"{link.mid.beta_mb_s:.0f} MB/s ({link.slow.beta_mb_s:.0f}-{link.fast.beta_mb_s:.0f}), fitted to "
          f"{link.mid.source}; {'all ranks share one host' if shared else 'one rank per host'}")
    print(header_line(COLUMNS))
    print(row_line(COLUMNS, out))
    if pred.gradients_turn is not None:
        print(f"# the workers' gradients cross the PS's link {pred.gradients_turn:.2f} of the way from all at once "
              "to in turn: " + (f"as {len(cal.lags)} calibration rounds' gradients-ready lags make it at this "
                                "link" if cal.lags else "TURN (no calibration run of this W measured the lags)"))
    print("# terms: " + ", ".join(f"{k} {v:.2f}" for k, v in pred.terms.items()) +
          f", compute {compute.mid:.2f} ms ({compute.lo:.2f}-{compute.hi:.2f}) from " +
          ("the compared run itself (in-sample: measure it apart with `train --compute-only` and give --compute)"
           if compute_from == "in-sample" else compute_from) +
          (f", x {load.mid:.3f} ({load.lo:.3f}-{load.hi:.3f}) inside training (the load of {cal.load_runs} "
           "calibration runs: --overhead-compute)" if out["compute_load_runs"] else ""))
    print(f"# beyond compute (the network, TF's runtime, the slowest worker): predicted "
          f"{out['beyond_compute_ms']:.2f} ms a step" + (
              f", measured {meas_beyond:.2f} ms (the mean step less the same compute time)"
              + (f": {out['beyond_compute_error_pct']:+.1f} %" if out["beyond_compute_error_pct"] is not None else "")
              if meas_beyond is not None else "")
          + (f"; less its own compute (measured in it) {comm_meas:.2f} ms"
             + (f" ({out['measured_comm_lo_ms']:.2f}-{out['measured_comm_hi_ms']:.2f})"
                if out["measured_comm_lo_ms"] is not None else "")
             + (f": {out['comm_error_pct']:+.1f} %" if out["comm_error_pct"] is not None else "")
             if comm_meas is not None else ""))
    if args.overhead:
        made = "" if cal.minutes is None else f"; made over {cal.minutes:.0f} min" + (
            " (back to back: one phase of a shared machine; spread them over the time you measure in)"
            if cal.minutes < 5 else "")
        print(f"# TF's runtime: {cal.runtime.describe(strategy)}, x {' and '.join(map(str, shape.counts()))} = "
              f"{rt.mid:.2f} ms per step ({rt.lo:.2f}-{rt.hi:.2f}); fitted to {cal.described}"
              + (f", at the pace of the compute time given ({cal.pace:.2f}x theirs)" if cal.pace else "") + made
              + ("; of it under the wire (at each calibration link's): "
                 + ", ".join(f"{h:.2f} ms under {w:.2f}" for w, h in r_mid[1])
                 + f" ({out['runtime_hidden_ms']:.2f} here)" if r_mid[1] else ""))
    print(f"# Low / High: the prediction's {COVERAGE:.0%} interval (every input's 95 % interval, one at a time, "
          "added in quadrature)"
          + (f"; measured {m:.1f} img/s ({'inside' if out['inside'] else 'outside'} it; {meas.lo:.1f}-{meas.hi:.1f}: "
             f"the 95 % intervals of {len(rows)} run{'s' if len(rows) > 1 else ''}, which "
             f"{'overlap' if out['within'] else 'miss'} Low-High; the point estimates differ by "
             f"{out['error_pct']:+.1f} %)" if meas else ""))
    for line in dominant(sizes, names, ps, args.placement):
        print(f"# {line}")
    verdict = {True: "pays off", False: "does not pay off",
               None: "undecided: the uncertainty spans one worker's rate"}[pays]
    print(f"# {workers} workers: {pred.images_s:.1f} img/s against one worker's {pred.one_worker_images_s:.1f}: "
          f"data parallelism {verdict} at this bandwidth")
    lo, hi = out["min_beta_lo_mb_s"], out["min_beta_hi_mb_s"]
    if not measured:  # the minimum bandwidth is the model's: a measured communication has none
        print(f"# {min_bandwidth_line(workers, lo, hi, out['min_beta_mb_s'])}")
    if row and not same:
        print(f"# the train run in {args.train} was {row.get('model')} W={row.get('workers')} P={row.get('ps')} "
              f"batch {row.get('batch')}: this is a prediction beyond what was measured")
    return 0
