"""All-to-all (nccl-tests' alltoall_perf, osu_alltoall): block j of rank r's input (count / n float32
elements) becomes block r of rank j's output.

Emulated: pairwise exchange, n - 1 steps, in step k rank r sends to r + k and receives from r - k;
or native MPI_Alltoall. busbw = algbw x (n - 1) / n (nccl-tests).
"""

from __future__ import annotations

import numpy as np

from commbench.benchmarks.base import Context
from commbench.benchmarks.collective import F32, Collective, Plan
from commbench.core.measure.message import Message


class AllToAll(Collective):
    name = "alltoall"
    help = "all-to-all emulator (pairwise exchange) or native MPI_Alltoall; nccl-tests' alltoall_perf"
    op, algorithms, blocks = "alltoall", ("pairwise",), True

    @staticmethod
    def bus_factor(n: int) -> float:
        return (n - 1) / n

    def plan(self, ctx: Context, inp: np.ndarray, out: np.ndarray) -> Plan:
        n, r, c = ctx.world.size, ctx.world.rank, len(inp) // ctx.world.size
        ins = [Message.over([inp[q * c:(q + 1) * c]]) for q in range(n)]
        outs = [Message.over([out[q * c:(q + 1) * c]]) for q in range(n)]
        links, complete = ctx.links, ctx.transport.complete
        steps = [(links[(r + k) % n], ins[(r + k) % n], links[(r - k) % n], outs[(r - k) % n]) for k in range(1, n)]
        own_in, own_out = inp[r * c:(r + 1) * c], out[r * c:(r + 1) * c]

        def run() -> None:
            np.copyto(own_out, own_in)
            for to, block, source, into in steps:
                complete([source.post_recv(into), to.post_send(block)])
        return run, []

    def expect(self, rank: int, n: int, base: np.ndarray, k: F32, into: np.ndarray) -> bool:
        c = len(base) // n
        for q in range(n):  # block q: rank q's input block `rank`
            block = into[q * c:(q + 1) * c]
            np.multiply(base[rank * c:(rank + 1) * c], F32(q + 1), out=block)
            block += k
        return True
