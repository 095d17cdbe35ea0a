"""Run one benchmark on this rank: a session, the transport, every point, the table on rank 0,
results streamed to a file as they are measured."""

from __future__ import annotations

from commbench.benchmarks.base import PAYLOAD, SIZE, Benchmark, Context
from commbench.core.capture import traffic
from commbench.core.config.run import RunConfig
from commbench.core.errors import say
from commbench.core.measure import buffers, machine
from commbench.core.measure.harness import harness_overhead_ns
from commbench.core.output.progress import Progress
from commbench.core.output.table import declared, header_line, key, row_line
from commbench.core.run.hostset import root_netns
from commbench.core.run.placement import Placement
from commbench.core.run.session import Session
from commbench.transports._net import SocketOptions
from commbench.transports.base import Transport

PACKAGES = ("numpy", "grpcio", "protobuf", "mpi4py", "tensorflow-cpu")
RUNNER = [key("bench", doc="the benchmark (NAME-traffic: --traffic rows)"),
          key("run_id", doc="the run's id, as in its metadata row"),
          key("transport", doc="the transport (-t)"), key("mode", doc="the transport's mode, e.g. raw/stream"),
          key("poll", doc="blocking or busy"), PAYLOAD, SIZE,
          key("buffers", "count", "buffers in the message (iovec entries)")]
RUNNER_KEYS = tuple(c.key for c in RUNNER)


def schema(bench_cls: type[Benchmark], transport_cls: type[Transport], with_traffic: bool) -> list[str]:
    """Every key a run's rows may hold, in the order of a CSV's columns: known before the first row."""
    return list(declared(RUNNER, bench_cls.row_keys().values(), transport_cls.counter_keys,
                         traffic.KEYS if with_traffic else []))


def run_rank(placement: Placement, bench_cls: type[Benchmark], transport_cls: type[Transport],
             config: RunConfig) -> int:
    c = config.common
    buffers.configure(c.hugepages == "on")
    buffers.steady_malloc()
    bench = bench_cls(config)
    bind = config.net.bind if isinstance(config.net, SocketOptions) else None
    transport_cls.before_rendezvous(config.net)
    with Session(placement, c.timeout, bind, config.options(), PACKAGES, bench.tolerant, config.plan()) as run:
        world = run.world
        capture = traffic.start(world, run.on_close, root_netns(c.host_set) if c.hosts else None) \
            if c.traffic else None
        transport = transport_cls(world, config)
        run.on_close(transport.close)
        links = transport.connect(bench.peers(world))
        ctx = Context(world, transport, links, config, config.loops, c.validate, c.seed, c.inject_corruption,
                      run.watchdog.quiet, [] if c.traffic and world.rank == 0 else None)
        meta = run.metadata(bench.name, {"poll": config.poll, "mode": transport.mode(), "ranks": world.size,
                                         "loops": config.loops.describe(bench.loop_source),
                                         "payload_spec": config.payload_spec})
        meta["versions"].update(transport.versions())
        meta.update(memory=buffers.backing(), harness_overhead_ns=harness_overhead_ns(),
                    metric={"key": bench.metric, "better": bench.better})
        if world.rank == 0:
            meta.update(bench.metadata(world))
        if config.poll == "busy":  # what else runs here: the run's own ranks left out (MPI's wait spins)
            ours = run.pids_here()
            if ours is not None:
                meta["cpu"] = {**(machine.busy_cpus(exclude=ours) or {}), "spinning": len(ours)}
        columns = [bench.size_column(meta), *bench.columns]
        if world.rank == 0:
            print("\n".join([*bench.header(meta), header_line(columns)]), flush=True)
        writer = run.open_results(c.output, meta, schema(bench_cls, transport_cls, c.traffic))
        total, unit = bench.progress(world)
        progress = Progress(bench.name, total, unit, enabled=world.rank == 0)
        run.on_close(progress.close)
        wrong = 0
        for payload, got in bench.measure(ctx):
            if got is None:
                continue
            progress.advance()
            clash = set(got) & set(RUNNER_KEYS)
            if clash:
                raise AssertionError(f"{bench.name} rows must not set the runner's keys {sorted(clash)}")
            row = {"bench": bench.name, "run_id": meta["run_id"], "transport": transport.name,
                   "mode": transport.mode(), "poll": config.poll, "payload": payload.label, "size": payload.nbytes,
                   "buffers": len(payload.sizes), **got}
            if writer:  # the file first: a rank killed in between has printed nothing the file lacks
                writer.row(row)
            print(row_line(columns, row), flush=True)
            wrong += row.get("wrong") or 0
        progress.close()
        if world.rank == 0:
            lines, extra = bench.conclude(ctx)
            for got in extra:
                row = {"bench": bench.name, "run_id": meta["run_id"], "transport": transport.name,
                       "mode": transport.mode(), "poll": config.poll, **got}
                if writer:
                    writer.row(row)
            if lines:
                print("\n".join(lines), flush=True)
        if c.traffic:  # every rank names its sockets while the run's connections are open
            owned = traffic.owners(world)
            if capture is not None:
                show_traffic(capture.stop(), owned or [], bench.roles(world), ctx.traffic or [], writer,
                             {"bench": f"{bench.name}-traffic", "run_id": meta["run_id"], "transport": transport.name,
                              "mode": transport.mode()})
        run.finish()
    if wrong:
        say(f"#wrong {wrong}: data arrived that differs from what was sent (see the #wrong column)")
        return 1
    return 1 if world.rank == 0 and bench.failed() else 0


def show_traffic(captured, owned: list, roles: list[str], points: list, writer, keys: dict) -> None:
    """--traffic's rows, point by point, after the run (the capture is read once it has stopped)."""
    for payload, window, steps in points:
        extra = {**keys, "payload": payload.label, "size": payload.nbytes}
        traffic.show(traffic.rows(captured, owned, roles, window, steps, extra), writer,
                     f"{payload.label}, {steps} steps")
