"""All-reduce (nccl-tests' all_reduce_perf, osu_allreduce): float32 sum over all ranks, out of place.

The emulated algorithms are in emulators/allreduce.py; the sweep, validation and the row are the
collectives' (collective.py): busbw = algbw x 2 (n - 1) / n. ``--payload MODEL`` reduces each
gradient tensor every iteration, or ``--bucket-mb`` fused buckets of them (Horovod, PyTorch DDP).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from commbench.benchmarks.base import Context
from commbench.benchmarks.collective import F32, Collective, CollectiveOptions, Plan
from commbench.core.config.argtypes import number
from commbench.core.config.options import opt
from commbench.core.measure.payload import Payload
from commbench.emulators.allreduce import ALGORITHMS, AllReduce


@dataclass(frozen=True)
class AllReduceOptions(CollectiveOptions):
    bucket_mb: float | None = opt(None, type=number(above=0, hi=1 << 20, what=" (MB)"),
                                  help="with --payload MODEL: fuse tensors into buckets of at most this many MB "
                                       "(default: each tensor alone)")


class AllReduceBench(Collective):
    name = "allreduce"
    help = "all-reduce emulator (ring, recursive doubling, tree, reduce+broadcast) or native MPI_Allreduce"
    op, redop, algorithms = "allreduce", "sum", ALGORITHMS

    Options = AllReduceOptions
    opts: AllReduceOptions  # its instance (self.opts)

    @staticmethod
    def bus_factor(n: int) -> float:
        return 2 * (n - 1) / n

    def counts(self, payload: Payload) -> list[int]:
        """The payload's tensors, or fused buckets of them."""
        counts = super().counts(payload)
        if not self.opts.bucket_mb:
            return counts
        limit, out, cur = self.opts.bucket_mb * 1e6 / 4, [], 0
        for c in counts:
            if cur and cur + c > limit:
                out.append(cur)
                cur = 0
            cur += c
        return [*out, cur] if cur else out

    def algorithm_peers(self, algorithm: str, rank: int, n: int) -> list[int]:
        return AllReduce.peers(algorithm, rank, n)

    def plan(self, ctx: Context, inp: np.ndarray, out: np.ndarray) -> Plan:
        red = AllReduce(self.opts.algorithm, ctx.world.rank, ctx.world.size, ctx.links, ctx.transport, inp, out)
        return red.run, red.scratch

    def expect(self, rank: int, n: int, base: np.ndarray, k: F32, into: np.ndarray) -> bool:
        np.multiply(base, F32(n * (n + 1) // 2), out=into)  # sum over r of base x (r + 1) + k: exact
        into += F32(n) * k
        return True
