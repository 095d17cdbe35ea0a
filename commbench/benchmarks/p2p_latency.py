"""Point-to-point latency: ping-pong, one-way = round trip / 2 (osu_latency's loop).

Rank 0 calls, rank 1 answers with a message of the same layout from its own send buffer (as
osu_latency). Each round trip is timed, so percentiles and a confidence interval come with the mean.
"""

from __future__ import annotations

from commbench.benchmarks.base import WRONG, Benchmark, Context
from commbench.core.measure.harness import LATENCY_LOOPS, Side, Summary, Timing
from commbench.core.measure.message import Message
from commbench.core.measure.payload import Payload
from commbench.core.output.table import Column, key
from commbench.core.run.world import World

US = "{:.2f}"


class P2PLatency(Benchmark):
    name = "p2p-latency"
    help = "ping-pong between two ranks; one-way latency = round trip / 2 (as osu_latency)"
    imported_units = ("microseconds (us), one-way = round trip / 2, as the tool computed them (its own loop and "
                      "statistics: OSU's mean, perftest's t_typical as p50, sockperf's percentiles); '-': the tool "
                      "does not give it")
    units = ("microseconds (us) one-way = round trip / 2; each round trip timed around the call; p99 from 100 "
             "samples, p99.9 from 1000; CI95 = half-width of the median's 95 % confidence interval")
    loops = LATENCY_LOOPS
    metric, better = "p50_us", "lower"
    columns = [Column("iterations", "Iters", 8, "{:d}", "count", "timed round trips"),
               Column("avg_us", "Avg(us)", 10, US, "us", "mean one-way latency (round trip / 2)"),
               Column("min_us", "Min", 9, US, "us", "fastest round trip / 2"),
               Column("p50_us", "p50", 9, US, "us", "median round trip / 2"),
               Column("p50_ci_pct", "CI95", 7, "±{:.1f}%", "%", "half-width of the median's 95 % confidence "
                      "interval, in percent of the median (empty under 20 samples)"),
               Column("p99_us", "p99", 9, US, "us", "99th percentile (empty under 100 samples)"),
               Column("p999_us", "p99.9", 9, US, "us", "99.9th percentile (empty under 1000 samples)"),
               Column("max_us", "Max", 10, US, "us", "slowest round trip / 2"),
               Column("stdev_us", "Stdev", 9, US, "us", "standard deviation of the one-way times"), WRONG]
    keys = [key("p50_ci_lo_us", "us", "lower end of the median's 95 % confidence interval"),
            key("p50_ci_hi_us", "us", "upper end of the median's 95 % confidence interval")]

    def peers(self, world: World) -> list[int]:
        return [1 - world.rank]

    def prepare(self, ctx: Context, payload: Payload, checked: bool) -> Side:
        me, peer = ctx.world.rank, 1 - ctx.world.rank
        link = ctx.links[peer]
        inbox, out = Message(payload.sizes), Message(payload.sizes)  # r_buf and s_buf, as osu_latency
        if not checked:
            if me == 0:
                return Side(step=link.caller(out, inbox), calls=link.calls_per_caller(out))
            return Side(run=lambda n: link.serve(n, inbox, out))
        mine, theirs = ctx.checker(payload, me), ctx.checker(payload, peer)
        if me == 0:
            def step() -> None:
                link.call(mine.prepare(out), inbox)
                theirs.check(inbox)
            return Side(step=step, wrong=lambda: theirs.wrong)

        def respond() -> Message:
            theirs.check(inbox)
            return mine.prepare(out)
        return Side(run=lambda n: link.serve(n, inbox, respond), wrong=lambda: theirs.wrong)

    def row(self, payload: Payload, timing: Timing, reports: list[dict]) -> dict:
        assert timing.samples is not None  # a timed point keeps its samples
        s = Summary.of(timing.samples, 0.5e-3 / timing.calls)  # ns round trip(s) -> us one way
        return {"iterations": s.n * timing.calls, **s.as_row()}
