"""What a rank does for each task rank 0 hands it (rank 0 too, for its own): measure a pair (p2p-latency's
ping-pong and p2p-bandwidth's window, the same code as those benchmarks, over the pair's own
connection), stream in a ring or across a bisection cut, or shrink MPI's world after a death.

Each pair is a group of two ranks of its own whose collectives go over the pair's own control
connection (core/run/link.py), never through rank 0: a transport is built for it, connects the two,
measures and closes, so a rank holds one data connection at a time. A ring is one group of every
endpoint, each sending a window to its successor while receiving one from its predecessor; a cut
pairs the two halves, every pair streaming at once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from commbench.benchmarks.base import Benchmark, Context, measure_point
from commbench.benchmarks.p2p_bandwidth import BandwidthOptions, P2PBandwidth
from commbench.benchmarks.p2p_latency import P2PLatency
from commbench.core.config.run import RunConfig
from commbench.core.errors import PeerError
from commbench.core.measure.harness import BANDWIDTH_LOOPS, Loops, Side, Timing
from commbench.core.measure.message import Message
from commbench.core.measure.payload import Payload
from commbench.core.run.collectives import Group
from commbench.core.run.link import Control, LinkStore
from commbench.core.run.tasks import Worker as TaskQueue
from commbench.core.run.world import World
from commbench.transports.base import LOSS_KEYS

Work = Callable[..., dict]


class Cut(P2PBandwidth):
    """A bisection cut's step (osu_mbw_mr): group rank i < k streams to i + k, every pair the same count
    of windows from one barrier; the row has each pair's rate over its own time and the cut's, all
    bytes over the slowest pair's time (which no shared uplink can exceed). No name of its own: not a
    command (the registry lists classes that name themselves)."""

    def row(self, payload: Payload, timing: Timing, reports: list[dict]) -> dict:
        got = super().row(payload, timing, reports)
        moved = payload.nbytes * self.window * timing.n
        got["links"] = [moved / max(r["wall_ns"], 1) * 1e3 for r in reports[:self.pairs]]
        return got


class Ring:
    """A ring's step (duck-typed for measure_point): every member sends a window to its successor
    while receiving one from its predecessor; the row has each member's receive rate."""

    name = "cluster-ring"
    loops = BANDWIDTH_LOOPS

    def __init__(self, window: int) -> None:
        self.window = window

    def prepare(self, ctx: Context, payload: Payload, checked: bool) -> Side:
        n, me = ctx.world.size, ctx.world.rank
        nxt, prv = ctx.links[(me + 1) % n], ctx.links[(me - 1) % n]
        post_send, post_recv = nxt.send_poster(Message(payload.sizes)), prv.recv_poster(Message(payload.sizes))
        complete, window = ctx.transport.completer(), range(self.window)

        def step() -> None:
            complete([post_recv() for _ in window] + [post_send() for _ in window])
        return Side(step=step)

    def row(self, payload: Payload, timing: Timing, reports: list[dict]) -> dict:
        moved = payload.nbytes * self.window
        return {"links": [moved * r["n"] / max(r["wall_ns"], 1) * 1e3 for r in reports]}


@dataclass
class Setup:
    """What every rank measures with, decided once from the run's configuration."""

    config: RunConfig
    window: int
    lat_payload: Payload
    bw_payload: Payload
    lat_loops: Loops
    bw_loops: Loops
    extra: list[tuple[str, type, RunConfig]]  # --transports' others: (name, class, configuration)

    def __post_init__(self) -> None:
        self.pair_config = dataclasses.replace(self.config, ranks=2, bench=BandwidthOptions(window=self.window))
        self.latency, self.bandwidth = P2PLatency(self.pair_config), P2PBandwidth(self.pair_config)
        self.ring = Ring(self.window)


class PairWorker:
    """A rank's side of every task: ``do(task)`` returns its result (an ``error`` where a peer failed)."""

    def __init__(self, ctx: Context, setup: Setup, control: Control) -> None:
        self.ctx, self.setup, self.control = ctx, setup, control

    def serve(self) -> None:
        """A rank other than 0: its tasks, one after the other, until rank 0 says the run is over."""
        queue = TaskQueue(self.ctx.world)
        result: dict = {"ctl": self.control.address}
        while (task := queue.next(result))["kind"] != "end":
            result = self.do(task)

    def do(self, task: dict) -> dict:
        if task["kind"] == "pair":
            return self._pair(task)
        if task["kind"] == "shrink":
            from commbench.core.run import mpi_env

            try:
                mpi_env.shrink(mpi_env.mpi())
            except Exception as exc:  # noqa: BLE001 (MPI's own error: reported, the run goes on)
                return {"error": f"MPI_Comm_shrink: {exc}"}
            return {}
        s, members = self.setup, task["members"]
        group, n = Group(self.ctx.world, members, task["tag"]), len(members)
        step: Benchmark
        if task["kind"] == "ring":
            peers, step = {(group.rank + 1) % n, (group.rank - 1) % n}, cast(Benchmark, s.ring)  # duck-typed
        else:  # a bisection cut: the first half streams to the second
            k = n // 2
            peers = {group.rank + k if group.rank < k else group.rank - k}
            step = Cut(dataclasses.replace(s.config, ranks=2 * k, bench=BandwidthOptions(window=s.window, pairs=k)))
        return self._in_group(group, peers, lambda transport, links: measure_point(
            self._context(group, transport, links, s.bw_loops), step, s.bw_payload) or {})

    def _pair(self, task: dict) -> dict:
        """This rank's part of one pair, synchronised over the pair's own connection (core/run/link.py):
        the first rank dials the second's control listener."""
        world, (ra, rb) = self.ctx.world, task["members"]
        try:
            sock, seal = self.control.dial(task["addr"], rb, task["tag"], world.timeout) if world.rank == ra else \
                self.control.accept(ra, task["tag"], world.timeout)
        except PeerError as exc:
            return {"error": str(exc)}
        link = LinkStore(sock, seal, world, rb if world.rank == ra else ra, world.timeout)
        extra = self.setup.extra
        try:
            over = next(((cls, config) for name, cls, config in extra if name == task["via"]), (None, None))
            got = self._measure_pair(Group(world, [ra, rb], task["tag"], link), task["latency"], *over)
            if task["also"] and extra and "error" not in got:
                got["via"] = {name: self._measure_pair(Group(world, [ra, rb], f"{task['tag']}.{name}", link),
                                                       task["latency"], cls, config)
                              for name, cls, config in extra}
            return got
        finally:
            link.close()

    def _in_group(self, group: Group, peers: set[int], work: Work, cls: type | None = None,
                  config: RunConfig | None = None) -> dict:
        """A transport (-t's, or ``cls`` with ``config``) on ``group`` connected to ``peers``,
        ``work(transport, links)`` done over it, and closed once every member is done (a send may be
        written but not yet delivered). A peer's fault is the result, and the group hears of it, so no
        member waits on this one."""
        own = type(self.ctx.transport)
        kind = cls or own
        faults = tuple(getattr(self.ctx.transport, "peer_faults", ())) if kind is own else ()
        try:  # an MPI communicator of the pair is made here: after a peer's death under ULFM that can fail
            transport = kind(group, dataclasses.replace(config or self.setup.config, ranks=group.size))
        except (PeerError, *faults) as exc:
            group.fail(str(exc))
            return {"error": f"{type(exc).__name__}: {exc}" if not isinstance(exc, PeerError) else str(exc)}
        try:
            got = work(transport, transport.connect(peers))
            group.barrier("done", patient=True)
            return got
        except (PeerError, *transport.peer_faults) as exc:
            why = str(exc) if isinstance(exc, PeerError) else \
                f"{type(exc).__name__} with {', '.join(group.describe(p) for p in sorted(peers))}: {exc}"
            group.fail(why)
            return {"error": why}
        finally:
            with contextlib.suppress(*transport.peer_faults):  # freeing what a dead peer shared
                transport.close()

    def _measure_pair(self, group: Group, latency: bool, cls: type | None = None,
                      config: RunConfig | None = None) -> dict:
        """This rank's part of one pair: latency (if asked) and bandwidth (over ``cls`` if given)."""
        s = self.setup

        def work(transport, links) -> dict:
            got: dict = {"wrong": 0}
            began = time.monotonic()
            if latency:
                row = measure_point(self._context(group, transport, links, s.lat_loops), s.latency, s.lat_payload)
                if row is not None:
                    got.update(lat_us=row["p50_us"], lat_p99_us=row["p99_us"], wrong=row["wrong"])
            row = measure_point(self._context(group, transport, links, s.bw_loops), s.bandwidth, s.bw_payload)
            if row is not None:
                got.update(mb_s=row["mb_s"], wrong=got["wrong"] + row["wrong"])
                got.update({k.key: row[k.key] for k in LOSS_KEYS if k.key in row})  # its transport's loss
            got["measure_s"] = time.monotonic() - began  # its loops, warm-up included: the rest is the round's cost
            return got
        return self._in_group(group, {1 - group.rank}, work, cls, config)

    def _context(self, group: Group, transport, links, loops: Loops) -> Context:
        ctx, s = self.ctx, self.setup
        config = s.pair_config if group.size == 2 else dataclasses.replace(s.config, ranks=group.size)
        return Context(cast(World, group), transport, links, config, loops, ctx.validate, ctx.seed, ctx.corrupt_every,
                       ctx.quiet)  # a group has the world's collectives, over its members
