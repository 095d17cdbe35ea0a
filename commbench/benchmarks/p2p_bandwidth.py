"""Point-to-point bandwidth (osu_bw) and bidirectional bandwidth (osu_bibw), with N pairs (osu_mbw_mr).

osu_bw: the sender posts a window of W non-blocking sends and waits for them, then for a small ack;
the receiver posts W receives, waits, and acks. MB/s = bytes x W x iterations / wall-clock time of
the timed loop / 10^6. bibw: both sides post a window of sends and receives at once, counted twice.
With --pairs N, rank i < N drives rank i + N; every pair starts at the same barrier and the rate is
all pairs' bytes over the slowest pair's time (osu_mbw_mr).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from commbench.benchmarks.base import WRONG, Benchmark, Context
from commbench.core.config.argtypes import integer
from commbench.core.config.options import Options, opt
from commbench.core.config.run import CommonOptions, RunConfig
from commbench.core.errors import UsageError
from commbench.core.measure.harness import BANDWIDTH_LOOPS, Side, Timing, untimed_loop
from commbench.core.measure.message import Message
from commbench.core.measure.payload import Payload
from commbench.core.output.table import Column
from commbench.core.run.world import World

ACK_BYTES = 4  # as osu_bw
MBS = "{:.2f}"


@dataclass(frozen=True)
class BandwidthOptions(Options):
    window: int = opt(64, "-W", "--window", type=integer(1, 1 << 20), help="messages per window (default 64, as OSU)")
    pairs: int = opt(1, type=integer(1, 2048), help="pairs of ranks, rank i with i + N (default 1)")


class P2PBandwidth(Benchmark[BandwidthOptions]):
    name = "p2p-bandwidth"
    help = "a window of messages, then an ack; MB/s = bytes x window x iterations / time (as osu_bw)"
    imported_units = ("MB/s = 10^6 B/s (converted from the tool's own unit), as the tool measured them (its own window "
                      "and timing); \"-\": the tool does not give it")
    units = ("MB/s = 10^6 B/s, all pairs' bytes over the slowest pair's wall-clock time (as osu_mbw_mr); "
             "Msg/s = messages per second; min/max over the windows of pair 0")
    loops = BANDWIDTH_LOOPS
    metric, better = "mb_s", "higher"
    directions = 1
    columns = [Column("iterations", "Iters", 7, "{:d}", "count", "timed windows"),
               Column("window", "Window", 7, "{:d}", "count", "messages per window (-W)"),
               Column("pairs", "Pairs", 6, "{:d}", "count", "pairs of ranks streaming at once"),
               Column("mb_s", "MB/s", 12, MBS, "MB/s", "all pairs' bytes over the slowest pair's time (10^6 B/s; "
                      "bibw: both directions)"),
               Column("msg_s", "Msg/s", 12, "{:.0f}", "1/s", "messages per second, all pairs"),
               Column("min_mb_s", "Min MB/s", 12, MBS, "MB/s", "slowest window of pair 0"),
               Column("max_mb_s", "Max MB/s", 12, MBS, "MB/s", "fastest window of pair 0"), WRONG]

    Options = BandwidthOptions
    opts: BandwidthOptions  # its instance (self.opts)

    @classmethod
    def ranks(cls, opts: BandwidthOptions, common: CommonOptions) -> int:
        """2 x --pairs, or --np (even): N pairs as osu_mbw_mr runs on 2N ranks."""
        if common.np is not None and opts.pairs == 1:
            if common.np < 2 or common.np % 2:
                raise UsageError(f"{cls.name} runs on pairs of ranks: --np must be even, not {common.np}")
            return common.np
        return 2 * opts.pairs

    @classmethod
    def needs(cls, opts: BandwidthOptions, common: CommonOptions) -> frozenset[str]:
        return frozenset({"stream"} if cls.directions == 1 else {"exchange"})

    def __init__(self, config: RunConfig) -> None:
        super().__init__(config)
        self.pairs = config.ranks // 2
        self.window = self.opts.window

    def peers(self, world: World) -> list[int]:
        return [world.rank + self.pairs if world.rank < self.pairs else world.rank - self.pairs]

    def prepare(self, ctx: Context, payload: Payload, checked: bool) -> Side:
        me, peer = ctx.world.rank, self.peers(ctx.world)[0]
        link, complete, window = ctx.links[peer], ctx.transport.completer(), range(self.window)
        sender = me < self.pairs
        slots = self.window if checked else 1  # checked: each message in flight has its own content and buffer
        outs = [Message(payload.sizes) for _ in range(slots)]  # s_buf
        inbox = [Message(payload.sizes) for _ in range(slots)]  # r_buf
        theirs = ctx.checker(payload, peer) if checked else None
        if theirs:
            mine = ctx.checker(payload, me)

            def sends() -> list:
                return [link.post_send(mine.prepare(m)) for m in outs]

            def recvs() -> list:
                return [link.post_recv(m) for m in inbox]

            def check_all() -> None:
                for m in inbox:
                    theirs.check(m)
        else:
            post_send, post_recv = link.send_poster(outs[0]), link.recv_poster(inbox[0])  # OSU: one buffer each

            def sends() -> list:
                return [post_send() for _ in window]

            def recvs() -> list:
                return [post_recv() for _ in window]

            def check_all() -> None:
                pass
        wrong = (lambda: theirs.wrong) if theirs else (lambda: 0)
        if self.directions == 2:
            def both() -> None:
                complete(recvs() + sends())
                check_all()
            return Side(step=both, wrong=wrong) if sender else \
                Side(run=lambda n: untimed_loop(both, n), wrong=wrong)
        ack = Message((ACK_BYTES,))
        if sender:
            def send_window() -> None:
                complete(sends())
                link.recv_into(ack)
            return Side(step=send_window, wrong=wrong)

        def receive() -> None:
            complete(recvs())
            check_all()
            link.send(ack)
        return Side(run=lambda n: untimed_loop(receive, n), wrong=wrong)

    def row(self, payload: Payload, timing: Timing, reports: list[dict]) -> dict:
        w, moved = self.window, payload.nbytes * self.window * self.directions
        senders = reports[:self.pairs]
        slowest = max(r["wall_ns"] for r in senders) / 1e9
        n = timing.n
        assert timing.samples is not None  # a timed point keeps its samples
        window_rates = moved / (timing.samples.astype(np.float64) / 1e9) / 1e6
        return {"iterations": n, "window": w, "pairs": self.pairs,
                "mb_s": moved * n * self.pairs / slowest / 1e6,
                "msg_s": w * self.directions * n * self.pairs / slowest,
                "min_mb_s": float(window_rates.min()), "max_mb_s": float(window_rates.max())}


class P2PBibw(P2PBandwidth):
    name = "p2p-bibw"
    help = "both ranks send a window at once; MB/s counts both directions (as osu_bibw)"
    directions = 2
