"""All-reduce (nccl-tests' all_reduce_perf, osu_allreduce): float32 sum over all ranks, out of place.

time = the slowest rank's mean per iteration; algbw = bytes / time (GB = 10^9 B);
busbw = algbw x 2 (n - 1) / n; #wrong counts elements that differ from the exact sum.
Sizes sweep ``-b`` to ``-e`` by factor ``-f``, or ``--payload MODEL`` reduces each gradient tensor
(or ``--bucket-mb`` fused buckets, as Horovod and PyTorch DDP do) every iteration.
"""

from __future__ import annotations

import argparse

import numpy as np

from commbench.benchmarks.base import Benchmark, Context
from commbench.core.errors import UsageError
from commbench.core.harness import LoopDefaults, measure, timed_loop
from commbench.core.payload import Payload
from commbench.core.sizes import parse_size
from commbench.core.table import Column
from commbench.core.world import World
from commbench.emulators.allreduce import ALGORITHMS, AllReduce, bus_factor

COLLECTIVE_LOOPS = LoopDefaults((1000, 100), (100, 10))  # OSU's collectives
GBS = "{:.3f}"


class AllReduceBench(Benchmark):
    name = "allreduce"
    help = "all-reduce emulator (ring, recursive doubling, tree, reduce+broadcast) or native MPI_Allreduce"
    units = "time in us per all-reduce (slowest rank); algbw and busbw in GB/s = 10^9 B/s, as nccl-tests"
    columns = [Column("count", "Count", 11, "{:d}"), Column("dtype", "Type", 7), Column("redop", "Op", 4),
               Column("algorithm", "Algorithm", 19), Column("time_us", "Time(us)", 11, "{:.2f}"),
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

    def run_point(self, ctx: Context, payload: Payload) -> dict | None:
        world, n = ctx.world, ctx.world.size
        reducers = [AllReduce(self.args.algorithm, world.rank, n, ctx.links, ctx.transport, c)
                    for c in self.buffers(payload)]
        for red in reducers:
            idx = np.arange(len(red.inp)) % 7 + 1
            red.inp[:] = (world.rank + 1) * idx
            red.expected = (n * (n + 1) // 2 * idx).astype(np.float32)
        wrong = [0]

        def step() -> None:
            for red in reducers:
                red.run()

        def checked() -> None:
            for red in reducers:
                red.out.fill(0)
                red.run()
                wrong[0] += int(np.count_nonzero(red.out != red.expected))

        samples = measure(world, ctx.loops, COLLECTIVE_LOOPS, payload.nbytes,
                          lambda k: timed_loop(checked if ctx.validate else step, k))
        means = world.gather_json("ar", [float(samples.mean()), wrong[0], len(samples)])
        if world.rank != 0:
            return None
        t_us = max(m[0] for m in means) / 1e3
        nbytes = sum(4 * len(r.out) for r in reducers)
        algbw = nbytes / (t_us * 1e-6) / 1e9
        return {"iterations": means[0][2], "count": nbytes // 4, "dtype": "float32", "redop": "sum",
                "algorithm": self.args.algorithm, "time_us": t_us, "algbw": algbw, "busbw": algbw * bus_factor(n),
                "wrong": sum(m[1] for m in means)}
