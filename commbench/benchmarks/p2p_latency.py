"""Point-to-point latency: ping-pong, one-way = round trip / 2 (osu_latency's loop).

Rank 0 calls, rank 1 answers with a message of the same layout from its own send buffer (as
osu_latency). Each round trip is timed, so percentiles come with the mean.
"""

from __future__ import annotations

from commbench.benchmarks.base import WRONG, Benchmark, Checker, Context
from commbench.core.harness import LATENCY_LOOPS, Summary, measure, timed_loop
from commbench.core.message import Message
from commbench.core.payload import Payload
from commbench.core.table import Column
from commbench.core.world import World

US = "{:.2f}"


class P2PLatency(Benchmark):
    name = "p2p-latency"
    help = "ping-pong between two ranks; one-way latency = round trip / 2 (as osu_latency)"
    units = "microseconds (us) one-way = round trip / 2; each round trip timed around the call; percentiles over them"
    columns = [Column("iterations", "Iters", 8, "{:d}"), Column("avg_us", "Avg(us)", 10, US),
               Column("min_us", "Min", 9, US), Column("p50_us", "p50", 9, US), Column("p99_us", "p99", 9, US),
               Column("p999_us", "p99.9", 9, US), Column("max_us", "Max", 10, US),
               Column("stdev_us", "Stdev", 9, US), WRONG]

    def peers(self, world: World) -> list[int]:
        return [1 - world.rank]

    def run_point(self, ctx: Context, payload: Payload) -> dict | None:
        world = ctx.world
        link = ctx.links[1 - world.rank]
        msg = Message(payload.sizes)
        pattern = ctx.pattern(payload)
        check = Checker(pattern, ctx.corrupt_every) if pattern else None
        if world.rank == 0:
            reply = Message(payload.sizes)
            if check is None:
                step = link.caller(msg, reply)
            else:
                msg.fill(pattern)

                def step() -> None:
                    check.send(link.call, msg, reply)
                    check.check(reply)

            def run(n: int):
                return timed_loop(step, n)
        else:
            if check is None:
                # reply from a send buffer of its own, as osu_latency does (s_buf / r_buf): replying
                # from the buffer just received into measured ~20 % slower at 1 MiB over MPI here
                respond = Message(payload.sizes)
            else:
                out = Message(payload.sizes)
                out.fill(pattern)

                def respond() -> Message:
                    check.check(msg)
                    return out

            def run(n: int):
                link.serve(n, msg, respond)

        samples = measure(world, ctx.loops, LATENCY_LOOPS, payload.nbytes, run)
        wrong = world.gather_json("wrong", check.wrong if check else 0)
        if world.rank != 0:
            return None
        s = Summary.of(samples, 0.5e-3)  # ns round trip -> us one way
        return {"iterations": s.n, **s.as_row(), "wrong": sum(wrong)}
