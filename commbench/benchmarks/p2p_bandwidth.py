"""Point-to-point bandwidth (osu_bw) and bidirectional bandwidth (osu_bibw), with N pairs (osu_mbw_mr).

osu_bw: the sender sends a window of W messages, then waits for a small ack; MB/s = bytes x W x
iterations / time / 10^6. bibw: both sides send and receive a window at once, counted twice.
With --pairs N, rank i < N drives rank i + N and the pairs' rates add up.
"""

from __future__ import annotations

import argparse

import numpy as np

from commbench.benchmarks.base import WRONG, Benchmark, Checker, Context
from commbench.core.errors import UsageError
from commbench.core.harness import BANDWIDTH_LOOPS, measure, timed_loop, untimed_loop
from commbench.core.message import Message
from commbench.core.payload import Payload
from commbench.core.table import Column
from commbench.core.world import World

ACK_BYTES = 4  # as osu_bw
MBS = "{:.2f}"


class P2PBandwidth(Benchmark):
    name = "p2p-bandwidth"
    help = "a window of messages, then an ack; MB/s = bytes x window x iterations / time (as osu_bw)"
    units = "MB/s = 10^6 B/s (aggregate over pairs); Msg/s = messages per second; min/max over windows of pair 0"
    directions = 1
    columns = [Column("iterations", "Iters", 7, "{:d}"), Column("window", "Window", 7, "{:d}"),
               Column("pairs", "Pairs", 6, "{:d}"), Column("mb_s", "MB/s", 12, MBS),
               Column("msg_s", "Msg/s", 12, "{:.0f}"), Column("min_mb_s", "Min MB/s", 12, MBS),
               Column("max_mb_s", "Max MB/s", 12, MBS), WRONG]

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("-W", "--window", type=int, default=64, help="messages per window (default 64, as OSU)")
        parser.add_argument("--pairs", type=int, default=1, help="pairs of ranks, rank i with i + N (default 1)")

    @classmethod
    def ranks(cls, args: argparse.Namespace) -> int:
        if args.window < 1:
            raise UsageError(f"-W/--window must be at least 1, not {args.window}")
        if args.pairs < 1:
            raise UsageError(f"--pairs must be at least 1, not {args.pairs}")
        return 2 * args.pairs

    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__(args)
        self.pairs = args.pairs
        self.window = args.window

    def peers(self, world: World) -> list[int]:
        return [world.rank + self.pairs if world.rank < self.pairs else world.rank - self.pairs]

    def run_point(self, ctx: Context, payload: Payload) -> dict | None:
        world, w = ctx.world, self.window
        sender = world.rank < self.pairs
        link = ctx.links[self.peers(world)[0]]
        msg = Message(payload.sizes)
        ack = Message((ACK_BYTES,))
        pattern = ctx.pattern(payload)
        check = Checker(pattern, ctx.corrupt_every) if pattern else None
        step = self.bidirectional_step(ctx, link, msg, check) if self.directions == 2 else \
            self.sender_step(link, msg, ack, check) if sender else self.receiver_step(link, msg, ack, check)

        def run(n: int):
            return timed_loop(step, n) if sender else untimed_loop(step, n)

        samples = measure(world, ctx.loops, BANDWIDTH_LOOPS, payload.nbytes, run)
        per_pair = world.gather_json("bw", [int(samples.sum()), len(samples)] if sender else None)
        wrong = world.gather_json("wrong", check.wrong if check else 0)
        if world.rank != 0:
            return None
        moved = payload.nbytes * w * self.directions
        rates = [moved * n / (t / 1e9) / 1e6 for t, n in filter(None, per_pair)]
        window_rates = moved / (samples.astype(np.float64) / 1e9) / 1e6
        msg_rates = [w * self.directions * n / (t / 1e9) for t, n in filter(None, per_pair)]
        return {"iterations": len(samples), "window": w, "pairs": self.pairs, "mb_s": sum(rates),
                "msg_s": sum(msg_rates),
                "min_mb_s": float(window_rates.min()), "max_mb_s": float(window_rates.max()),
                "wrong": sum(wrong)}

    def sender_step(self, link, msg: Message, ack: Message, check: Checker | None):
        w = self.window
        if check:
            msg.fill(check.pattern)

            def step() -> None:
                for _ in range(w):
                    check.send(link.send, msg)
                link.recv_into(ack)
            return step

        def step() -> None:
            for _ in range(w):
                link.send(msg)
            link.recv_into(ack)
        return step

    def receiver_step(self, link, msg: Message, ack: Message, check: Checker | None):
        w = self.window

        def step() -> None:
            for _ in range(w):
                link.recv_into(msg)
                if check:
                    check.check(msg)
            link.send(ack)
        return step

    def bidirectional_step(self, ctx: Context, link, msg: Message, check: Checker | None):
        w, progress = self.window, ctx.transport.progress
        sends = [(link, msg)] * w
        if check is None:
            recvs = [(link, Message(msg.sizes))] * w

            def step() -> None:
                progress(sends, recvs)
            return step
        msg.fill(check.pattern)
        inbox = [Message(msg.sizes) for _ in range(w)]
        recvs = [(link, m) for m in inbox]

        def step() -> None:
            check.send(lambda m: progress([(link, m)] + sends[1:], recvs), msg)
            for m in inbox:
                check.check(m)
        return step


class P2PBibw(P2PBandwidth):
    name = "p2p-bibw"
    help = "both ranks send a window at once; MB/s counts both directions (as osu_bibw)"
    directions = 2
