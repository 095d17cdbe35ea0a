"""Broadcast (nccl-tests' broadcast_perf, osu_bcast): the root's input ends up in every other rank's
output (the root's own output is not written, as MPI_Bcast's).

Emulated: binomial tree, ceil(log2 n) rounds; counted from the root, a rank that has the data sends
it 2^k ranks on in round k; or native MPI_Bcast. busbw = algbw (nccl-tests).
"""

from __future__ import annotations

import numpy as np

from commbench.benchmarks.base import Context
from commbench.benchmarks.collective import F32, Collective, Plan, RootedOptions
from commbench.core.measure.message import Message


class Broadcast(Collective):
    name = "broadcast"
    help = "broadcast emulator (binomial tree) or native MPI_Bcast; nccl-tests' broadcast_perf"
    op, algorithms = "broadcast", ("binomial",)
    Options = RootedOptions
    opts: RootedOptions  # its instance (self.opts)

    @staticmethod
    def bus_factor(n: int) -> float:
        return 1.0

    def binomial(self, rank: int, n: int) -> tuple[int | None, list[int]]:
        """Rank's parent (None at the root) and children in the binomial tree rooted at --root."""
        root = self.root
        v = (rank - root) % n  # rank counted from the root
        parent, children, mask = None, [], 1
        while mask < n:
            if v < mask and v + mask < n:
                children.append((v + mask + root) % n)
            elif mask <= v < 2 * mask:
                parent = (v - mask + root) % n
            mask <<= 1
        return parent, children

    def algorithm_peers(self, algorithm: str, rank: int, n: int) -> list[int]:
        parent, children = self.binomial(rank, n)
        return children + ([] if parent is None else [parent])

    def plan(self, ctx: Context, inp: np.ndarray, out: np.ndarray) -> Plan:
        up, down = self.binomial(ctx.world.rank, ctx.world.size)
        data = Message.over([inp if ctx.world.rank == self.root else out])
        parent = None if up is None else ctx.links[up]
        children = [ctx.links[c] for c in down]
        complete = ctx.transport.complete

        def run() -> None:
            if parent is not None:
                parent.recv_into(data)
            complete([child.post_send(data) for child in children])
        return run, []

    def expect(self, rank: int, n: int, base: np.ndarray, k: F32, into: np.ndarray) -> bool:
        np.multiply(base, F32(self.root + 1), out=into)
        into += k
        return rank != self.root
