"""All-reduce algorithms over any transport: float32 sum, out of place (input -> output), as
nccl-tests measures. Every algorithm is a plan built once per buffer (messages over chunks of the
output, scratch space) and a ``run`` that moves data with links' send / recv_into, or post_send / post_recv
completed together by the transport's ``complete``; the reductions are numpy additions.

- ring: reduce-scatter then all-gather around the ring, n - 1 steps each (bandwidth-optimal);
- recursive-doubling: log2(p) exchanges of the whole buffer with rank ^ 2^k; ranks beyond the
  largest power of two p fold their data into a partner first and get the result back last;
- tree: reduce up a binary tree (children 2r + 1, 2r + 2) to rank 0, then broadcast down;
- reduce-bcast: every rank sends to rank 0, which adds and sends the sum back to all.
(The transport's own all-reduce, MPI_Allreduce, is ``Transport.native``.)
"""

from __future__ import annotations

import numpy as np

from commbench.core.errors import UsageError
from commbench.core.measure import buffers
from commbench.core.measure.message import Message
from commbench.transports.base import Link, Transport

ALGORITHMS = ("ring", "recursive-doubling", "tree", "reduce-bcast")


class AllReduce:
    """One buffer's all-reduce on this rank: ``run()`` reduces ``inp`` into ``out`` (same length)."""

    def __init__(self, algorithm: str, rank: int, size: int, links: dict[int, Link], transport: Transport,
                 inp: np.ndarray, out: np.ndarray) -> None:
        if algorithm not in ALGORITHMS:
            raise UsageError(f"unknown algorithm {algorithm!r}; choose one of {', '.join(ALGORITHMS)}")
        self.rank, self.size, self.links, self.t = rank, size, links, transport
        self.inp, self.out = inp, out
        self.scratch: list[np.ndarray] = []
        self.run = getattr(self, "_plan_" + algorithm.replace("-", "_"))()

    @staticmethod
    def peers(algorithm: str, r: int, n: int) -> list[int]:
        """The ranks ``algorithm`` exchanges with on rank r of n (what _plan_* below use of the links)."""
        if algorithm == "ring":
            return [(r + 1) % n, (r - 1) % n]
        if algorithm == "recursive-doubling":
            p = 1 << (n.bit_length() - 1)
            if r >= p:
                return [r - p]
            return [r ^ (1 << k) for k in range(p.bit_length() - 1)] + ([r + p] if r + p < n else [])
        if algorithm == "tree":
            return [c for c in (2 * r + 1, 2 * r + 2) if c < n] + ([(r - 1) // 2] if r else [])
        return [0] if r else list(range(1, n))  # reduce-bcast

    # -- ring ------------------------------------------------------------------------------------
    def _plan_ring(self):
        n, r = self.size, self.rank
        if n == 1:
            return self._copy_only
        bounds = np.linspace(0, len(self.out), n + 1).astype(int)
        chunks = [self.out[bounds[i]:bounds[i + 1]] for i in range(n)]
        scratch = [buffers.array(len(c), np.float32) for c in chunks]
        self.scratch += scratch
        send = [Message.over([c]) for c in chunks]
        recv_scratch = [Message.over([s]) for s in scratch]
        right, left = self.links[(r + 1) % n], self.links[(r - 1) % n]
        complete, out, inp = self.t.complete, self.out, self.inp

        def run() -> None:
            np.copyto(out, inp)
            for k in range(n - 1):  # reduce-scatter: after it, chunk (r + 1) % n is complete here
                s, d = (r - k) % n, (r - k - 1) % n
                complete([left.post_recv(recv_scratch[d]), right.post_send(send[s])])
                np.add(chunks[d], scratch[d], out=chunks[d])
            for k in range(n - 1):  # all-gather
                s, d = (r + 1 - k) % n, (r - k) % n
                complete([left.post_recv(send[d]), right.post_send(send[s])])
        return run

    # -- recursive doubling ------------------------------------------------------------------------
    def _plan_recursive_doubling(self):
        n, r = self.size, self.rank
        p = 1 << (n.bit_length() - 1)  # largest power of two <= n
        whole, scratch = Message.over([self.out]), buffers.array(len(self.out), np.float32)
        self.scratch.append(scratch)
        recv = Message.over([scratch])
        complete, out, inp, links = self.t.complete, self.out, self.inp, self.links
        partners = [] if r >= p else [r ^ (1 << k) for k in range(p.bit_length() - 1)]

        def run() -> None:
            np.copyto(out, inp)
            if r >= p:  # fold into a partner below p, get the result back at the end
                links[r - p].send(whole)
                links[r - p].recv_into(whole)
                return
            if r + p < n:
                links[r + p].recv_into(recv)
                np.add(out, scratch, out=out)
            for q in partners:
                complete([links[q].post_recv(recv), links[q].post_send(whole)])
                np.add(out, scratch, out=out)
            if r + p < n:
                links[r + p].send(whole)
        return run

    # -- binary tree -----------------------------------------------------------------------------
    def _plan_tree(self):
        n, r = self.size, self.rank
        children = [c for c in (2 * r + 1, 2 * r + 2) if c < n]
        parent = (r - 1) // 2 if r else None
        whole, scratch = Message.over([self.out]), buffers.array(len(self.out), np.float32)
        self.scratch.append(scratch)
        recv = Message.over([scratch])
        out, inp, links = self.out, self.inp, self.links

        def run() -> None:
            np.copyto(out, inp)
            for c in children:
                links[c].recv_into(recv)
                np.add(out, scratch, out=out)
            if parent is not None:
                links[parent].send(whole)
                links[parent].recv_into(whole)
            for c in children:
                links[c].send(whole)
        return run

    # -- reduce to root, broadcast ---------------------------------------------------------------
    def _plan_reduce_bcast(self):
        n, r = self.size, self.rank
        whole, scratch = Message.over([self.out]), buffers.array(len(self.out), np.float32)
        self.scratch.append(scratch)
        recv = Message.over([scratch])
        out, inp, links = self.out, self.inp, self.links

        def run() -> None:
            np.copyto(out, inp)
            if r:
                links[0].send(whole)
                links[0].recv_into(whole)
                return
            for q in range(1, n):
                links[q].recv_into(recv)
                np.add(out, scratch, out=out)
            for q in range(1, n):
                links[q].send(whole)
        return run

    def _copy_only(self) -> None:
        np.copyto(self.out, self.inp)
