"""Broadcast (nccl-tests' broadcast_perf, osu_bcast): the root's input ends up in every other rank's
output (the root's own output is not written, as MPI_Bcast's).

Emulated: binomial tree, ceil(log2 n) rounds; counted from the root, a rank that has the data sends
it 2^k ranks on in round k; or native MPI_Bcast. busbw = algbw (nccl-tests).
"""

from __future__ import annotations

import numpy as np

from commbench.benchmarks.base import Context
from commbench.benchmarks.collective import F32, Collective, Plan
from commbench.core.message import Message


class Broadcast(Collective):
    name = "broadcast"
    help = "broadcast emulator (binomial tree) or native MPI_Bcast; nccl-tests' broadcast_perf"
    op, algorithms, rooted = "broadcast", ("binomial",), True

    @staticmethod
    def bus_factor(n: int) -> float:
        return 1.0

    def plan(self, ctx: Context, inp: np.ndarray, out: np.ndarray) -> Plan:
        n, root = ctx.world.size, self.root
        v = (ctx.world.rank - root) % n  # rank counted from the root
        data = Message.over([inp if v == 0 else out])
        parent, children, mask = None, [], 1
        while mask < n:
            if v < mask and v + mask < n:
                children.append(ctx.links[(v + mask + root) % n])
            elif mask <= v < 2 * mask:
                parent = ctx.links[(v - mask + root) % n]
            mask <<= 1
        wait_all = ctx.transport.wait_all

        def run() -> None:
            if parent is not None:
                parent.recv_into(data)
            wait_all([child.isend(data) for child in children])
        return run, []

    def expect(self, rank: int, n: int, base: np.ndarray, k: F32, into: np.ndarray) -> bool:
        np.multiply(base, F32(self.root + 1), out=into)
        into += k
        return rank != self.root
