"""Run one benchmark on this rank: world, transport, points, table on rank 0, results streamed to a file."""

from __future__ import annotations

import argparse
import hashlib
import json
import sys

from commbench.benchmarks.base import Benchmark, Context, measure_point
from commbench.core import buffers
from commbench.core.errors import PeerError, RunAborted, UsageError
from commbench.core.harness import Loops, harness_overhead_ns
from commbench.core.payload import Payload
from commbench.core.placement import Placement
from commbench.core.progress import Progress
from commbench.core.results import ResultsWriter, run_metadata
from commbench.core.table import header_line, row_line
from commbench.core.watchdog import Watchdog
from commbench.core.world import World
from commbench.transports.base import Transport

PACKAGES = ("numpy", "grpcio", "protobuf", "mpi4py", "tensorflow-cpu")


def check_same_command(world: World, args: argparse.Namespace) -> None:
    """Every rank must measure the same thing: compare a digest of the options once, at start."""
    opts = {k: v for k, v in sorted(vars(args).items()) if isinstance(v, (str, int, float, bool, type(None)))
            and k not in ("output",)}
    digest = hashlib.sha256(json.dumps(opts, sort_keys=True).encode()).hexdigest()
    digests = world.allgather_json("options", digest)
    if len(set(digests)) > 1:
        odd = [r for r, d in enumerate(digests) if d != digests[0]]
        raise UsageError(f"ranks {odd} were started with options different from rank 0's; "
                         "start every rank with the same command")


def end_run(world: World, exc: Exception) -> None:
    """A rank failed with exc: bad input stops every rank with status 2; a peer's fault is re-raised
    naming this rank; a bug stops the others with 1 (the caller re-raises it, keeping the traceback)."""
    if isinstance(exc, UsageError):
        world.abort(str(exc), 2)
    elif isinstance(exc, PeerError):
        raise PeerError(f"rank {world.rank} on host {world.host}: {exc}") from None
    elif not isinstance(exc, RunAborted):
        world.abort(f"rank {world.rank} on host {world.host} failed: {exc!r}", 1)


RUNNER_KEYS = ("bench", "run_id", "transport", "mode", "poll", "payload", "size", "buffers")


def run_rank(placement: Placement, bench_cls: type[Benchmark], transport_cls: type[Transport],
             args: argparse.Namespace, points: list[Payload], loops: Loops, payload_spec: str | None) -> int:
    buffers.configure(args.hugepages == "on")
    world = World(placement, args.timeout, getattr(args, "bind", None))
    watchdog = Watchdog(world)
    bench = bench_cls(args)
    transport: Transport | None = None
    writer: ResultsWriter | None = None
    progress: Progress | None = None
    ok = False
    try:
        check_same_command(world, args)
        transport = transport_cls(world, args)
        links = transport.connect(bench.peers(world))
        ctx = Context(world, transport, links, args, loops, args.validate, args.seed, args.inject_corruption)
        options = {k: v for k, v in vars(args).items() if isinstance(v, (str, int, float, bool, list, type(None)))}
        options.update(mode=transport.mode(), ranks=world.size, loops=loops.describe(bench.loop_source),
                       payload_spec=payload_spec)
        meta = run_metadata(bench.name, options, world.hosts, PACKAGES)
        meta["memory"] = buffers.backing()
        meta["harness_overhead_ns"] = harness_overhead_ns()
        meta["metric"] = {"key": bench.metric, "better": bench.better}
        columns = [bench.size_column(meta), *bench.columns]
        if world.rank == 0:
            print("\n".join([*bench.header(meta), header_line(columns)]), flush=True)
            if args.output:
                writer = ResultsWriter(args.output, meta, [*RUNNER_KEYS, *(c.key for c in bench.columns)])
        wrong = 0
        progress = Progress(bench.name, len(points), enabled=world.rank == 0)
        for payload in points:
            got = measure_point(ctx, bench, payload)
            if got is None:
                continue
            progress.advance()
            clash = set(got) & set(RUNNER_KEYS)
            if clash:
                raise AssertionError(f"{bench.name} rows must not set the runner's keys {sorted(clash)}")
            row = {"bench": bench.name, "run_id": meta["run_id"], "transport": transport.name,
                   "mode": transport.mode(), "poll": args.poll, "payload": payload.label, "size": payload.nbytes,
                   "buffers": len(payload.sizes), **got, "huge_kb": buffers.huge_kb()}
            print(row_line(columns, row), flush=True)
            if writer:
                writer.row(row)
            wrong += row.get("wrong", 0)
        progress.close()
        world.barrier("done")
        watchdog.stop()
        ok = True
        if wrong:
            print(f"commbench: {wrong} messages arrived wrong (see #wrong); the transport corrupted data",
                  file=sys.stderr)
            return 1
        return 0
    except Exception as exc:
        end_run(world, exc)
        raise
    finally:
        watchdog.stopped.set()  # the main thread reports its own error
        if progress:
            progress.close()
        if writer:
            writer.close()
        if transport:
            transport.close()
        if ok:
            world.close()
