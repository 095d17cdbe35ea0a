"""TF's runtime cost per step, calibrated once on the links the user has: train runs and the sweep
of their link fitted by non-negative least squares, at the pace of the compute time predicted with;
the compute load inside training from compute-only runs made next to them."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from commbench.core.errors import UsageError
from commbench.emulators import tf_ps
from commbench.profiles import store
from commbench.training.evidence import (
    drifting,
    p2p_link,
    pooled,
    runs_of,
    shares_host,
    slowest_span,
    spans,
    train_rows,
)
from commbench.training.model import Z_INPUT, Curve, Link, Shape, Span, hidden_at, with_wait
from commbench.training.predict_options import PredictOptions


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


def calibrate(o: PredictOptions, strategy: str, model: str, batch: int, compute_ms: float,
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
    sweeps = aligned(o.overhead_p2p or [o.p2p], o.overhead, "overhead-p2p")
    alone_files = aligned(o.overhead_compute, o.overhead, "overhead-compute") if o.overhead_compute \
        else [None] * len(o.overhead)
    runs: list[tuple[Calibrated, str, str, str | None, str | None]] = []  # (run, model, what, start, compute file)
    for path, sweep, alone_file in zip(o.overhead, sweeps, alone_files, strict=True):
        link = p2p_link(sweep)
        for row, meta in train_rows(path):
            if row.get("strategy") != strategy:
                raise UsageError(f"{path}: --overhead needs train runs of the {strategy} strategy, "
                                 f"not {row.get('strategy')}")
            prof = store.load(row["model"])
            shape = Shape(strategy, int(row["workers"]), int(row.get("ps") or 0), int(row["batch"]),
                          tuple(tf_ps.variables_of(prof)), o.placement,
                          shares_host(o.shared_host, meta),
                          tuple(tuple(r) for r in row.get("grads_lag_ms") or ()))
            runs.append((Calibrated(shape, link, *spans(row), slowest_span(row)), prof.name,
                         f"{prof.name} W={shape.workers}{f' P={shape.ps}' if strategy == 'ps' else ''} "
                         f"batch {shape.batch} over {sweep}", meta.get("start"), alone_file))
    mine = [r for r in runs if (r[0].shape.batch, r[1]) == (batch, model)]
    load, ratios = None, []
    if o.overhead_compute and alone:
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
