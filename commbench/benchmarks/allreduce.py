"""All-reduce (nccl-tests' all_reduce_perf, osu_allreduce): float32 sum over all ranks, out of place.

time = each rank's mean per iteration, averaged over ranks, with the fastest and slowest rank's
(nccl-tests' default avg, osu_allreduce -f); algbw = bytes / avg time (GB = 10^9 B);
busbw = algbw x 2 (n - 1) / n; #wrong counts elements that differ from the exact sum (inputs change
every iteration; output and scratch are set to NaN before each checked round).
Sizes sweep ``-b`` to ``-e`` by factor ``-f``, or ``--payload MODEL`` reduces each gradient tensor
(or ``--bucket-mb`` fused buckets, as Horovod and PyTorch DDP do) every iteration.
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from commbench.benchmarks.base import Benchmark, Context
from commbench.core.errors import UsageError
from commbench.core.harness import COLLECTIVE_LOOPS, Side, Timing, spread
from commbench.core.payload import Payload
from commbench.core.sizes import parse_size
from commbench.core.table import Column
from commbench.core.world import World
from commbench.emulators.allreduce import ALGORITHMS, AllReduce, bus_factor

GBS = "{:.3f}"
US = "{:.2f}"


class AllReduceBench(Benchmark):
    name = "allreduce"
    help = "all-reduce emulator (ring, recursive doubling, tree, reduce+broadcast) or native MPI_Allreduce"
    units = ("time in us per all-reduce: each rank's mean, averaged over ranks (min/max: fastest and slowest "
             "rank); algbw and busbw in GB/s = 10^9 B/s from the average, as nccl-tests")
    loops = COLLECTIVE_LOOPS
    metric, better = "busbw", "higher"
    columns = [Column("count", "Count", 11, "{:d}"), Column("dtype", "Type", 7), Column("redop", "Op", 4),
               Column("algorithm", "Algorithm", 19), Column("time_us", "Time(us)", 11, US),
               Column("time_min_us", "Min", 10, US), Column("time_max_us", "Max", 10, US),
               Column("algbw", "Algbw", 9, GBS), Column("busbw", "Busbw", 9, GBS), Column("wrong", "#wrong", 7, "{:d}")]

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--algorithm", "-a", choices=ALGORITHMS, default="ring", help="default ring")
        parser.add_argument("--ranks", type=int, help="ranks the local launcher starts (default 4; as --np)")
        parser.add_argument("-b", "--minbytes", default="4K", help="smallest size (default 4K)")
        parser.add_argument("-e", "--maxbytes", default="4M", help="largest size (default 4M)")
        parser.add_argument("-f", "--stepfactor", type=int, default=2, help="size factor between points (default 2)")
        parser.add_argument("--bucket-mb", type=float, help="with --payload MODEL: fuse tensors into buckets of "
                                                            "at most this many MB (default: each tensor alone)")

    @classmethod
    def ranks(cls, args: argparse.Namespace) -> int:
        n = args.ranks or args.np or 4
        if n < 2:
            raise UsageError(f"allreduce needs at least 2 ranks, not {n}")
        args.np = n
        return n

    @classmethod
    def plan_points(cls, args: argparse.Namespace) -> tuple[list[Payload], str | None] | None:
        if args.bucket_mb is not None and not (math.isfinite(args.bucket_mb) and args.bucket_mb > 0):
            raise UsageError(f"--bucket-mb must be a positive finite number of MB, not {args.bucket_mb:g}")
        if args.payload:
            return None  # the common --payload handling (models, schemes)
        lo, hi = parse_size(args.minbytes, "-b"), parse_size(args.maxbytes, "-e")
        if lo < 4 or lo > hi or args.stepfactor < 2:
            raise UsageError(f"need 4 <= -b ({lo}) <= -e ({hi}) and -f >= 2 ({args.stepfactor})")
        points, s = [], lo
        while s <= hi:
            points.append(Payload(str(s // 4 * 4), (s // 4 * 4,)))
            s *= args.stepfactor
        return points, None

    def peers(self, world: World) -> list[int]:
        return [r for r in range(world.size) if r != world.rank]

    def buffers(self, payload: Payload) -> list[int]:
        """Element counts reduced per iteration: the payload's buffers, or fused buckets of them."""
        counts = [s // 4 for s in payload.sizes]
        if not self.args.bucket_mb:
            return counts
        limit, out, cur = self.args.bucket_mb * 1e6 / 4, [], 0
        for c in counts:
            if cur and cur + c > limit:
                out.append(cur)
                cur = 0
            cur += c
        return [*out, cur] if cur else out

    def prepare(self, ctx: Context, payload: Payload, checked: bool) -> Side:
        world, n = ctx.world, ctx.world.size
        reducers = [AllReduce(self.args.algorithm, world.rank, n, ctx.links, ctx.transport, c)
                    for c in self.buffers(payload)]
        base = [(np.arange(len(red.inp)) % 7 + 1).astype(np.float32) for red in reducers]
        for red, b in zip(reducers, base, strict=True):
            red.inp[:] = (world.rank + 1) * b
        if not checked:
            def step() -> None:
                for red in reducers:
                    red.run()
            return Side(step=step)
        wrong, it = [0], [0]
        sums = [b * np.float32(n * (n + 1) // 2) for b in base]  # what every rank's b adds up to

        def checked_step() -> None:  # inputs rank r: (r + 1) b + i; the sum: n (n + 1) / 2 b + n i, exact
            i = it[0] = it[0] + 1
            for red, b, total in zip(reducers, base, sums, strict=True):
                np.multiply(b, np.float32(world.rank + 1), out=red.inp)
                red.inp += np.float32(i % 64)
                red.clear()
                red.run()
                wrong[0] += int(np.count_nonzero(red.out != total + np.float32(n * (i % 64))))
        return Side(step=checked_step, wrong=lambda: wrong[0])

    def row(self, payload: Payload, timing: Timing, reports: list[dict]) -> dict:
        avg, lo, hi = spread([r["mean_ns"] / 1e3 for r in reports])
        n = len(reports)
        nbytes = sum(4 * c for c in self.buffers(payload))
        algbw = nbytes / (avg * 1e-6) / 1e9
        return {"iterations": timing.n, "count": nbytes // 4, "dtype": "float32", "redop": "sum",
                "algorithm": self.args.algorithm, "time_us": avg, "time_min_us": lo, "time_max_us": hi,
                "algbw": algbw, "busbw": algbw * bus_factor(n)}
