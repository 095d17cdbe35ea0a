"""All-gather (nccl-tests' all_gather_perf, osu_allgather): every rank's block of count / n float32
elements ends up, in rank order, in every rank's output.

Emulated: ring, n - 1 steps, in each a rank passes on to its right the block it got last from its
left (bandwidth-optimal); or native MPI_Allgather. busbw = algbw x (n - 1) / n (nccl-tests).
"""

from __future__ import annotations

import numpy as np

from commbench.benchmarks.base import Context
from commbench.benchmarks.collective import F32, Collective, Plan
from commbench.core.measure.message import Message


class AllGather(Collective):
    name = "allgather"
    help = "all-gather emulator (ring) or native MPI_Allgather; nccl-tests' all_gather_perf"
    op, algorithms, blocks = "allgather", ("ring",), True

    @staticmethod
    def bus_factor(n: int) -> float:
        return (n - 1) / n

    def in_count(self, count: int, n: int) -> int:
        return count // n

    def algorithm_peers(self, algorithm: str, rank: int, n: int) -> list[int]:
        return [(rank + 1) % n, (rank - 1) % n]

    def plan(self, ctx: Context, inp: np.ndarray, out: np.ndarray) -> Plan:
        n, r, c = ctx.world.size, ctx.world.rank, len(inp)
        blocks = [Message.over([out[q * c:(q + 1) * c]]) for q in range(n)]
        right, left, complete = ctx.links[(r + 1) % n], ctx.links[(r - 1) % n], ctx.transport.complete
        mine = out[r * c:(r + 1) * c]

        def run() -> None:
            np.copyto(mine, inp)
            for k in range(n - 1):  # send block r - k, receive block r - k - 1
                complete([left.post_recv(blocks[(r - k - 1) % n]), right.post_send(blocks[(r - k) % n])])
        return run, []

    def expect(self, rank: int, n: int, base: np.ndarray, k: F32, into: np.ndarray) -> bool:
        c = len(base)
        for q in range(n):
            block = into[q * c:(q + 1) * c]
            np.multiply(base, F32(q + 1), out=block)
            block += k
        return True
