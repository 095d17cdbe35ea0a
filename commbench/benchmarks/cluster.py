"""Cluster evaluation (as NVIDIA's ClusterKit, on any transport): latency and bandwidth between every
pair of hosts, ordered and random rings, bisection bandwidth, and the findings: the slow host, the
slow cable, the pair that failed.

One rank per host is the host's endpoint (``--per-host``). Pairwise runs as a round-robin tournament
(``N - 1`` rounds of ``N / 2`` disjoint pairs at once, the circle method) or ``--serial`` (one pair
at a time: no cross-traffic, ``N (N - 1) / 2`` turns). Each pair is a group of two ranks of its own
(core/run/collectives.py): a transport is built for it, connects the two, measures p2p-latency's
ping-pong and p2p-bandwidth's window (the same code as those benchmarks) and closes, so a rank holds
one data connection at a time. A ring is one group of every endpoint, each sending a window to its
successor while receiving one from its predecessor. A bisection cut splits the endpoints into random
halves and pairs them across the cut, every pair streaming at once.

The run is tolerant: a rank that dies or stops is a finding, not the end (a row per pair it failed,
naming it); rank 0 serves the rendezvous, and losing it ends the run. Rows are written as each round
is measured, so a run killed at round 400 keeps rounds 1-399.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from commbench.benchmarks.base import WRONG, Benchmark, Context, measure_point
from commbench.benchmarks.p2p_bandwidth import BandwidthOptions, P2PBandwidth
from commbench.benchmarks.p2p_latency import P2PLatency
from commbench.core.config.argtypes import integer, number
from commbench.core.config.options import Options, opt
from commbench.core.config.run import CommonOptions, RunConfig
from commbench.core.errors import PeerError, RunAborted, UsageError
from commbench.core.measure import outliers
from commbench.core.measure.harness import BANDWIDTH_LOOPS, Loops, Side, Timing
from commbench.core.measure.message import Message
from commbench.core.measure.payload import Payload
from commbench.core.measure.sizes import parse_size
from commbench.core.output.table import Column, key
from commbench.core.run.collectives import Group
from commbench.core.run.world import World

TESTS = ("pairwise", "ring", "bisection")
TEST = Column("test", "Test", -13, doc="pairwise, recheck (a suspected slow link alone), recheck-latency and "
              "recheck-host (a host whose latency or bandwidth stands out, with the median host, then a control "
              "pair of two ordinary hosts), ring-ordered, ring-random, bisection, bisection-cut (a cut's "
              "total), finding or summary")
US, MBS = "{:.2f}", "{:.1f}"


def tournament(n: int) -> list[list[tuple[int, int]]]:
    """Rounds of disjoint pairs covering every pair of 0..n-1 once (the circle method); odd n: one
    index sits each round out."""
    idx: list[int | None] = list(range(n)) + ([None] if n % 2 else [])
    m = len(idx)
    rounds = []
    for _ in range(m - 1):
        pairs = [(idx[i], idx[m - 1 - i]) for i in range(m // 2)]
        rounds.append([(min(a, b), max(a, b)) for a, b in pairs if a is not None and b is not None])
        idx = [idx[0], idx[-1], *idx[1:-1]]
    return rounds


def serial(n: int) -> list[list[tuple[int, int]]]:
    """One pair a round: every pair of 0..n-1 in turn."""
    return [[(a, b)] for a in range(n) for b in range(a + 1, n)]


def random_ring(rng: np.random.Generator, n: int) -> list[int]:
    """A random order of 0..n-1 whose ring is not the ordered one (nor it turned or reversed), where
    n > 3 leaves another: its links are other pairs than the ordered ring's."""
    ordered = {frozenset((i, (i + 1) % n)) for i in range(n)}
    for _ in range(100):
        order = [int(i) for i in rng.permutation(n)]
        if n <= 3 or {frozenset((order[i], order[(i + 1) % n])) for i in range(n)} != ordered:
            return order
    return order


def endpoints(hosts: list[str], per_host: str) -> list[int]:
    """The ranks that stand for their hosts: the first rank on each host, the K-th, or all of them;
    ``auto``: the first where there are two hosts or more, else every rank. Raises UsageError."""
    by_host: dict[str, list[int]] = {}
    for r, h in enumerate(hosts):
        by_host.setdefault(h, []).append(r)
    if per_host == "all" or (per_host == "auto" and len(by_host) == 1):
        chosen = list(range(len(hosts)))
    else:
        k = 0 if per_host in ("auto", "first") else int(per_host)
        short = {h: len(rs) for h, rs in by_host.items() if len(rs) <= k}
        if short:
            h, n = next(iter(short.items()))
            raise UsageError(f"--per-host {per_host}: host {h} runs {n} rank(s) (local index 0 to {n - 1}); pick "
                             f"an index below {min(len(rs) for rs in by_host.values())}, or first or all")
        chosen = [rs[k] for rs in by_host.values()]
    if len(chosen) < 2:
        raise UsageError(f"a cluster of one endpoint: every rank runs on host {hosts[0]}; run ranks on two hosts or "
                         "more (srun -N, mpirun -H, --hosts N), or --per-host all to test the ranks of one host")
    return chosen


def labels(hosts: list[str], chosen: list[int]) -> list[str]:
    """How findings name each endpoint: its host, or host/rank where a host has several."""
    names = [hosts[r] for r in chosen]
    if len(set(names)) == len(names):
        return names
    return [f"{hosts[r]}/r{r}" for r in chosen]


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


@dataclass(frozen=True)
class ClusterOptions(Options):
    title = "cluster"
    tests: str = opt(",".join(TESTS), help=f"which tests, in order: {', '.join(TESTS)} (default all)")
    per_host: str = opt("auto", metavar="first|K|all",
                        help="the rank that stands for each host: first, the K-th rank on it, or all ranks (default: "
                             "first where ranks run on two hosts or more, else all)")
    serial: bool = opt(False, action="store_true",
                       help="pairwise one pair at a time (no cross-traffic; N(N-1)/2 turns, not N-1 rounds)")
    lat_size: str = opt("8", help="latency message size (default 8)")
    bw_size: str = opt("1M", help="bandwidth message size (default 1M)")
    window: int = opt(16, "-W", "--window", type=integer(1, 1 << 16), help="bandwidth messages per window (default 16)")
    bw_time: float = opt(0.5, type=number(above=0, hi=3600, what=" (seconds)"),
                         help="seconds each bandwidth measurement runs after its warm-up (default 0.5)")
    cuts: int = opt(5, type=integer(0, 10_000),
                    help="random bisection cuts (default 5): the worst and the median are reported")
    slow_pct: float = opt(25.0, type=number(above=0, hi=99, what=" (percent)"),
                          help="a host or link is a finding when it is this much slower than the median and stands "
                               "out of the spread (median/MAD; default 25)")


class Cluster(Benchmark):
    name = "cluster"
    help = ("cluster evaluation: latency and bandwidth between every pair of hosts, rings, bisection; names the "
            "slow host, cable or dead node (as ClusterKit)")
    units = ("Lat = p50 one-way latency (us) of a --lat-size ping-pong; MB/s = 10^6 B/s of a --window of --bw-size "
             "messages (osu_bw); ring: each endpoint's receive rate; bisection: the sum over the cut's pairs")
    metric, better = "mb_s", "higher"
    tolerant = True
    size_options = "--lat-size and --bw-size"
    columns = [Column("round", "Round", 5, "{:d}", "count", "the round (tournament round, cut number; rings: 1)",
                      optional=True),
               Column("a", "From", -14, doc="the first endpoint's host (a ring: the sender)", optional=True),
               Column("b", "To", -14, doc="the second endpoint's host (a ring: the receiver)", optional=True),
               Column("lat_us", "Lat(us)", 10, US, "us", "median one-way latency of the pair", optional=True),
               Column("mb_s", "MB/s", 10, MBS, "MB/s", "the pair's or link's bandwidth; a cut: the sum of its pairs'",
                      optional=True), WRONG,
               Column("note", "Note", -1, doc="what went wrong, or a finding's or summary's text", optional=True)]
    keys = [TEST, key("a_rank", doc="rank standing for host a", optional=True),
            key("b_rank", doc="rank standing for host b", optional=True),
            key("lat_p99_us", "us", "99th percentile one-way latency of the pair", optional=True),
            key("error", doc="the pair's fault in full (a rank that died or stopped)", optional=True),
            key("min_mb_s", "MB/s", "a cut's slowest pair", optional=True),
            key("pairs", "count", "pairs in a cut", optional=True),
            key("failed", "count", "pairs of a cut that failed", optional=True),
            key("kind", doc="a finding's kind: slow-host, slow-host-latency, slow-link, slow-ring-link, failed",
                optional=True)]

    Options = ClusterOptions
    figure = "pairs"

    @classmethod
    def ranks(cls, opts: ClusterOptions, common: CommonOptions) -> int:
        tests = [t.strip() for t in opts.tests.split(",") if t.strip()]
        bad = [t for t in tests if t not in TESTS]
        if bad or not tests:
            raise UsageError(f"--tests {opts.tests!r}: choose from {', '.join(TESTS)} (comma-separated)")
        ph = opts.per_host
        if ph not in ("auto", "first", "all") and not (ph.isdigit() and len(ph) < 6):
            raise UsageError(f"--per-host {ph!r}: give first, all, or a rank's index on its host (0, 1, ...)")
        if common.hosts == 1:
            raise UsageError("--hosts 1: a cluster of one host has no links to test; use --hosts 2 or more")
        n = common.np if common.np is not None else (common.hosts or 4)
        if n < 2:
            raise UsageError(f"cluster needs two ranks or more, not --np {n}")
        if common.hosts and ph.isdigit():  # the local launcher puts rank r in host r mod --hosts
            fewest = n // common.hosts
            if int(ph) >= fewest:
                raise UsageError(f"--per-host {ph}: with --np {n} on --hosts {common.hosts} some host runs {fewest} "
                                 f"rank(s) (local index 0 to {fewest - 1}); pick a smaller index, first or all")
        return n

    @classmethod
    def needs(cls, opts: ClusterOptions, common: CommonOptions) -> frozenset[str]:
        return frozenset({"call", "stream", "exchange"})

    @classmethod
    def plan_points(cls, opts: ClusterOptions, common: CommonOptions) -> tuple[list[Payload], str | None] | None:
        lat, bw = parse_size(opts.lat_size, "--lat-size"), parse_size(opts.bw_size, "--bw-size")
        if bw == 0:
            raise UsageError("--bw-size must be at least 1 byte")
        return [Payload(str(lat), (lat,)), Payload(str(bw), (bw,))], None

    def __init__(self, config: RunConfig) -> None:
        super().__init__(config)
        o, c = self.opts, self.common
        self.tests = [t.strip() for t in o.tests.split(",") if t.strip()]
        self.lat_payload, self.bw_payload = config.points
        self.pair_config = dataclasses.replace(config, ranks=2, bench=BandwidthOptions(window=o.window))
        self.latency, self.bandwidth = P2PLatency(self.pair_config), P2PBandwidth(self.pair_config)
        self.ring = Ring(o.window)
        self.lat_loops = Loops(c.iterations or 1000, 100 if c.warmup is None else c.warmup)
        self.bw_loops = Loops(time=o.bw_time, warmup_time=min(0.2, o.bw_time / 4))
        self.chosen: list[int] = []
        self.names: list[str] = []
        self.lat = self.bw = np.zeros((0, 0))  # rank 0: the pairwise matrices (NaN: not measured)
        self.failed: list[dict] = []
        self.rings: dict[str, list[dict]] = {}
        self.cuts: list[dict] = []
        self.start = (0.0, 0)  # when the tests began, and rank 0's rendezvous requests by then
        self.rechecked: dict[tuple[int, int], float] = {}  # rank 0: suspected slow links measured again alone
        self.lat_again: dict[int, tuple[float, float]] = {}  # rank 0: a latency suspect's pair and a control pair
        self.bw_again: dict[int, tuple[float, float]] = {}  # rank 0: a slow-host suspect's pair and a control pair

    def peers(self, world: World) -> list[int]:
        return []  # every pair connects in a group of its own

    @classmethod
    def size_column(cls, meta: dict) -> Column:
        return TEST

    @classmethod
    def header(cls, meta: dict) -> list[str]:
        o = meta["options"]
        lines = super().header(meta)
        lines[2] = (f"# pairwise: {'one pair at a time (--serial)' if o.get('serial') else 'round-robin tournament'}, "
                    f"ping-pong of {o.get('lat_size')} B ({o.get('iterations') or 1000} iterations), "
                    f"window of {o.get('window')} x {o.get('bw_size')} B for {o.get('bw_time'):g} s; "
                    f"tests: {o.get('tests')}; endpoints: --per-host {o.get('per_host')}; "
                    f"findings: {o.get('slow_pct'):g} % off the median (median/MAD)")
        return lines

    def progress(self, world: World) -> tuple[int, str]:
        k = len(set(world.hosts)) if self.opts.per_host in ("auto", "first") else world.size
        k = world.size if k < 2 else k
        total = (k * (k - 1) // 2 if "pairwise" in self.tests else 0) + (2 * k if "ring" in self.tests else 0) + \
            ((k // 2 + 1) * self.opts.cuts if "bisection" in self.tests else 0)
        return total, "rows"

    # -- the schedule ---------------------------------------------------------------------
    def measure(self, ctx: Context) -> Iterator[tuple[Payload, dict | None]]:
        world = ctx.world
        plan = None
        if world.rank == 0:
            try:
                plan = {"chosen": endpoints(world.hosts, self.opts.per_host)}
            except UsageError as exc:
                plan = {"error": str(exc)}
        plan = world.bcast_json("cluster-plan", plan)
        if "error" in plan:
            if world.rank == 0:
                raise UsageError(plan["error"])
            raise RunAborted(plan["error"], 2)
        self.start = (time.monotonic(), world.store_requests or 0)
        self.chosen = plan["chosen"]
        self.names = labels(world.hosts, self.chosen)
        k = len(self.chosen)
        self.lat, self.bw = np.full((k, k), np.nan), np.full((k, k), np.nan)
        rng = np.random.default_rng(self.common.seed)
        for test in self.tests:
            if test == "pairwise":
                rounds = serial(k) if self.opts.serial else tournament(k)
                for r, pairs in enumerate(rounds, 1):
                    yield from self._pairs(ctx, "pairwise", r, pairs, latency=True)
                yield from self._recheck_hosts(ctx, latency=False)
                yield from self._recheck(ctx)
                yield from self._recheck_hosts(ctx, latency=True)
            elif test == "ring":
                yield from self._ring(ctx, "ring-ordered", list(range(k)))
                yield from self._ring(ctx, "ring-random", random_ring(rng, k))
            else:
                for c in range(1, self.opts.cuts + 1):
                    live = self._live(ctx)
                    order = [live[int(i)] for i in rng.permutation(len(live))]
                    half = len(order) // 2
                    cut = list(zip(order[:half], order[half:2 * half], strict=True))
                    yield from self._pairs(ctx, "bisection", c, cut, latency=False)

    def _recheck(self, ctx: Context) -> Iterator[tuple[Payload, dict | None]]:
        """Measure each suspected slow link again, alone (at most one per endpoint): a tournament's
        pairs share CPUs, switches and uplinks, and on a busy machine one pair measured alone can meet a
        busy moment; a cable is named only if it is slow again."""
        suspects = None
        if ctx.world.rank == 0:
            suspects = [[a, b] for a, b, _ in self._slow_links(self.opts.slow_pct / 100)][:len(self.chosen)]
        for i, (a, b) in enumerate(ctx.world.bcast_json("cluster-suspects", suspects), 1):  # type: ignore[arg-type]
            for payload, row in self._pairs(ctx, "recheck", i, [(a, b)], latency=False):
                if row is not None and row.get("mb_s") is not None:
                    self.rechecked[(a, b)] = row["mb_s"]
                yield payload, row

    def _recheck_hosts(self, ctx: Context, latency: bool) -> Iterator[tuple[Payload, dict | None]]:
        """Measure each host whose median latency (or bandwidth) stands out again, with the host of
        median latency (bandwidth), and right after it a control pair of two ordinary hosts: on a busy
        machine one unlucky moment can triple a host's latency (seen under load: 25 us against a median
        of 7.7) or halve a host's bandwidth over several pairs (22 MB/s against a median of 52), and a
        host is named only if it is slower than the control measured at about the same time."""
        plan = None
        if ctx.world.rank == 0:
            plan = recheck_plan(self._host_lat() if latency else self._host_bw(), self._suspects(latency))
        test, key = ("recheck-latency", "lat_us") if latency else ("recheck-host", "mb_s")
        again = self.lat_again if latency else self.bw_again
        name = "cluster-lat-suspects" if latency else "cluster-host-suspects"
        for i, (s, r, c) in enumerate(ctx.world.bcast_json(name, plan), 1):  # type: ignore[arg-type]
            got = []
            for rnd, pair in ((2 * i - 1, (min(s, r), max(s, r))), (2 * i, (min(r, c), max(r, c)))):
                for payload, row in self._pairs(ctx, test, rnd, [pair], latency=latency):
                    if row is not None and row.get(key) is not None:
                        got.append(row[key])
                    yield payload, row
            if len(got) == 2:
                again[s] = (got[0], got[1])

    def _suspects(self, latency: bool) -> list[int]:
        """Hosts whose median latency (twice --slow-pct above the hosts' median: latency moves more) or
        bandwidth (--slow-pct below it) stands out: measured again before they are named."""
        share = self.opts.slow_pct / 100
        return outliers.outliers(self._host_lat(), 2 * share, low=False) if latency else \
            outliers.outliers(self._host_bw(), share, low=True)

    def _host_lat(self) -> list[float]:
        """Each endpoint's median latency to the others (NaN where none was measured)."""
        return [float(np.nanmedian(row)) if np.isfinite(row).any() else np.nan for row in self.lat]

    def _live(self, ctx: Context) -> list[int]:
        """Rank 0's word on which endpoints (indices) are still alive, the same on every rank."""
        world = ctx.world
        gone = world.departed() if world.rank == 0 else {}  # one request, not one per endpoint
        live = [i for i, r in enumerate(self.chosen) if r == 0 or r not in gone] if world.rank == 0 else None
        return list(world.bcast_json("cluster-live", live))  # type: ignore[arg-type]

    def _pairs(self, ctx: Context, test: str, rnd: int, pairs: list[tuple[int, int]],
               latency: bool) -> Iterator[tuple[Payload, dict | None]]:
        """One round: every pair at once, after a barrier of the ranks still alive; rank 0 then gathers
        each pair's result (its first rank's) and yields the rows."""
        world, chosen = ctx.world, self.chosen
        world.barrier(f"{test}-{rnd}", patient=True, survivors=True)
        if world.rank == 0 and rnd > 1:  # every rank is past the last round: its groups' keys can go
            world.store.forget(f"g{test}.{rnd - 1}.")
        mine = next(((a, b) for a, b in pairs if world.rank in (chosen[a], chosen[b])), None)
        if mine is not None:
            a, b = mine
            group = Group(world, [chosen[a], chosen[b]], f"{test}.{rnd}.{a}.{b}")
            got = self._measure_pair(ctx, group, latency)
            if group.rank == 0:
                world.store.set(f"cluster/{test}/{rnd}/{a}", json.dumps(got).encode())
        if world.rank != 0:
            return
        rows = []
        for a, b in pairs:
            got = _result(world, f"cluster/{test}/{rnd}/{a}", chosen[a])
            row = {"test": test, "round": rnd, "a": self.names[a], "b": self.names[b], "a_rank": chosen[a],
                   "b_rank": chosen[b], "lat_us": got.get("lat_us"), "lat_p99_us": got.get("lat_p99_us"),
                   "mb_s": got.get("mb_s"), "wrong": got.get("wrong"), "note": _short(got.get("error"))}
            if "error" in got:
                row["error"] = got["error"]
                self.failed.append(row)
            elif test == "pairwise":
                self.lat[a, b] = self.lat[b, a] = got["lat_us"]
                self.bw[a, b] = self.bw[b, a] = got["mb_s"]
            rows.append(row)
        world.store.forget(f"cluster/{test}/{rnd}/")  # the round's results, all read
        if test == "bisection":
            rates = [r["mb_s"] for r in rows if r["mb_s"] is not None]
            total = {"test": "bisection-cut", "round": rnd, "a": f"{len(pairs)} pairs", "b": "",
                     "mb_s": float(sum(rates)), "min_mb_s": min(rates, default=None),
                     "note": f"slowest pair {min(rates):.1f} MB/s" if rates else "no pair measured",
                     "pairs": len(pairs), "failed": len(pairs) - len(rates)}
            self.cuts.append(total)
            rows.append(total)
        for row in rows:
            yield self.bw_payload, row

    def _in_group(self, ctx: Context, group: Group, peers: set[int], work) -> dict:
        """A transport on ``group`` connected to ``peers``, ``work(transport, links)`` done over it, and
        closed once every member is done (a send may be written but not yet delivered). A peer's fault
        is the result, and the group hears of it, so no member waits on this one."""
        transport = type(ctx.transport)(group, dataclasses.replace(self.config, ranks=group.size))
        try:
            got = work(transport, transport.connect(peers))
            group.barrier("done", patient=True)
            return got
        except PeerError as exc:
            group.fail(str(exc))
            return {"error": str(exc)}
        finally:
            transport.close()

    def _measure_pair(self, ctx: Context, group: Group, latency: bool) -> dict:
        """This rank's part of one pair: latency (if asked) and bandwidth."""
        def work(transport, links) -> dict:
            got: dict = {"wrong": 0}
            if latency:
                row = measure_point(self._context(ctx, group, transport, links, self.lat_loops), self.latency,
                                    self.lat_payload)
                if row is not None:
                    got.update(lat_us=row["p50_us"], lat_p99_us=row["p99_us"], wrong=row["wrong"])
            row = measure_point(self._context(ctx, group, transport, links, self.bw_loops), self.bandwidth,
                                self.bw_payload)
            if row is not None:
                got.update(mb_s=row["mb_s"], wrong=got["wrong"] + row["wrong"])
            return got
        return self._in_group(ctx, group, {1 - group.rank}, work)

    def _context(self, ctx: Context, group, transport, links, loops: Loops) -> Context:
        config = self.pair_config if group.size == 2 else dataclasses.replace(self.config, ranks=group.size)
        return Context(group, transport, links, config, loops, ctx.validate, ctx.seed, ctx.corrupt_every, ctx.quiet)

    def _ring(self, ctx: Context, test: str, order: list[int]) -> Iterator[tuple[Payload, dict | None]]:
        """Every live endpoint in ``order`` (indices) sends to the next while receiving from the one before."""
        world = ctx.world
        live = set(self._live(ctx))
        order = [i for i in order if i in live]
        members = [self.chosen[i] for i in order]
        world.barrier(test, patient=True, survivors=True)
        got: dict = {}
        if world.rank in members:
            group = Group(world, members, test)
            n = len(members)
            got = self._in_group(ctx, group, {(group.rank + 1) % n, (group.rank - 1) % n}, lambda transport, links:
                                 measure_point(self._context(ctx, group, transport, links, self.bw_loops), self.ring,
                                               self.bw_payload) or {})
            if group.rank == 0:
                world.store.set(f"cluster/{test}", json.dumps(got).encode())
        if world.rank != 0:
            return
        got = _result(world, f"cluster/{test}", members[0])
        rows = []
        for pos, i in enumerate(order):
            prev = order[pos - 1]
            rate = got["links"][pos] if "links" in got else None
            rows.append({"test": test, "round": 1, "a": self.names[prev], "b": self.names[i],
                         "a_rank": self.chosen[prev], "b_rank": self.chosen[i], "mb_s": rate,
                         "note": _short(got.get("error"))})
        self.rings[test] = rows
        for row in rows:
            yield self.bw_payload, row

    # -- findings -------------------------------------------------------------------------
    def conclude(self, ctx: Context) -> tuple[list[str], list[dict]]:
        share = self.opts.slow_pct / 100
        names, found = self.names, []
        host_bw = self._host_bw()
        host_lat = self._host_lat()
        slow_hosts = self._slow_hosts(share)
        med_bw, _ = outliers.median_mad(host_bw)
        for i in sorted(slow_hosts):
            again = self.bw_again.get(i)
            found.append({"kind": "slow-host", "a": names[i], "mb_s": host_bw[i],
                          "note": f"{names[i]}: median bandwidth to the others {host_bw[i]:.1f} MB/s, "
                                  f"{host_bw[i] / med_bw * 100:.0f} % of the hosts' median {med_bw:.1f}" +
                                  (f" (again: {again[0]:.1f} MB/s, a control pair {again[1]:.1f})" if again else "")})
        med_lat, _ = outliers.median_mad(host_lat)
        for i in self._suspects(latency=True):
            again = self.lat_again.get(i)
            if not slow_again(again, 2 * share):
                continue  # measured again beside a control pair, it was not slow: a busy moment
            found.append({"kind": "slow-host-latency", "a": names[i], "lat_us": host_lat[i],
                          "note": f"{names[i]}: median latency to the others {host_lat[i]:.1f} us, "
                                  f"{host_lat[i] / med_lat:.1f}x the hosts' median {med_lat:.1f}" +
                                  (f" (again: {again[0]:.1f} us, a control pair {again[1]:.1f})" if again else "")})
        for a, b, expect in self._slow_links(share):
            again = self.rechecked.get((a, b))
            if again is not None and again >= expect * (1 - share):
                continue  # measured again alone, it was not slow: the tournament's cross-traffic
            seen = f"{self.bw[a, b]:.1f} MB/s" + (f" ({again:.1f} measured again alone)" if again is not None else "")
            found.append({"kind": "slow-link", "a": names[a], "b": names[b], "mb_s": float(self.bw[a, b]),
                          "note": f"{names[a]} - {names[b]}: {seen} where both hosts reach {expect:.1f} MB/s "
                                  "with the others"})
        for row in self.failed:
            found.append({"kind": "failed", "a": row["a"], "b": row["b"], "note": f"{row['test']} round {row['round']}"
                          f" {row['a']} - {row['b']}: {row['error']}"})
        for test, rows in self.rings.items():
            rates = [r["mb_s"] if r["mb_s"] is not None else np.nan for r in rows]
            slow_names = {names[i] for i in slow_hosts}
            for j in outliers.outliers(rates, share, low=True):
                if {rows[j]["a"], rows[j]["b"]} & slow_names:
                    continue  # explained by the host
                a, b = names.index(rows[j]["a"]), names.index(rows[j]["b"])
                alone = self.rechecked.get((min(a, b), max(a, b)), float(self.bw[a, b]))
                if alone == alone and alone >= med_bw * (1 - share):
                    continue  # the same link measured as a pair was healthy: the ring's own contention
                    # (every endpoint streaming at once shares the CPUs: 24 MB/s against a 36 median seen)
                found.append({"kind": "slow-ring-link", "a": rows[j]["a"], "b": rows[j]["b"], "mb_s": rates[j],
                              "note": f"{test}: {rows[j]['a']} -> {rows[j]['b']} {rates[j]:.1f} MB/s, the ring's "
                                      f"median {outliers.median_mad(rates)[0]:.1f}"})
        lines = [f"# findings ({len(names)} endpoints; {self.opts.slow_pct:g} % off the median and out of "
                 f"its spread; hosts by their median over all pairs):"]
        summary = self._summary(host_bw, host_lat, ctx.world.store_requests or 0)
        lines += [f"#   {s}" for s in summary]
        lines += [f"#   {f['kind']}: {f['note']}" for f in found] or ["#   no outliers: every host and link "
                                                                      "within the threshold"]
        rows = [{"test": "finding", **f} for f in found]
        rows += [{"test": "summary", "note": s} for s in summary]
        return lines, rows

    def _host_bw(self) -> list[float]:
        """Each endpoint's median bandwidth to the others (NaN where none was measured)."""
        return [float(np.nanmedian(row)) if np.isfinite(row).any() else np.nan for row in self.bw]

    def _slow_hosts(self, share: float) -> set[int]:
        """Endpoints whose median bandwidth stands out low and that were still slower than a control
        pair when measured again (or could not be: too few ordinary hosts)."""
        return {i for i in self._suspects(latency=False) if slow_again(self.bw_again.get(i), share, low=True)}

    def _slow_links(self, share: float) -> list[tuple[int, int, float]]:
        """(a, b, what both reach with the others) for pairs that stand out low among all pairs and are
        slower by ``share`` than both their hosts, where neither host is slow itself (a bad cable)."""
        host_bw = self._host_bw()
        slow_hosts = self._slow_hosts(share)
        k = len(self.names)
        pairs = [(a, b) for a in range(k) for b in range(a + 1, k) if np.isfinite(self.bw[a, b])]
        out = []
        for j in outliers.outliers([self.bw[a, b] for a, b in pairs], share, low=True):
            a, b = pairs[j]
            expect = min(host_bw[a], host_bw[b])
            if a not in slow_hosts and b not in slow_hosts and self.bw[a, b] < expect * (1 - share):
                out.append((a, b, expect))
        return out

    def _summary(self, host_bw: list[float], host_lat: list[float], requests_now: int) -> list[str]:
        seconds, requests = time.monotonic() - self.start[0], requests_now - self.start[1]
        measured = int(np.isfinite(self.bw).sum() // 2) + sum(len(r) for r in self.rings.values()) + \
            sum(c["pairs"] for c in self.cuts)
        out = [f"{seconds:.1f} s; the rendezvous answered {requests} requests ({requests / max(seconds, 1e-9):.0f}/s, "
               f"{requests / max(measured, 1):.0f} per pair or link measured)"]
        if np.isfinite(self.bw).any():
            out.append(f"pairwise: median {outliers.median_mad(host_bw)[0]:.1f} MB/s, "
                       f"{outliers.median_mad(host_lat)[0]:.2f} us; slowest pair {np.nanmin(self.bw):.1f} MB/s")
        for test, rows in self.rings.items():
            rates = [r["mb_s"] for r in rows if r["mb_s"] is not None]
            if rates:
                out.append(f"{test}: slowest link {min(rates):.1f} MB/s, median {float(np.median(rates)):.1f}")
        if self.cuts:
            totals = sorted(c["mb_s"] for c in self.cuts)
            per = [c["mb_s"] / max(c["pairs"], 1) for c in self.cuts]
            out.append(f"bisection over {len(totals)} cuts: worst {totals[0]:.1f} MB/s, median "
                       f"{float(np.median(totals)):.1f} ({min(per):.1f} / {float(np.median(per)):.1f} per pair)")
        return out


def _result(world: World, key: str, rank: int) -> dict:
    """Rank 0: the result a group's first rank published at key, or why it never will (it left the run)."""
    blob = world.wait_key(key, rank, patient=True, survivors=True)
    return json.loads(blob) if blob is not None else {"error": world.gone(rank) or "no result"}


def _short(error: str | None) -> str | None:
    """A failure's reason in one table cell."""
    if not error:
        return None
    return error if len(error) <= 90 else error[:87] + "..."


def recheck_plan(host_values: list[float], suspects: list[int]) -> list[list[int]]:
    """[suspect, host nearest the median, the next nearest] for each suspect endpoint (its latency or
    bandwidth stands out, as the finding decides): the suspect is measured again with the first, and the
    two ordinary hosts together as the control. Too few ordinary hosts: no plan (the finding stands)."""
    finite = [i for i, v in enumerate(host_values) if v == v]
    if not finite:
        return []
    med = float(np.median([host_values[i] for i in finite]))
    ordinary = sorted((i for i in finite if i not in suspects), key=lambda i: (abs(host_values[i] - med), i))
    return [[s, *ordinary[:2]] for s in suspects][:len(host_values)] if len(ordinary) >= 2 else []


def slow_again(again: tuple[float, float] | None, share: float, low: bool = False) -> bool:
    """Whether a suspect measured again (its pair, the control pair) is still slow by ``share``: latency
    above the control's by it, or (``low``) bandwidth below; no recheck (too few ordinary hosts): it
    stands."""
    if again is None:
        return True
    return again[0] < again[1] * (1 - share) if low else again[0] > again[1] * (1 + share)
