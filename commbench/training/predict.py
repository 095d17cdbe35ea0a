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
import json
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from functools import cached_property

import numpy as np

from commbench.core.errors import UsageError
from commbench.core.output.table import header_line, row_line
from commbench.emulators import tf_ps
from commbench.profiles import store
from commbench.training.calibration import Calibration, Runtime, calibrate
from commbench.training.evidence import (
    busy_note,
    comm_span,
    compute_note,
    compute_rows,
    compute_span,
    drifting,
    measured_comm,
    measured_span,
    own_compute,
    p2p_link,
    pooled,
    repeats,
    shape_of,
    shares_host,
    slowest_span,
    train_rows,
)
from commbench.training.model import (
    COVERAGE,
    Curve,
    Link,
    LinkModel,
    Prediction,
    Shape,
    Span,
    dominant,
    interval_end,
    min_bandwidth,
    pct_off,
    restepped,
    with_comm,
    with_runtime,
    with_wait,
)
from commbench.training.predict_options import PredictOptions
from commbench.training.predict_rows import COLUMNS, schema


def add_parser(sub) -> None:
    p = sub.add_parser("predict", help="predict training images/s from p2p results, a model profile and "
                                       "a compute time; compare with a train run",
                       description=__doc__.split("\n\n")[0].replace("``", ""))
    PredictOptions.add_to(p)
    p.options = PredictOptions  # for the reference page
    p.set_defaults(func=run)


def save(o: PredictOptions, out: dict) -> None:
    from commbench.core.output.results import ResultsWriter, check_output_path, run_metadata

    assert o.output is not None
    check_output_path(o.output)
    keys = list(schema())
    meta = {**run_metadata("predict", {"command": "predict", **o.plain()}, [], ("numpy",)),
            "metric": {"key": "images_s", "better": "higher"}}
    w = ResultsWriter(o.output, meta, keys)
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
        return _run(PredictOptions.parse(args))


def _run(o: PredictOptions) -> int:
    inputs = gather(o)
    f = forecast(inputs)
    if o.output:
        save(o, f.out)
    if o.json:
        print(json.dumps(f.out, indent=2))
    else:
        render(inputs, f)
    return 0


# -- inputs: what the command line and the files it names give ----------------------------------------
@dataclass(frozen=True)
class Inputs:
    """Everything a prediction is made from, read and checked once."""

    opts: PredictOptions
    link: Link
    row: dict  # the --train file's last run (empty without one)
    rows: list[dict]  # its repeats of that shape
    same: bool  # that run is of the predicted shape
    prof: store.Profile
    shape: Shape
    compute: Span  # the compute time given, alone
    compute_from: str  # --compute's file, "--compute-ms" or "in-sample"
    measured: tuple[float, str] | None  # --measured: the emulators' communication (ms, source)
    cal: Calibration
    load: Span  # the compute inside training over alone (1 without a calibration of it)
    slowest: Span | None  # the slowest worker's compute, inside training, where measured for this W

    @property
    def inrun(self) -> float:
        """The compute time inside training (ms a step)."""
        return self.compute.mid * self.load.mid

    @cached_property  # read by the comparison and by the drift note
    def own_computes(self) -> tuple[float, ...]:
        """The compute time each compared run measured inside itself, between its steps (ms, its median)."""
        return tuple(own_compute(r).mid for r in self.rows if r.get("compute_ms") is not None)


def gather(o: PredictOptions) -> Inputs:
    """The link, the shape, the compute time and the calibration from the options and the files."""
    if not o.p2p:
        raise UsageError("predict needs --p2p FILE: a p2p-latency sweep of the link (see 'commbench predict --help')")
    link = p2p_link(o.p2p)
    runs = train_rows(o.train) if o.train else []
    row, meta = runs[-1] if runs else ({}, {})
    rows = repeats(runs) if runs else []

    def pick(v, name: str):
        v = row.get(name) if v is None else v
        if v is None:
            raise UsageError(f"predict needs --{name.replace('_', '-')} (or --train FILE with it)")
        return v

    strategy = pick(o.strategy, "strategy")
    workers, batch = int(pick(o.workers, "workers")), int(pick(o.batch, "batch"))
    ps = int(pick(o.ps, "ps")) if strategy == "ps" else 0
    prof = store.load(pick(o.model, "model"))
    compute, compute_from, given = _compute_given(o, row, rows, prof.name, workers, batch, strategy, pick)
    shared = shares_host(o.shared_host, meta)
    shape = Shape(strategy, workers, ps, batch, tuple(tf_ps.variables_of(prof)), o.placement, shared)
    total = sum(t.nbytes for t in prof.tensors)
    measured = measured_comm(o.measured, strategy, workers, ps, prof.name, total) if o.measured else None
    # the compute inside training: the compute alone (given) times the calibration's load; a run's own
    # compute (in-sample) was measured inside it already
    cal = calibrate(o, strategy, prof.name, batch, compute.mid, workers, compute_from != "in-sample") \
        if o.overhead else Calibration(Runtime(()))
    load = cal.load or Span.of(1.0)
    same = bool(row) and shape_of(row) == (strategy, workers, ps, batch, prof.name)
    slowest_ = [s for s in map(slowest_span, given) if s] if same or o.compute else []
    slowest = pooled(slowest_) if slowest_ else None  # measured for this W: what its steps wait for
    slowest = Span.of(*(x * load.mid for x in (slowest.mid, slowest.lo, slowest.hi))) if slowest else None
    return Inputs(o, link, row, rows, same, prof, replace(shape, lags=cal.lags), compute, compute_from,
                  measured, cal, load, slowest)


def _compute_given(o: PredictOptions, row: dict, rows: list[dict], model: str, workers: int, batch: int,
                   strategy: str, pick: Callable) -> tuple[Span, str, list[dict]]:
    """The compute time alone (its span), where it came from, and the runs it was read from."""
    if o.compute and o.compute_ms is not None:
        raise UsageError("predict: give --compute FILE or --compute-ms, not both")
    if o.compute:
        given = compute_rows(o.compute, model, workers, batch, strategy)
        return pooled([drifting(r) for r in given]), o.compute, given
    if o.compute_ms is not None:
        return Span.of(o.compute_ms), "--compute-ms", []
    return pooled([own_compute(r) for r in rows if r.get("compute_ms") is not None] or
                  [compute_span(row, pick(o.compute_ms, "compute_ms"))]), "in-sample", rows


# -- the prediction: the middle, the corners, the interval ----------------------------------------------
@dataclass(frozen=True)
class Forecast:
    """A prediction made: its row (``out``), the middle's step and what render says beside the row."""

    out: dict
    pred: Prediction
    runtime: Span  # TF's runtime at this shape (ms a step)
    curve: Curve  # how much of the runtime hides under the wire, per calibration link
    meas: Span | None  # the measured images/s of the compared repeats
    pays: bool | None


@dataclass(frozen=True)
class Corners:
    """The step at any inputs (``at``), and the inputs of the middle and of the corners that make W
    workers least (tight) and most (roomy) worth it against one."""

    inputs: Inputs
    r: tuple[tuple[float, Curve], ...]  # TF's runtime (cost, curve): the fit's low, middle and high nets

    def at(self, c: float, s: float | None, lm: LinkModel, r: tuple[float, Curve],
           turn: float | None = None) -> Prediction:
        """At compute c (the median worker's), the step waiting for s (the slowest's; None: not), the
        link, TF's runtime r (ms a step, and the curve of how much hides under the wire), the ps gradients
        ``turn`` of the way to in turn (None: as the calibration's lags make it, else TURN)."""
        i = self.inputs
        p = i.shape.at(c, lm, turn)
        p = with_comm(p, *i.measured) if i.measured else p
        p = with_wait(p, s) if s is not None else p
        return with_runtime(p, *r) if i.opts.overhead else p

    def end(self, which: str) -> tuple:
        i = self.inputs
        c = {"mid": 1, "tight": 0, "roomy": 2}[which]  # the compute time
        j = {"mid": 1, "tight": 2, "roomy": 0}[which]  # the rest
        s = i.slowest.hi if i.slowest and j == 2 else None  # the slow ends wait for the slowest worker
        return ((i.compute.lo * i.load.lo, i.inrun, i.compute.hi * i.load.hi)[c], s,
                (i.link.fast, i.link.mid, i.link.slow)[j], (self.r[0], self.r[1], self.r[2])[j], (1.0, None, 0.0)[j])

    def min_beta(self, which: str) -> float | None:
        c, s, lm, r, turn = self.end(which)
        return None if self.inputs.measured else \
            min_bandwidth(lambda beta: self.at(c, s, LinkModel(lm.alpha_us, beta), r, turn))

    def interval(self, pred: Prediction) -> tuple[Prediction, Prediction]:
        """The slow and fast ends: each input moved to an end of its interval alone, added in quadrature."""
        i, mid = self.inputs, dict(zip(("c", "s", "lm", "r", "turn"), self.end("mid"), strict=True))

        def moved(**change) -> float:
            return self.at(**{**mid, **change}).step_ms

        c, load = i.compute, i.load
        slow = [moved(c=c.hi * load.mid), moved(c=c.mid * load.hi), moved(lm=i.link.slow), moved(r=self.r[2]),
                moved(turn=0.0)] + ([moved(s=i.slowest.hi)] if i.slowest else [])
        fast = [moved(c=c.lo * load.mid), moved(c=c.mid * load.lo), moved(lm=i.link.fast), moved(r=self.r[0]),
                moved(turn=1.0)]
        return (restepped(pred, interval_end(pred.step_ms, slow, slow=True)),
                restepped(pred, max(1e-9, interval_end(pred.step_ms, fast, slow=False))))


def forecast(i: Inputs) -> Forecast:
    """The prediction at the middle, its 90 % interval, the verdicts, and the comparison with the runs."""
    wire_mid = i.measured[0] if i.measured else i.shape.at(i.inrun, i.link.mid, None).comm_ms
    r_mid, r_lo, r_hi = i.cal.runtime.pairs(i.shape, wire_mid)
    corners = Corners(i, (r_lo, r_mid, r_hi))
    pred, tight, roomy = (corners.at(*corners.end(w)) for w in ("mid", "tight", "roomy"))
    pays = True if tight.margin_ms > 0 else False if roomy.margin_ms < 0 else None
    slow, fast = corners.interval(pred)
    rt = i.cal.runtime.at(i.shape)
    meas = measured_span(i.rows) if i.same and i.row.get("images_s") else None
    out = {**asdict(pred), "min_beta_mb_s": corners.min_beta("mid"), "min_beta_lo_mb_s": corners.min_beta("roomy"),
           "min_beta_hi_mb_s": corners.min_beta("tight"), "images_lo": slow.images_s, "images_hi": fast.images_s,
           "pays_off": pays, "overhead_ms": pred.terms.get("tf_runtime_ms"), "runtime_ms": asdict(rt),
           "model": i.prof.name, "link": asdict(i.link), "shared_host": i.shape.shared_host,
           "beyond_compute_ms": pred.step_ms - i.inrun, "interval_coverage": COVERAGE, "label": i.opts.label,
           "compute_from": i.compute_from, "calibration": i.cal.described or None, "runtime_pace": i.cal.pace,
           "compute_alone_ms": i.compute.mid, "runtime_hidden_limit_ms": max([0.0, *(h for _, h in r_mid[1])]),
           "runtime_hidden_curve": " ".join(f"{w:.2f}:{h:.2f}" for w, h in r_mid[1]) or None,
           "runtime_hidden_ms": -pred.terms.get("runtime_hidden_ms", 0.0), "compute_load": i.load.mid,
           "compute_load_lo": i.load.lo, "compute_load_hi": i.load.hi,
           "compute_load_runs": i.cal.load_runs if i.cal.load else None, "calibration_minutes": i.cal.minutes,
           "gradients_lag_rounds": len(i.cal.lags) if i.shape.strategy == "ps" else None,
           **compared(i, pred, slow, fast, meas)}
    return Forecast(out, pred, rt, tuple(r_mid[1]), meas, pays)


def compared(i: Inputs, pred: Prediction, slow: Prediction, fast: Prediction, meas: Span | None) -> dict:
    """The prediction against the compared runs (--train of the predicted shape): images/s, the step
    beyond compute, the communication less their own compute, and whether the intervals meet."""
    m = meas.mid if meas else None
    mean_step = i.shape.workers * i.shape.batch / m * 1e3 if m else None  # the mean step, as images/s is
    meas_beyond = mean_step - i.inrun if mean_step is not None else None
    own = i.own_computes if m else ()
    comm_meas = mean_step - float(np.median(own)) if own and mean_step is not None else None
    each = [comm_span(r) for r in i.rows if r.get("compute_ms") is not None and r.get("images_s")] if own else []
    each = [] if None in each else each  # a repeat without an interval: how finely they measured it is unknown
    beyond = pred.step_ms - i.inrun
    return {"measured_images_s": m, "measured_lo": meas.lo if meas else None,
            "measured_hi": meas.hi if meas else None, "measured_runs": len(i.rows) if meas else None,
            "measured_step_ms": float(np.median([r["step_p50_ms"] for r in i.rows])) if meas else None,
            "error_pct": 100 * (pred.images_s / m - 1) if m else None,
            "measured_beyond_compute_ms": meas_beyond, "beyond_compute_error_pct": pct_off(beyond, meas_beyond),
            "measured_comm_ms": comm_meas, "comm_error_pct": pct_off(beyond, comm_meas),
            "measured_comm_lo_ms": min(c.lo for c in each if c) if each else None,
            "measured_comm_hi_ms": max(c.hi for c in each if c) if each else None,
            "within": (meas.lo <= fast.images_s and slow.images_s <= meas.hi) if meas else None,
            "inside": (slow.images_s <= meas.mid <= fast.images_s) if meas else None}


# -- rendering: the row as a table, and what it rests on ----------------------------------------------
WARNING = "warning: "  # a line that weakens the comparison (`# warning: ...`: launchers/predict.sh shows these)
WIDE_COMPUTE = 1.5  # a compute time's high end beyond this times its low end: a pace that moved while measured


def render(i: Inputs, f: Forecast) -> None:
    out, sizes = f.out, [t.nbytes for t in i.prof.tensors]
    link, shape = i.link, i.shape
    print(f"# commbench predict: {shape.strategy}, {i.prof.name} ({sum(sizes) / 1e6:.2f} MB in {len(sizes)} "
          f"tensors), batch {shape.batch}; a model, not a measurement")
    print(f"# link: alpha {link.mid.alpha_us:.1f} us ({link.fast.alpha_us:.1f}-{link.slow.alpha_us:.1f}), beta "
          f"{link.mid.beta_mb_s:.0f} MB/s ({link.slow.beta_mb_s:.0f}-{link.fast.beta_mb_s:.0f}), fitted to "
          f"{link.mid.source}; {'all ranks share one host' if shape.shared_host else 'one rank per host'}")
    print(header_line(COLUMNS))
    print(row_line(COLUMNS, out))
    for line in [*_terms(i, f), *_verdicts(i, f)]:
        print(f"# {line}")


def _terms(i: Inputs, f: Forecast) -> list[str]:
    """What the step is made of: the gradients' turn, the terms, the step beyond compute, TF's runtime."""
    out, pred, cal, compute, load = f.out, f.pred, i.cal, i.compute, i.load
    lines = []
    if pred.gradients_turn is not None:
        lines.append(f"the workers' gradients cross the PS's link {pred.gradients_turn:.2f} of the way from all at "
                     "once to in turn: " + (f"as {len(cal.lags)} calibration rounds' gradients-ready lags make it "
                                            "at this link" if cal.lags else
                                            "TURN (no calibration run of this W measured the lags)"))
    lines.append("terms: " + ", ".join(f"{k} {v:.2f}" for k, v in pred.terms.items()) +
                 f", compute {compute.mid:.2f} ms ({compute.lo:.2f}-{compute.hi:.2f}) from " +
                 ("the compared run itself (in-sample: measure it apart with `train --compute-only` and give "
                  "--compute)" if i.compute_from == "in-sample" else i.compute_from) +
                 (f", x {load.mid:.3f} ({load.lo:.3f}-{load.hi:.3f}) inside training (the load of "
                  f"{cal.load_runs} calibration runs: --overhead-compute)" if out["compute_load_runs"] else ""))
    beyond, comm = out["measured_beyond_compute_ms"], out["measured_comm_ms"]
    lines.append(f"beyond compute (the network, TF's runtime, the slowest worker): predicted "
                 f"{out['beyond_compute_ms']:.2f} ms a step" + (
                     f", measured {beyond:.2f} ms (the mean step less the same compute time)"
                     + (f": {out['beyond_compute_error_pct']:+.1f} %" if out["beyond_compute_error_pct"] is not None
                        else "") if beyond is not None else "")
                 + (f"; less its own compute (measured in it) {comm:.2f} ms"
                    + (f" ({out['measured_comm_lo_ms']:.2f}-{out['measured_comm_hi_ms']:.2f})"
                       if out["measured_comm_lo_ms"] is not None else "")
                    + (f": {out['comm_error_pct']:+.1f} %" if out["comm_error_pct"] is not None else "")
                    if comm is not None else ""))
    if i.opts.overhead:
        rt = f.runtime
        made = "" if cal.minutes is None else f"; made over {cal.minutes:.0f} min" + (
            " (back to back: one phase of a shared machine; spread them over the time you measure in)"
            if cal.minutes < 5 else "")
        lines.append(f"TF's runtime: {cal.runtime.describe(i.shape.strategy)}, x "
                     f"{' and '.join(map(str, i.shape.counts()))} = {rt.mid:.2f} ms per step ({rt.lo:.2f}-"
                     f"{rt.hi:.2f}); fitted to {cal.described}"
                     + (f", at the pace of the compute time given ({cal.pace:.2f}x theirs)" if cal.pace else "") + made
                     + ("; of it under the wire (at each calibration link's): "
                        + ", ".join(f"{h:.2f} ms under {w:.2f}" for w, h in f.curve)
                        + f" ({out['runtime_hidden_ms']:.2f} here)" if f.curve else ""))
    return lines


def _verdicts(i: Inputs, f: Forecast) -> list[str]:
    """The interval against the measurement, the dominant shards, whether W workers pay off, and from
    which bandwidth."""
    out, pred, meas, shape, m = f.out, f.pred, f.meas, i.shape, f.out["measured_images_s"]
    lines = [f"Low / High: the prediction's {COVERAGE:.0%} interval (every input's 95 % interval, one at a time, "
             "added in quadrature)"
             + (f"; measured {m:.1f} img/s ({'inside' if out['inside'] else 'outside'} it; {meas.lo:.1f}-"
                f"{meas.hi:.1f}: the 95 % intervals of {len(i.rows)} run{'s' if len(i.rows) > 1 else ''}, which "
                f"{'overlap' if out['within'] else 'miss'} Low-High; the point estimates differ by "
                f"{out['error_pct']:+.1f} %)" if meas else "")]
    lines += dominant([t.nbytes for t in i.prof.tensors], [t.name for t in i.prof.tensors], shape.ps,
                      i.opts.placement)
    verdict = {True: "pays off", False: "does not pay off",
               None: "undecided: the uncertainty spans one worker's rate"}[f.pays]
    calibrated = bool(i.opts.overhead)
    if not calibrated and not i.measured:
        lines.append("TF's runtime is not calibrated (no --overhead): the step has the network's terms and compute "
                     "alone, and TensorFlow's own cost per step (often several ms) is left out, so the step is "
                     "predicted short and img/s high; calibrate it once with --overhead (launchers/predict.sh, "
                     "docs/training.md)")
    lines.append(f"{shape.workers} workers: {pred.images_s:.1f} img/s against one worker's "
                 f"{pred.one_worker_images_s:.1f}: data parallelism {verdict} at this bandwidth"
                 + ("" if calibrated or i.measured else ", were TF's runtime free (not calibrated)"))
    if not i.measured:  # the minimum bandwidth is the model's: a measured communication has none
        lines.append(min_bandwidth_line(shape.workers, out["min_beta_lo_mb_s"], out["min_beta_hi_mb_s"],
                                        out["min_beta_mb_s"]))
    # what weakens the comparison, marked so that a recipe showing the row alone shows these too
    c = i.compute
    if c.lo > 0 and c.hi / c.lo > WIDE_COMPUTE:
        lines.append(f"{WARNING}the compute time spans {c.lo:.2f}-{c.hi:.2f} ms ({c.hi / c.lo:.1f}x: the machine's "
                     "pace moved that far while it was measured), so Low-High is wide and a measurement inside "
                     "it says little; measure again on a quieter machine")
    if (drift := compute_note(i.inrun, i.own_computes, i.opts.compute, i.opts.train,
                                   bool(i.opts.overhead_compute))) is not None:
        lines.append(f"{WARNING}{drift}")
    o = i.opts
    files = [("--train", o.train), ("--compute", o.compute), *(("--overhead", f) for f in o.overhead or ()),
             *(("--overhead-compute", f) for f in o.overhead_compute or ())]
    if (busy := busy_note(files)) is not None:
        lines.append(f"{WARNING}{busy}")
    if i.row and not i.same:
        r = i.row
        lines.append(f"{WARNING}the train run in {i.opts.train} was {r.get('model')} W={r.get('workers')} "
                     f"P={r.get('ps')} batch {r.get('batch')}: this is a prediction beyond what was measured")
    return lines
