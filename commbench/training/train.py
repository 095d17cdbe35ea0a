"""``commbench train``: real distributed TensorFlow training, launched like every benchmark.

Ranks come from the local launcher, mpirun or srun; they meet at commbench's rendezvous, agree on
a TF cluster (each rank's address and a port), and become TF tasks through TF_CONFIG:
``--strategy ps``: rank 0 the chief (it drives the ClusterCoordinator and reports), ranks
1..W workers, then P parameter servers; ``--strategy mirrored``: W workers, rank 0 reports.
The row: images/s, step time p50/p99, the loss at the start and end, and the compute time of one
step of the same model without communication, every worker computing at once before and after
training: the median step, and the slowest worker's (what a synchronous step waits for).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from commbench.core.capture import traffic
from commbench.core.config.argtypes import SEED, integer, number
from commbench.core.config.options import opt, restate
from commbench.core.config.run import RunOptions
from commbench.core.errors import UsageError
from commbench.core.imports import installed
from commbench.core.measure import machine
from commbench.core.measure.harness import median_ci
from commbench.core.output.presentation import Presentation
from commbench.core.output.progress import Progress
from commbench.core.output.table import Column, declared, header_line, key, row_line
from commbench.core.run.hostset import default_set, root_netns
from commbench.core.run.placement import Placement
from commbench.core.run.session import Session
from commbench.transports import _tf_bind as tf_bind

IMAGE_MODELS = ("small_cnn", "resnet50", "resnet152", "inception_v3", "inception_resnet_v2", "vgg16",
                "mobilenet_v2")
COLUMNS = [Column("strategy", "Strategy", -9, doc="ps or mirrored"),
           Column("model", "Model", -13, doc="the image model trained"),
           Column("workers", "W", 3, unit="count", doc="worker tasks"),
           Column("ps", "P", 3, unit="count", doc="parameter-server tasks (mirrored: 0)"),
           Column("batch", "Batch", 6, unit="count", doc="images per step per worker"),
           Column("steps", "Steps", 6, unit="count", doc="measured steps (ps: across all workers)"),
           Column("images_s", "Images/s", 10, "{:.1f}", "1/s", "batch x workers x measured steps / time"),
           Column("step_p50_ms", "Step p50(ms)", 13, "{:.2f}", "ms", "median step (ps: a round of one step per "
                  "worker)"),
           Column("step_p99_ms", "p99", 9, "{:.2f}", "ms", "99th percentile step"),
           Column("compute_ms", "Compute(ms)", 12, "{:.2f}", "ms", "median step of one worker without "
                  "communication, all workers at once, before and after training"),
           Column("loss_first", "Loss first", 11, "{:.4f}", doc="loss of the first measured step"),
           Column("loss_last", "last", 8, "{:.4f}", doc="loss of the last measured step")]
CI_KEYS = [key("step_ci_lo_ms", "ms", "lower end of the median step's 95 % confidence interval"),
           key("step_ci_hi_ms", "ms", "upper end of the median step's 95 % confidence interval"),
           key("compute_ci_lo_ms", "ms", "lower end of compute_ms's interval (both measurements' intervals)"),
           key("compute_ci_hi_ms", "ms", "upper end of compute_ms's interval"),
           key("compute_before_ms", "ms", "median compute step measured before training"),
           key("compute_after_ms", "ms", "median compute step measured after training"),
           key("slowest_p50_ms", "ms", "median over steps of the slowest worker's compute step (what a "
                                       "synchronous step waits for)"),
           key("slowest_ci_lo_ms", "ms", "lower end of slowest_p50_ms's interval"),
           key("slowest_ci_hi_ms", "ms", "upper end of slowest_p50_ms's interval"),
           key("compute_during_p50_ms", "ms", "median compute step of every worker measured in bursts of 3 "
                                              "between training steps (after every 5th; ps: round), all workers "
                                              "at once, each burst's first step left out: the compute time at "
                                              "the pace of the run's own minutes", optional=True),
           key("compute_during_ci_lo_ms", "ms", "lower end of compute_during_p50_ms's interval", optional=True),
           key("compute_during_ci_hi_ms", "ms", "upper end of compute_during_p50_ms's interval", optional=True),
           key("compute_cold_p50_ms", "ms", "median of the bursts' first steps: the compute step right after a "
                                            "training step (its communication), all workers at once",
               optional=True),
           key("compute_cold_ci_lo_ms", "ms", "lower end of compute_cold_p50_ms's interval", optional=True),
           key("compute_cold_ci_hi_ms", "ms", "upper end of compute_cold_p50_ms's interval", optional=True),
           key("grads_lag_ms", "ms", "ps: per measured round, how long before the last worker's gradients were "
                                     "ready each other worker's were (W - 1, earliest first; each worker's host "
                                     "clock, tf.timestamp): how far apart the gradients leave for the PS",
               optional=True, many=True)]
BENCH = key("bench", doc="train (train-traffic: --traffic rows)")
_BY_NAME = {c.key: c for c in (*COLUMNS, *CI_KEYS)}
COMPUTE_COLUMNS = [*(_BY_NAME[k] for k in ("model", "workers", "batch", "compute_ms")),
                   Column("compute_before_ms", "Before", 9, "{:.2f}", "ms", "median compute step, first measurement"),
                   Column("compute_after_ms", "After", 9, "{:.2f}", "ms", "median compute step, second measurement"),
                   Column("slowest_p50_ms", "Slowest p50", 12, "{:.2f}", "ms", _BY_NAME["slowest_p50_ms"].doc),
                   Column("cluster_replicas", "Cluster", 8, unit="count",
                          doc="replicas of the TF cluster up (idle) while computing: W with --strategy mirrored, "
                              "0: none")]
COMPUTE_KEYS = [_BY_NAME[k] for k in ("compute_ci_lo_ms", "compute_ci_hi_ms", "slowest_ci_lo_ms", "slowest_ci_hi_ms")]
COMPUTE_BENCH = key("bench", doc="train-compute (`train --compute-only`)")
COMPUTE_PRESENTATION = Presentation("compute_ms", "lower", "none", "workers", ("model",), tuple(COMPUTE_COLUMNS),
                                    "train --compute-only")
PRESENTATION = Presentation("images_s", "higher", "training", "workers", ("strategy", "model"), tuple(COLUMNS),
                            "train")
PACKAGES = ("tensorflow-cpu", "tensorflow", "numpy", "grpcio")


@dataclass(frozen=True)
class TrainOptions(RunOptions):
    strategy: str = opt("ps", choices=("ps", "mirrored"),
                        help="ps: ParameterServerStrategy + ClusterCoordinator; mirrored: MultiWorkerMirroredStrategy "
                             "with RING collectives (default ps)")
    model: str = opt("small_cnn", help=f"image model, as the payload profiles name them: {', '.join(IMAGE_MODELS)} "
                                       "(- or _ both work; default small_cnn)")
    workers: int = opt(2, type=integer(1, 64), help="worker tasks (default 2)")
    ps: int = opt(1, type=integer(1, 64), help="parameter-server tasks with --strategy ps (default 1)")
    batch: int = opt(64, type=integer(1, 1 << 16), help="images per step per worker (default 64)")
    steps: int = opt(60, type=integer(1, 1_000_000), help="measured steps (ps: across all workers; --compute-only: "
                                                          "half before, half after, at least 12 each) (default 60)")
    warmup_steps: int = opt(10, type=integer(0, 1_000_000), help="steps before measuring (default 10)")
    lr: float = opt(0.01, type=number(above=0, hi=100), help="SGD learning rate, momentum 0.9 (default 0.01)")
    seed: int = opt(1, type=SEED, help="seed of the synthetic images and the model's first weights (default 1)")
    timeout: float = restate(RunOptions, "timeout", 120.0, help="seconds to wait for a peer at set-up and for "
                                                                   "each step (default 120)")
    compute_only: bool = opt(False, action="store_true",
                             help="measure the compute step alone (W workers computing at once, no training; "
                                  "with --strategy mirrored its TF cluster up and idle, as in a mirrored run, "
                                  "else none): what `predict --compute` takes, measured apart from the run it "
                                  "predicts")


def add_parser(sub) -> None:
    p = sub.add_parser("train", help="real distributed TensorFlow training on synthetic data; images/s",
                       description="Real distributed TensorFlow training (custom loops) on synthetic images.")
    TrainOptions.add_to(p, overrides={"host_set": {"default": default_set()}})
    p.options = TrainOptions  # type: ignore[attr-defined]  # for the reference page
    p.set_defaults(func=train)


def check_options(args: argparse.Namespace) -> TrainOptions:
    """The options checked, with the model's name normalised."""
    o = TrainOptions.parse(args)
    model = o.model.replace("-", "_")
    if model not in IMAGE_MODELS:
        raise UsageError(f"unknown model {model!r} for train; known: {', '.join(IMAGE_MODELS)}")
    if not tf_installed():
        raise UsageError("train runs TensorFlow, which is not installed here: pip install 'commbench[tf]'")
    if o.traffic and o.compute_only:
        raise UsageError("train --compute-only sends nothing to capture: drop --traffic")
    if o.traffic:
        traffic.check_usable()
    return o.but(model=model)


def tf_installed() -> bool:
    return installed("tensorflow")


def ranks(o: TrainOptions) -> int:
    return 1 + o.workers + o.ps if o.strategy == "ps" and not o.compute_only else o.workers


def roles(o: TrainOptions) -> list[tuple[str, int]]:
    """(TF job, task index) of every rank, in rank order."""
    if o.strategy == "mirrored":
        return [("worker", i) for i in range(o.workers)]
    return [("chief", 0), *(("worker", i) for i in range(o.workers)), *(("ps", i) for i in range(o.ps))]


def cluster_spec(addresses: Sequence[str], rs: Sequence[tuple[str, int]]) -> dict[str, list[str]]:
    spec: dict[str, list[str]] = {}
    for addr, (job, _) in zip(addresses, rs, strict=True):
        spec.setdefault(job, []).append(addr)
    return spec


def train(args: argparse.Namespace, argv: Sequence[str]) -> int:
    return launch_or_run(check_options(args), argv)


def planned(body: dict) -> TrainOptions:
    """The options the launcher decided (``launch_or_run``'s plan)."""
    return TrainOptions.from_plain(body, "the launcher's plan")


def launch_or_run(o: TrainOptions, argv: Sequence[str]) -> int:
    """Start the job's ranks here, handing them the decided options, or run this rank of it."""
    from commbench.launch import plan
    from commbench.launch.local import How, here_or_launch

    tf_bind.preload()  # every task runs a TF server: on the run's address only (see _tf_bind)
    what = f"train --compute-only with {o.workers} workers" if o.compute_only else \
        f"train --strategy {o.strategy} with {o.workers} workers" + (f" and {o.ps} PS" if o.strategy == "ps" else "")
    placement = here_or_launch(ranks(o), argv, How.of(o, private_net=True), what,
                               lambda: plan.encode("train", o.plain()))
    if isinstance(placement, int):
        return placement
    return (compute_only if o.compute_only else run_rank)(placement, o)


def join_tf_cluster(world, o: TrainOptions, rs: Sequence[tuple[str, int]]) -> list[str]:
    """Agree on every rank's TF server address (``tf_bind.endpoints``; ``--port``: o.port + 1 + rank) and
    set TF_CONFIG: this rank becomes its TF task once TensorFlow starts its server. Every rank's address."""
    job, index = rs[world.rank]
    endpoints = tf_bind.endpoints(world, "tf-addr", o.port + 1 + world.rank if o.port else 0)
    os.environ["TF_CONFIG"] = json.dumps({"cluster": cluster_spec(endpoints, rs),
                                          "task": {"type": job, "index": index}})
    return endpoints


def other_work(run: Session) -> machine.OtherWork | None:
    """Rank 0: what else its host does from here to the run's end (its ranks' own CPU time left out):
    the metadata's ``cpu``, which predict warns on (a busy machine moves both the prediction's inputs and
    the step it is compared with)."""
    ours = run.pids_here()
    return machine.OtherWork(ours) if ours is not None else None


def run_rank(placement: Placement, o: TrainOptions) -> int:
    options = o.plain()
    with Session(placement, o.timeout, None, options, PACKAGES) as run:
        world = run.world
        rs = roles(o)
        job, index = rs[world.rank]
        others = other_work(run)
        endpoints = join_tf_cluster(world, o, rs)
        capture = traffic.start(world, run.on_close, root_netns(o.host_set) if o.hosts else None) \
            if o.traffic else None
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        from commbench.training import tf_loops

        reporter = world.rank == 0
        budget = o.timeout * (2 + (o.steps + o.warmup_steps) / max(1, o.workers))
        row = None

        probe: list = []  # this worker's compute step, built before its first use (mirrored: once the strategy is)

        # built, then a barrier: every worker's first timed steps start together (built and timed at once,
        # the first to finish tracing timed its steps alone on the cores: 11-13 ms against 18-27)
        def build_probe() -> None:
            if job == "worker":
                probe.append(tf_loops.ComputeProbe(o.model, o.batch, o.seed))
            world.barrier("compute-probe", patient=True)

        def compute(n: int = 12) -> list[float]:  # one worker's steps without communication (ms)
            return probe[0].steps(n)

        def first_compute() -> list[float]:
            build_probe()
            return compute()

        # the compute time before training and after it, every worker at once: this machine can change
        # pace during a run, and the difference is part of the compute time's uncertainty; and between
        # training steps (``bursts`` of tf_loops.BURST steps, every worker at once): the compute time at the run's own
        # pace, what its steps are compared with (mirrored: this worker's bursts; ps, on the chief: a list of
        # every worker's burst a pause)
        before, bursts = None, []
        if o.strategy == "ps":  # before the workers' servers start (mirrored: after its strategy is made)
            build_probe()
            before = compute() if job == "worker" else None
            world.barrier("compute-before", patient=True)
        if o.strategy == "ps" and job != "chief":
            _server = tf_loops.start_server(job, index)  # serves until this process ends
            while world.bcast_json("train-cmd", timeout=budget) == "compute":  # the chief's, until "done"
                world.gather_json("burst-ms", compute(tf_loops.BURST) if job == "worker" else None)
        else:
            if o.strategy == "ps":
                def between() -> None:  # every worker computes at once, the round's closures joined
                    world.bcast_json("train-cmd", "compute")
                    bursts.append([b for b in world.gather_json("burst-ms", None) or [] if b is not None])
            else:
                def between() -> None:
                    bursts.append(compute(tf_loops.BURST))
            step_fn = tf_loops.run_ps if o.strategy == "ps" else tf_loops.run_mirrored
            progress = Progress(f"train {o.strategy} {o.model}", o.steps, "steps", enabled=reporter)
            try:
                times = step_fn(o.model, o.workers, o.batch, o.steps, o.warmup_steps, o.seed, o.lr,
                                progress.advance, *([] if o.strategy == "ps" else [first_compute]), between=between)
            finally:
                progress.close()
            row = summarize(o, times) if reporter else None
            if o.strategy == "mirrored":
                before = times.compute_before
            if o.strategy == "ps":
                world.bcast_json("train-cmd", "done")
        if o.traffic:  # every rank names its sockets; the chief sums the capture by role
            owned = traffic.owners(world)
            if capture is not None:
                traffic_rows = traffic.rows(capture.stop(), owned, [job for job, _ in rs], times.window,
                                            row["steps"], {"bench": "train-traffic", "strategy": o.strategy,
                                                           "model": o.model, "workers": o.workers,
                                                           "ps": row["ps"]})
        # compute without communication: every worker at once, as they computed during training
        world.barrier("compute")
        after = compute() if job == "worker" else None
        computes = world.gather_json("compute-ms", {"before": before, "after": after, "bursts": bursts}
                                     if after else None)
        if reporter:
            if o.strategy == "ps":  # the chief's: every worker's burst a pause
                by_worker = [list(w) for w in zip(*bursts, strict=True)]
            else:
                by_worker = [c["bursts"] for c in computes if c]
            row.update(compute_row([c["before"] for c in computes if c], [c["after"] for c in computes if c],
                                   by_worker))
            meta = run.metadata("train", {"ranks": world.size, "tf_cluster": cluster_spec(endpoints, rs)})
            meta["metric"] = {"key": "images_s", "better": "higher"}
            meta["cpu"] = others and others.read()
            meta["variable_devices"] = times.devices  # where TF placed every model and optimizer variable
            step = "a round of one step per worker (W closures, then join)" if o.strategy == "ps" else \
                "one synchronous step of every worker"
            print(f"# commbench train: {o.strategy}, {o.model}, {o.workers} workers"
                  f"{f' x {o.ps} PS' if o.strategy == 'ps' else ''}, batch {o.batch} per worker, "
                  f"synthetic images; TF gRPC between tasks\n# step = {step}; images/s = batch x workers x "
                  f"measured steps / time; compute = one step of one worker without communication (all workers "
                  f"at once, as in training; median)\n" + header_line(COLUMNS), flush=True)
            print(row_line(COLUMNS, row), flush=True)
            writer = run.open_results(o.output, meta, list(schema(o.traffic)))
            if writer:
                writer.row({"bench": "train", **row})
            if o.traffic:
                traffic.show(traffic_rows, writer, f"the {row['steps']} measured steps")
        run.finish("train-end")
    sys.stdout.flush()
    return 0


def compute_only(placement: Placement, o: TrainOptions) -> int:
    """``train --compute-only``: every worker computes at once (as in training, on the same hosts),
    twice, with no communication; rank 0 writes the compute row. ``--strategy mirrored``: with the
    strategy's cluster up and idle, as a mirrored run's workers compute (its servers and coordination
    service cost them CPU: their compute before and after training, cluster up, was 1.06-1.18x a plain
    compute-only run's over six rounds; ps's idle cluster cost nothing: 0.96-1.02x, docs/training.md)."""
    with Session(placement, o.timeout, None, o.plain(), PACKAGES) as run:
        world = run.world
        others = other_work(run)
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        from commbench.training import tf_loops

        replicas = 0
        if o.strategy == "mirrored":
            join_tf_cluster(world, o, roles(o))
            replicas = tf_loops.mirrored_strategy().num_replicas_in_sync
            tf_loops.sigterm_ends_the_process()
        # built and traced before the barrier: every worker's timed steps start together (built after it, the
        # first worker to finish tracing timed steps alone on the cores: 11-13 ms bursts against 18-27)
        probe, measured, n = tf_loops.ComputeProbe(o.model, o.batch, o.seed), [], max(12, o.steps // 2)
        for part in ("before", "after"):
            world.barrier(f"compute-{part}", patient=True)
            measured.append(probe.steps(n))
        computes = world.gather_json("compute-ms", measured)
        if world.rank == 0:
            row = {"model": o.model, "workers": o.workers, "batch": o.batch, "cluster_replicas": replicas,
                   **compute_row([c[0] for c in computes], [c[1] for c in computes])}
            meta = run.metadata("train-compute", {"ranks": world.size})
            meta["metric"] = {"key": "compute_ms", "better": "lower"}
            meta["cpu"] = others and others.read()
            print(f"# commbench train --compute-only: {o.model}, {o.workers} workers computing at once, batch "
                  f"{o.batch} per worker, synthetic images; no communication"
                  + (f"; MultiWorkerMirroredStrategy's cluster of {replicas} up, idle" if replicas else "")
                  + f"\n# compute = one step of one worker (median of 2 x {n} steps of every worker); "
                  "slowest = the slowest worker's step\n"
                  + header_line(COMPUTE_COLUMNS), flush=True)
            print(row_line(COMPUTE_COLUMNS, row), flush=True)
            writer = run.open_results(o.output, meta, list(compute_schema()))
            if writer:
                writer.row({"bench": "train-compute", **row})
        run.finish("train-end")
    sys.stdout.flush()
    return 0


def summarize(o: TrainOptions, times) -> dict:
    ns = np.asarray(times.ns, dtype=np.float64)
    per_step_images = o.batch * o.workers  # ps: a round is W steps; mirrored: one step of W workers
    return {"strategy": o.strategy, "model": o.model, "workers": o.workers,
            "ps": o.ps if o.strategy == "ps" else 0, "batch": o.batch, "steps": len(ns) *
            (o.workers if o.strategy == "ps" else 1),
            "images_s": per_step_images * len(ns) / (ns.sum() / 1e9),
            **with_ci("step", ns / 1e6), "step_p99_ms": float(np.percentile(ns, 99)) / 1e6,
            "compute_ms": None, "loss_first": times.losses[0], "loss_last": times.losses[-1],
            **({"grads_lag_ms": times.lags} if times.lags else {})}


def schema(with_traffic: bool) -> dict[str, Column]:
    """Every key train's rows may hold."""
    return declared([BENCH], COLUMNS, CI_KEYS, traffic.KEYS if with_traffic else [])


def compute_schema() -> dict[str, Column]:
    """Every key a ``train --compute-only`` row holds."""
    return declared([COMPUTE_BENCH], COMPUTE_COLUMNS, COMPUTE_KEYS)


def with_ci(name: str, ms) -> dict:
    """NAME_p50_ms (compute: compute_ms) with the 95 % interval of that median (None under 20 samples):
    what `predict` turns into an uncertainty."""
    s = np.sort(np.asarray(ms, dtype=np.float64))
    ci = median_ci(s) or (None, None)
    return {"compute_ms" if name == "compute" else f"{name}_p50_ms": float(np.median(s)),
            f"{name}_ci_lo_ms": ci[0], f"{name}_ci_hi_ms": ci[1]}


def compute_row(before: list[list[float]], after: list[list[float]],
                bursts: Sequence[Sequence[Sequence[float]]] = ()) -> dict:
    """Every worker's compute steps (ms), measured before and after training, all workers at once.
    compute_ms: their median; its interval reaches both medians' 95 % intervals (a change of pace
    between them widens it). slowest_p50_ms: the median over the i-th steps of the slowest worker's i-th
    step, what a synchronous step waits for (the workers do not finish at once), with its interval.
    Where measured, every worker's ``bursts`` between training steps: compute_during_p50_ms, the median
    of their steps after the first (the pace of the run's minutes); compute_cold_p50_ms, of their first
    steps (a step's compute right after a training step's communication)."""
    flat_b, flat_a = [t for w in before for t in w], [t for w in after for t in w]
    pooled, b, a = with_ci("compute", flat_b + flat_a), with_ci("compute", flat_b), with_ci("compute", flat_a)
    ends = [x for part in (pooled, b, a) for x in (part["compute_ci_lo_ms"], part["compute_ci_hi_ms"],
                                                   part["compute_ms"]) if x is not None]
    slowest = [max(ts) for runs in (before, after) for ts in zip(*runs, strict=False)]
    during, cold = [t for w in bursts for b in w for t in b[1:]], [b[0] for w in bursts for b in w if b]
    return {**pooled, "compute_ci_lo_ms": min(ends), "compute_ci_hi_ms": max(ends),
            "compute_before_ms": b["compute_ms"], "compute_after_ms": a["compute_ms"], **with_ci("slowest", slowest),
            **(with_ci("compute_during", during) if during else {}), **(with_ci("compute_cold", cold) if cold else {})}
