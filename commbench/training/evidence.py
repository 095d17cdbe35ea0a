"""What predict reads from results files: a p2p sweep's link, train runs and their repeats, compute
times (with their intervals, pooled), the slowest worker, measured communication."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from commbench import presentation
from commbench.core.errors import UsageError
from commbench.training.model import Link, Span, fit_span


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
    moved between the run's two measurements (before and after: the middle divided and multiplied by
    their ratio, so a pace that moved 2x gives half to twice the middle, never a time at or below 0).
    A later run computes at the pace of its own minutes, not at the median of these."""
    span, before, after = compute_span(row, row["compute_ms"]), row.get("compute_before_ms"), \
        row.get("compute_after_ms")
    if before is None or after is None or min(before, after) <= 0:
        return span
    moved = max(before, after) / min(before, after)
    return Span.of(span.mid, min(span.lo, before, after, span.mid / moved),
                   max(span.hi, before, after, span.mid * moved))


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


def shares_host(choice: str, meta: dict) -> bool:
    """``--shared-host``: yes, no, or auto: whether the run whose metadata this is had every rank on one host."""
    return choice == "yes" or (choice == "auto" and one_host(meta))


COMPUTE_DRIFT = 1.15  # beyond this, the compute inside training moves a prediction past its goal (ps 10 %)


def compute_note(alone: float, inside: Sequence[float], compute: str | None, train: str | None,
                 calibrated: bool = False) -> str | None:
    """A line where the compute time the prediction used (``alone``: measured by the compute-only runs,
    times the calibrated load where there is one) and the train runs' own compute (``inside``: measured
    in each run, between or around its steps) differ by more than ``COMPUTE_DRIFT``: the step is
    predicted from the one and measured with the other, so the prediction is off by about as much.
    Other work on a busy machine does it, and so do the training's own processes on a small one (on
    the 2-core development VM, quiet, small_cnn's workers computed 1.01-1.19x slower inside training
    than alone). The runs' load averages (their metadata) are named; ``calibrated``: the load inside
    training was calibrated (--overhead-compute). None where they agree or either is missing."""
    if not (compute and train and inside and alone > 0):
        return None
    mid = float(np.median(inside))
    ratio = mid / alone
    if 1 / COMPUTE_DRIFT <= ratio <= COMPUTE_DRIFT:
        return None

    def loads(runs: list) -> list[tuple[float, int]]:
        return [(float(r.meta["load"][0]), int(r.meta.get("cpus") or 1)) for r in runs
                if isinstance(r.meta.get("load"), list) and r.meta["load"] and r.rows]

    def span(xs: list[tuple[float, int]]) -> str:
        lo, hi = min(x for x, _ in xs), max(x for x, _ in xs)
        return f"{lo:.1f}" if hi - lo < 0.05 else f"{lo:.1f}-{hi:.1f}"

    trained = presentation.read_checked(train)
    a, b = loads(presentation.read_checked(compute)), loads(trained)
    cpus = max((c for _, c in a + b), default=0)
    # busy: more runnable than the cores and a train run's own processes (the run before this one leaves
    # them in the 1-minute average: a chief, W workers and P servers)
    own = max((int(row.get("workers") or 0) + int(row.get("ps") or 0) + 1 for r in trained for row in r.rows),
              default=0)
    busy = bool(a and b) and max(x for x, _ in a + b) > cpus + own
    said = f" (1-minute load {span(a)} and {span(b)} as they started, {cpus} CPUs)" if a and b else ""
    return (f"the compute time used ({alone:.2f} ms a step, from {compute}) and the compute measured inside the "
            f"train runs ({mid:.2f} ms) differ {ratio:.2f}x{said}: the step is predicted from the one and measured "
            "with the other, so the prediction is off by about as much; "
            + ("the machine was busy: measure both on a quiet one" if busy else
               "the compute-only runs computed slower than the workers inside training: they caught a slower "
               "phase of the machine (more compute-only runs around the train run pool it out)" if ratio < 1 else
               "the training's own processes slowed its workers more than in the calibration runs (on a small "
               "machine that moves from run to run: more runs, --overhead-compute of each)" if calibrated else
               "where the machine was quiet, the training's own processes slowed its workers: calibrate that with "
               "--overhead-compute (launchers/predict.sh brackets each train run with compute-only runs)"))


BUSY_SHARE = 0.25  # other work on a quarter of the CPUs or more, on average over a run: a busy machine


def busy_note(files: Sequence[tuple[str, str | None]]) -> str | None:
    """A line where the runs a prediction rests on (train, compute-only, calibration; each ``(option,
    path)``) shared their machine with other work: their metadata's ``cpu`` (what else kept the CPUs
    busy, averaged over the run, the run's own processes left out) at BUSY_SHARE of them or more. Other
    work slows the inputs' runs and the train run it is compared with by different amounts at
    different times, so a prediction can be off beyond its interval with no other sign. None where
    every run was quiet or did not say."""
    busy = []
    for flag, path in files:
        if not path:
            continue
        shares = [(float(c["busy"]), int(c["cpus"])) for r in presentation.read_checked(path)
                  if isinstance(c := r.meta.get("cpu"), dict) and isinstance(c.get("busy"), (int, float))
                  and isinstance(c.get("cpus"), int) and c["cpus"] > 0]
        worst = max(shares, key=lambda s: s[0] / s[1], default=None)
        if worst and worst[0] >= BUSY_SHARE * worst[1]:
            busy.append(f"{worst[0]:.1f} of {worst[1]} CPUs during {flag} {path}")
    if not busy:
        return None
    return (f"warning: other work used {'; '.join(busy)} (the runs' own processes left out): it slows the "
            "runs behind the prediction and the train run it is compared with by different amounts, so the "
            "error can exceed the interval; measure on a quiet machine")
