"""``commbench predict``: training step time and images/s from micro-benchmark results, a model's
gradient profile and a measured compute time. It is a model (alpha-beta), and says so.

Link: ``t(n) = alpha + n / beta`` fitted to a p2p-latency sweep (one-way us against bytes): alpha
is the latency of the smallest message, beta the slope over messages of 64 KiB and more (1 MB/s is
1 B/us, so n / beta is in us).

PS (a step = every worker pulls the variables, computes, pushes the gradients; TF's placement
as in the PS emulator): pull = push = alpha + X / beta, where X is the bytes the busiest link
carries in one direction. One rank per host: X = max(W x the largest shard, the model) (the
busiest shard's link carries W copies of its shard; each worker's link the whole model). All ranks
on one host (``--shared-host``): every transfer shares one path, X = W x the model.
Step = compute + pull + push; images/s = W x batch / step.

Mirrored (ring all-reduce): allreduce = 2 (W - 1) alpha + 2 (W - 1) / W x model / beta;
step = compute + allreduce. With all ranks on one host the ring's W transfers of each phase
share the path: the byte term is multiplied by W.

``--measured FILE`` replaces the modelled communication with what commbench's own emulators
measured for the same shape: ps-throughput rows with this W and P (pull p50 + push p50 of the
model's payload), or allreduce rows over W ranks (the time at the nearest size, scaled to the
model's bytes).

TF's own per-step cost (the coordinator's scheduling, one RPC per variable, the collective
launches) is not in these terms; ``--overhead FILE`` adds it, measured: a train run of the same
strategy and W with ``--batch 1`` has almost no compute and few bytes, so its step time less its
compute and modelled communication is the runtime's fixed cost per step.

Answers as TBD's network profiler asked: which shards and tensors dominate communication, whether
W workers beat one, and the smallest bandwidth at which they do.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from commbench.core.argtypes import RANKS, integer, number
from commbench.core.config import plain_options
from commbench.core.errors import UsageError
from commbench.core.results import read_runs
from commbench.core.table import Column, header_line, row_line
from commbench.emulators.placement import POLICIES, place, shard_bytes
from commbench.profiles import store

SLOPE_FROM = 64 << 10


@dataclass(frozen=True)
class LinkModel:
    alpha_us: float
    beta_mb_s: float  # 10^6 B/s = bytes per microsecond
    source: str = ""

    def us(self, nbytes: float) -> float:
        return self.alpha_us + nbytes / self.beta_mb_s


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
    room_us: float  # communication time per step W workers can afford and still beat one: (W-1) compute - latency

    @property
    def min_beta_mb_s(self) -> float | None:
        """Below this bandwidth W workers are slower than one (None: no bandwidth makes them faster)."""
        return self.beta_bytes / self.room_us if self.room_us > 0 and self.workers > 1 else None


def predict_ps(sizes: Sequence[int], workers: int, ps: int, batch: int, compute_ms: float, link: LinkModel,
               policy: str = "round-robin", shared_host: bool = False) -> Prediction:
    owners = place(sizes, ps, policy)
    shards = shard_bytes(sizes, owners, ps)
    total = sum(sizes)
    busiest = workers * total if shared_host else max(workers * max(shards), total)
    pull = push = link.us(busiest) / 1e3
    step = compute_ms + pull + push
    c_us = compute_ms * 1e3
    room = (workers - 1) * c_us - 2 * link.alpha_us
    return Prediction("ps", workers, ps, batch, compute_ms, pull + push, {"pull_ms": pull, "push_ms": push}, step,
                      workers * batch / step * 1e3, batch / compute_ms * 1e3, 2 * busiest, room)


def predict_ring(total: int, workers: int, batch: int, compute_ms: float, link: LinkModel,
                 shared_host: bool = False) -> Prediction:
    w = workers
    byte_term = 2 * (w - 1) / w * total * (w if shared_host else 1)
    comm = (2 * (w - 1) * link.alpha_us + byte_term / link.beta_mb_s) / 1e3 if w > 1 else 0.0
    step = compute_ms + comm
    room = (w - 1) * compute_ms * 1e3 - 2 * (w - 1) * link.alpha_us
    return Prediction("mirrored", w, 0, batch, compute_ms, comm, {"allreduce_ms": comm}, step,
                      w * batch / step * 1e3, batch / compute_ms * 1e3, byte_term, room)


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
    runs = read_runs(path, need_rows=True)
    if strategy == "ps":
        rows = [r for run in runs if run.meta.get("bench") == "ps-throughput" for r in run.rows
                if r.get("workers") == workers and r.get("ps") == ps]
        rows = [r for r in rows if str(r.get("payload", "")).startswith(model)] or rows
        if not rows:
            raise UsageError(f"{path}: predict --measured needs ps-throughput rows with --workers {workers} --ps {ps} "
                             f"(e.g. commbench ps-throughput -t grpc --workers {workers} --ps {ps} --payload {model})")
        r = rows[-1]
        return r["pull_p50_ms"] + r["push_p50_ms"], f"ps-throughput {r['transport']} {r['payload']}"
    rows = [r for run in runs if run.meta.get("bench") == "allreduce" and run.meta["options"].get("ranks") == workers
            for r in run.rows if r.get("size")]
    if not rows:
        raise UsageError(f"{path}: predict --measured needs allreduce rows over {workers} ranks "
                         f"(e.g. commbench allreduce -t grpc --ranks {workers} -b 1M -e 256M)")
    r = min(rows, key=lambda r: abs(r["size"] - total))
    return r["time_us"] / 1e3 * total / r["size"], f"allreduce {r['transport']} {r['algorithm']} at {r['size']} B"


def with_comm(p: Prediction, ms: float, source: str) -> Prediction:
    """The prediction with its modelled communication replaced by a measured time."""
    from dataclasses import replace

    step = p.compute_ms + ms
    return replace(p, terms={f"measured_comm_ms ({source})": ms}, comm_ms=ms, step_ms=step,
                   images_s=p.workers * p.batch / step * 1e3)


def with_overhead(p: Prediction, ms: float) -> Prediction:
    """The prediction with a fixed per-step runtime cost added (TF's, measured)."""
    from dataclasses import replace

    step = p.step_ms + ms
    return replace(p, terms={**p.terms, "tf_overhead_ms": ms}, comm_ms=p.comm_ms + ms, step_ms=step,
                   images_s=p.workers * p.batch / step * 1e3, room_us=p.room_us - ms * 1e3)


# -- the command ----------------------------------------------------------------------------------
COLUMNS = [Column("strategy", "Strategy", -9), Column("workers", "W", 4), Column("ps", "P", 3),
           Column("compute_ms", "Compute(ms)", 12, "{:.2f}"), Column("comm_ms", "Comm(ms)", 9, "{:.2f}"),
           Column("step_ms", "Step(ms)", 9, "{:.2f}"), Column("images_s", "Pred img/s", 11, "{:.1f}"),
           Column("measured_images_s", "Meas img/s", 11, "{:.1f}"), Column("error_pct", "Error %", 8, "{:+.1f}"),
           Column("measured_step_ms", "Meas step p50", 14, "{:.2f}")]


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
    p.add_argument("--compute-ms", type=number(0, 1e7, what=" (ms)"),
                   help="one worker's step without communication; default: the train "
                                                    "run's")
    p.add_argument("--placement", choices=POLICIES, default="round-robin", help="PS variable placement")
    p.add_argument("--shared-host", choices=("auto", "yes", "no"), default="auto",
                   help="all ranks on one host share one path (auto: yes if the train run had one host)")
    p.add_argument("--overhead", metavar="FILE", help="a train run of the same strategy and W with --batch 1: "
                                                      "TF's fixed per-step cost is taken from it")
    p.add_argument("--measured", metavar="FILE", help="ps-throughput or allreduce results: use their measured "
                                                      "communication time instead of the alpha-beta terms")
    p.add_argument("--json", action="store_true", help="print the prediction as JSON")
    p.add_argument("--label", default="", help="a name for this prediction in results files and reports (e.g. 1gbit)")
    p.add_argument("-o", "--output", metavar="FILE", help="append the prediction as a row: FILE.jsonl or FILE.csv")
    p.set_defaults(func=run)


def runs_of(path: str, bench: str, needs: str):
    """The runs of one benchmark in a results file (read once), or a one-line error naming what it holds."""
    every = read_runs(path, need_rows=True)
    runs = [r for r in every if r.meta.get("bench") == bench and r.rows]
    if not runs:
        kinds = sorted({str(r.meta.get("bench")) for r in every})
        raise UsageError(f"{path}: {needs}; this file holds {kinds}")
    return runs


def p2p_link(path: str) -> LinkModel:
    runs = runs_of(path, "p2p-latency", "predict --p2p needs p2p-latency results (a size sweep, e.g. "
                   "`commbench p2p-latency -t grpc -m 8:4M -o FILE`)")
    points = [(row["size"], row["avg_us"]) for r in runs for row in r.rows if "avg_us" in row]
    o = runs[-1].meta.get("options", {})
    return fit(points, f"{o.get('transport')} ({o.get('mode')}) from {path}")


def train_row(path: str) -> tuple[dict, dict]:
    runs = runs_of(path, "train", "predict --train needs `commbench train -o FILE` results")
    return runs[-1].rows[-1], runs[-1].meta


def save(args: argparse.Namespace, out: dict) -> None:
    from commbench.core.results import ResultsWriter, check_output_path, run_metadata

    check_output_path(args.output)
    options = plain_options(args)
    keys = ["bench", "label", "strategy", "model", "workers", "ps", "batch", "compute_ms", "comm_ms", "step_ms",
            "images_s", "measured_images_s", "error_pct", "measured_step_ms", "min_beta_mb_s", "shared_host"]
    meta = {**run_metadata("predict", options, [], ("numpy",)), "metric": {"key": "images_s", "better": "higher"}}
    w = ResultsWriter(args.output, meta, keys)
    w.row({"bench": "predict", **{k: out[k] for k in keys[1:]}})
    w.close()


def run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    link = p2p_link(args.p2p)
    row, meta = train_row(args.train) if args.train else ({}, {})

    def pick(name: str, key: str | None = None):
        v = getattr(args, name)
        if v is None:
            v = row.get(key or name)
        if v is None:
            raise UsageError(f"predict needs --{name.replace('_', '-')} (or --train FILE with it)")
        return v

    strategy, workers, batch = pick("strategy"), int(pick("workers")), int(pick("batch"))
    compute = float(pick("compute_ms"))
    ps = int(pick("ps")) if strategy == "ps" else 0
    prof = store.load(pick("model"))
    sizes, names = [t.nbytes for t in prof.tensors], [t.name for t in prof.tensors]
    shared = args.shared_host == "yes" or (args.shared_host == "auto" and len(set(meta.get("hosts", []))) == 1)
    measured = measured_comm(args.measured, strategy, workers, ps, prof.name, sum(sizes)) if args.measured else None

    def model(batch: int, compute: float) -> Prediction:
        if strategy == "ps":
            p = predict_ps(sizes, workers, ps, batch, compute, link, args.placement, shared)
        else:
            p = predict_ring(sum(sizes), workers, batch, compute, link, shared)
        return with_comm(p, *measured) if measured else p

    pred = model(batch, compute)
    if args.overhead:
        small, _ = train_row(args.overhead)
        if (small.get("strategy"), small.get("workers"), small.get("ps", 0)) != (strategy, workers, ps):
            raise UsageError(f"{args.overhead}: --overhead needs a train run of the same strategy, W and P "
                             f"({strategy}, {workers}, {ps}), not {small.get('strategy')}, {small.get('workers')}, "
                             f"{small.get('ps')}")
        bare = model(int(small["batch"]), float(small["compute_ms"]))
        pred = with_overhead(pred, max(0.0, float(small["step_p50_ms"]) - bare.step_ms))
    same = bool(row) and (row.get("strategy"), row.get("workers"), row.get("ps", 0), row.get("batch")) == \
        (strategy, workers, ps, batch)
    out = {**asdict(pred), "min_beta_mb_s": pred.min_beta_mb_s, "model": prof.name, "link": asdict(link),
           "shared_host": shared,
           "measured_images_s": row.get("images_s") if same else None,
           "measured_step_ms": row.get("step_p50_ms") if same else None}
    out["error_pct"] = 100 * (pred.images_s / out["measured_images_s"] - 1) if out["measured_images_s"] else None
    out["label"] = args.label
    if args.output:
        save(args, out)
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"# commbench predict: {strategy}, {prof.name} ({sum(sizes) / 1e6:.2f} MB in {len(sizes)} tensors), "
          f"batch {batch}; a model, not a measurement")
    print(f"# link: alpha {link.alpha_us:.1f} us, beta {link.beta_mb_s:.0f} MB/s, fitted to {link.source}; "
          f"{'all ranks share one host' if shared else 'one rank per host'}")
    print(header_line(COLUMNS))
    print(row_line(COLUMNS, out))
    print("# terms: " + ", ".join(f"{k} {v:.2f}" for k, v in pred.terms.items()) + f", compute {compute:.2f} ms")
    for line in dominant(sizes, names, ps, args.placement):
        print(f"# {line}")
    verdict = "pays off" if pred.images_s > pred.one_worker_images_s else "does not pay off"
    print(f"# {workers} workers: {pred.images_s:.1f} img/s against one worker's {pred.one_worker_images_s:.1f}: "
          f"data parallelism {verdict} at this bandwidth")
    if pred.min_beta_mb_s is None:
        print(f"# no bandwidth makes {workers} workers faster than one: latency alone exceeds what they save")
    else:
        print(f"# minimum bandwidth for {workers} workers to beat one: {pred.min_beta_mb_s:.1f} MB/s "
              f"({pred.min_beta_mb_s * 8 / 1e3:.2f} Gbit/s)")
    if row and not same:
        print(f"# the train run in {args.train} had W={row.get('workers')} P={row.get('ps')}: "
              "this is a prediction beyond what was measured")
    return 0
