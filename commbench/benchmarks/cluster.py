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
from commbench.benchmarks.cluster_findings import (
    BW,
    LAT,
    RECHECK,
    Evidence,
    load_reference,
    read_evidence,
    same_cluster,
    verdict,
)
from commbench.benchmarks.p2p_bandwidth import BandwidthOptions, P2PBandwidth
from commbench.benchmarks.p2p_latency import P2PLatency
from commbench.core.analysis import topology
from commbench.core.config.argtypes import integer, number
from commbench.core.config.options import Options, opt
from commbench.core.config.run import CommonOptions, RunConfig
from commbench.core.errors import PeerError, RunAborted, UsageError
from commbench.core.measure.harness import BANDWIDTH_LOOPS, Loops, Side, Timing
from commbench.core.measure.message import Message
from commbench.core.measure.payload import Payload
from commbench.core.measure.sizes import parse_size
from commbench.core.output.table import Column, key
from commbench.core.run.collectives import Group
from commbench.core.run.world import World

TESTS = ("pairwise", "ring", "bisection")
TEST = Column("test", "Test", -15, doc="pairwise, recheck and recheck-latency (a suspect measured again alone: a "
              "probe pair through it, then a control pair; suspect tournament: the best pair alone, against the "
              "tournament's load), alone (where that load held the rounds back: each host alone beside the best), "
              "ring-ordered, ring-random, bisection, bisection-cut (a cut's total), finding or summary")
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


def also(opts: ClusterOptions, common: CommonOptions) -> list[tuple[str, type, Options]]:
    """The transports --transports adds to -t's: (name, class, default options), each able to run the
    cluster's tests and usable here. MPI must start the ranks, so a list with mpi needs -t mpi."""
    from commbench import transports

    names = [t.strip() for t in opts.transports.split(",") if t.strip()]
    if not names:
        return []
    registry = transports.registry()
    bad = [t for t in names if t not in registry]
    if bad:
        raise UsageError(f"--transports {opts.transports}: no transport {bad[0]!r}; choose from {', '.join(registry)}")
    if "mpi" in names and common.transport != "mpi":
        raise UsageError(f"--transports {opts.transports}: mpi needs MPI to start the ranks: give -t mpi (the others "
                         "are measured beside it)")
    out = []
    for name in dict.fromkeys(names):
        if name == common.transport:
            continue
        cls = registry[name]
        net = cls.Options()
        missing = {"call", "stream", "exchange"} - cls.able(net)
        if missing:
            raise UsageError(f"--transports {name}: the {name} transport cannot {', '.join(sorted(missing))} as "
                             "cluster needs; leave it out")
        cls.check_usable(net)
        out.append((name, cls, net))
    return out


def tree_cut(names: list[str], live: list[int], topo, k: int) -> tuple[list[int] | None, list[int] | None]:
    """The k-th cut along the tree (k = 0, 1, ...): one child of a switch (top switches first) against
    its siblings, each host below it paired with one below them, so every pair climbs through that
    child's uplink (ClusterKit's cuts by switch distance); (None, None) once every child has had its
    cut (the remaining cuts are random halves)."""
    children: dict[str | None, list[str]] = {}
    for c, p in topo.parent.items():
        children.setdefault(p, []).append(c)
    roots = sorted({topo.chain(s)[-1] for s in topo.switches()})
    if len(roots) > 1:
        children[None] = roots
    order = sorted((p for p, cs in children.items() if len(cs) > 1),
                   key=lambda p: (0 if p is None else len(topo.chain(p)), str(p)))
    cuts = [(p, g) for p in order for g in sorted(children[p])]
    if k >= len(cuts):
        return None, None
    parent, child = cuts[k]
    def below(g: str) -> list[int]:
        return [i for i in live if g in topo.chain(topo.switch_of[names[i]])]
    left = below(child)
    right = [i for g in sorted(children[parent]) if g != child for i in below(g)]
    n = min(len(left), len(right))
    return (left[:n], right[:n]) if n else (None, None)


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
                    help="bisection cuts (default 5; with --topology the first along the tree, then random "
                         "halves): the worst and the median are reported")
    slow_pct: float = opt(25.0, type=number(above=0, hi=99, what=" (percent)"),
                          help="a host, switch, uplink or cable is a finding when its pairs are this much slower than "
                               "the reference (the median host's) and stand out of the spread (default 25; latency: "
                               "twice this much above)")
    transports: str = opt("", metavar="T1,T2",
                          help="measure every pair over each of these transports too, in the same round (e.g. "
                               "tcp,mpi; -t's first, each other with its default options): a fault on every "
                               "transport is the fabric or a cable, on one a host's stack")
    baseline: str = opt("", metavar="OLD",
                        help="an earlier cluster run's results file: the findings add what changed since, beyond the "
                             "noise of both runs (commbench diff does it offline)")
    reference: str = opt("", metavar="REF",
                         help="expected values per class of links (CSV link,metric,expected,warn_pct,fail_pct): each "
                              "class's median pair is checked against them")
    topology: str = opt("", metavar="FILE",
                        help="where the hosts hang: Slurm's topology.conf (SwitchName= Nodes= Switches=) or a "
                             "host,switch CSV; findings then name switches and uplinks (commbench hosts up --racks "
                             "writes one)")


class Cluster(Benchmark):
    name = "cluster"
    help = ("cluster evaluation: latency and bandwidth between every pair of hosts, rings, bisection; names the "
            "slow host, cable or dead node (as ClusterKit)")
    units = ("Lat = p50 one-way latency (us) of a --lat-size ping-pong; MB/s = 10^6 B/s of a --window of --bw-size "
             "messages (osu_bw); ring: each endpoint's receive rate; bisection: each pair's rate, and a cut's: all its "
             "pairs' bytes over the slowest pair's time (osu_mbw_mr)")
    metric, better = "mb_s", "higher"
    tolerant = True
    size_options = "--lat-size and --bw-size"
    columns = [Column("round", "Round", 5, "{:d}", "count", "the round (tournament round, cut number; rings: 1)",
                      optional=True),
               Column("a", "From", -14, doc="the first endpoint's host (a ring: the sender)", optional=True),
               Column("b", "To", -14, doc="the second endpoint's host (a ring: the receiver)", optional=True),
               Column("lat_us", "Lat(us)", 10, US, "us", "median one-way latency of the pair", optional=True),
               Column("mb_s", "MB/s", 10, MBS, "MB/s", "the pair's or link's bandwidth; a cut: all its pairs' bytes "
                      "over the slowest pair's time (every pair sends the same count after one barrier)",
                      optional=True), WRONG,
               Column("note", "Note", -1, doc="what went wrong, or a finding's or summary's text", optional=True)]
    keys = [TEST, key("a_rank", doc="rank standing for host a", optional=True),
            key("b_rank", doc="rank standing for host b", optional=True),
            key("lat_p99_us", "us", "99th percentile one-way latency of the pair", optional=True),
            key("error", doc="the pair's fault in full (a rank that died or stopped)", optional=True),
            key("min_mb_s", "MB/s", "a cut's slowest pair", optional=True),
            key("pairs", "count", "pairs in a cut", optional=True),
            key("failed", "count", "pairs of a cut that failed", optional=True),
            key("kind", doc="a finding's kind: slow-host, slow-switch, slow-uplink, slow-group (hosts that share "
                "what no topology names), slow-link (a cable), each also as -latency; slow-ring-link, failed",
                optional=True),
            key("via", doc="the transport of a pair measured over --transports' others (rows without it: -t's)",
                optional=True),
            key("suspect", doc="a recheck's suspect: host NAME, switch NAME, uplink NAME, group HOSTLIST or cable "
                "A - B", optional=True),
            key("role", doc="a recheck's pair: probe (through the suspect) or control (hosts no suspect concerns)",
                optional=True),
            key("ratio", "ratio", "a finding's effect: its pairs' median as a share of the reference (bandwidth; "
                "latency: reference over it)", optional=True),
            key("ratio_lo", "ratio", "the effect's 95 % interval, low end (bootstrap)", optional=True),
            key("ratio_hi", "ratio", "the effect's 95 % interval, high end (bootstrap)", optional=True)]

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
        also(opts, common)  # checked before any rank starts
        if opts.topology:  # read before any rank starts: a bad file is one line, exit 2
            topology.load(opts.topology)
        if opts.reference:
            load_reference(opts.reference)
        if opts.baseline:
            read_evidence(opts.baseline)
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
        self.evidence = Evidence([])  # rank 0: every row measured, the findings' only source
        self.extra = [(name, cls, dataclasses.replace(config, net=net, poll=cls.default_poll(net)))
                      for name, cls, net in also(o, c)]  # other transports each pair is measured over
        self.plan: dict | None = None  # rank 0: the endpoints and the topology, decided once (metadata, measure)
        self.baseline = None  # rank 0: (--baseline's file, its run, its evidence), read once by decide
        self.expected = None  # rank 0: --reference's values, read once by decide
        self.start = (0.0, 0)  # when the tests began, and rank 0's rendezvous requests by then

    def peers(self, world: World) -> list[int]:
        return []  # every pair connects in a group of its own

    @classmethod
    def size_column(cls, meta: dict) -> Column:
        return TEST

    @classmethod
    def header(cls, meta: dict) -> list[str]:
        o = meta["options"]
        lines = super().header(meta)
        if meta.get("imported"):  # another tool's pairs (mpiGraph): its own header says how it measured
            return lines
        lines[2] = (f"# pairwise: {'one pair at a time (--serial)' if o.get('serial') else 'round-robin tournament'}, "
                    f"ping-pong of {o.get('lat_size')} B ({o.get('iterations') or 1000} iterations), "
                    f"window of {o.get('window')} x {o.get('bw_size')} B for {o.get('bw_time'):g} s; "
                    f"tests: {o.get('tests')}; endpoints: --per-host {o.get('per_host')}; "
                    f"findings: {o.get('slow_pct'):g} % below the reference" +
                    (f", topology {o.get('topology')}" if o.get("topology") else ""))
        return lines

    def progress(self, world: World) -> tuple[int, str]:
        k = len(set(world.hosts)) if self.opts.per_host in ("auto", "first") else world.size
        k = world.size if k < 2 else k
        total = (k * (k - 1) // 2 if "pairwise" in self.tests else 0) + (2 * k if "ring" in self.tests else 0) + \
            ((k // 2 + 1) * self.opts.cuts if "bisection" in self.tests else 0)
        return total, "rows"

    # -- the schedule ---------------------------------------------------------------------
    def decide(self, world: World) -> dict:
        """Rank 0: the endpoints, their names and where they hang (--topology), or why not."""
        if self.plan is None:
            try:
                chosen = endpoints(world.hosts, self.opts.per_host)
                names = labels(world.hosts, chosen)
                plan: dict = {"chosen": chosen, "names": names}
                if self.opts.topology:
                    topo = topology.load(self.opts.topology).for_hosts([world.hosts[r] for r in chosen])
                    plan["topology"] = {"switch_of": {n: topo.switch_of[world.hosts[r]]
                                                      for n, r in zip(names, chosen, strict=True)},
                                        "parent": topo.parent}
                if self.opts.baseline:  # before anything is measured: a baseline of other hosts is bad input
                    self.baseline = (self.opts.baseline, *read_evidence(self.opts.baseline))
                    same_cluster(self.baseline[2].names, names, f"--baseline {self.opts.baseline}")
                if self.opts.reference:
                    self.expected = load_reference(self.opts.reference)
            except UsageError as exc:
                plan = {"error": str(exc)}
            self.plan = plan
        return self.plan

    def metadata(self, world: World) -> dict:
        """The endpoints, their topology and the expected values (--reference), kept with the results
        so that the verdict and the report's colours are made again from the file alone."""
        plan = self.decide(world)
        meta = {k: plan[k] for k in ("topology",) if k in plan}
        if "names" in plan:
            meta["endpoints"] = plan["names"]
        if self.expected:
            meta["expected"] = [dataclasses.asdict(x) for x in self.expected]
        return meta

    def measure(self, ctx: Context) -> Iterator[tuple[Payload, dict | None]]:
        world = ctx.world
        plan = world.bcast_json("cluster-plan", self.decide(world) if world.rank == 0 else None)
        if "error" in plan:
            if world.rank == 0:
                raise UsageError(plan["error"])
            raise RunAborted(plan["error"], 2)
        self.start = (time.monotonic(), world.store_requests or 0)
        self.chosen, self.names = plan["chosen"], plan["names"]
        topo = topology.Topology.from_json(plan["topology"], "--topology") if "topology" in plan else None
        self.evidence = Evidence(self.names, topo, ctx.transport.name)
        k = len(self.chosen)
        rng = np.random.default_rng(self.common.seed)
        for test in self.tests:
            if test == "pairwise":
                rounds = serial(k) if self.opts.serial else tournament(k)
                for r, pairs in enumerate(rounds, 1):
                    yield from self._pairs(ctx, "pairwise", r, pairs, latency=True)
                if not self.opts.serial and k >= 4:
                    yield from self._load_check(ctx)
                for via in (None, *(name for name, _, _ in self.extra)):
                    yield from self._recheck(ctx, BW, via)
                    yield from self._recheck(ctx, LAT, via)
            elif test == "ring":
                yield from self._ring(ctx, "ring-ordered", list(range(k)))
                yield from self._ring(ctx, "ring-random", random_ring(rng, k))
            else:
                for c in range(1, self.opts.cuts + 1):
                    live = self._live(ctx)
                    left, right = tree_cut(self.names, live, topo, c - 1) if topo else (None, None)
                    if left is None:  # random halves (and the rest of the cuts beside the tree's)
                        order = [live[int(i)] for i in rng.permutation(len(live))]
                        half = len(order) // 2
                        left, right = order[:half], order[half:2 * half]
                    yield from self._cut(ctx, c, left, right)

    def _load_check(self, ctx: Context) -> Iterator[tuple[Payload, dict | None]]:
        """A tournament's rounds share the hosts' CPUs (and, emulated, this machine's): a pair of the
        best hosts measured alone says whether the rounds were held back by their own load; if so,
        every host is measured alone beside the best one (N - 1 pairs, one at a time), so that a slow
        host hidden among pairs as slow as it is still found (LinkTest's serial re-test)."""
        world = ctx.world
        best = self.evidence.best_pair() if world.rank == 0 else None
        best = world.bcast_json("cluster-load-pair", list(best) if best else None)
        if not best:
            return
        yield from self._pairs(ctx, RECHECK[BW], 0, [tuple(best)], latency=False,  # type: ignore[list-item]
                               extra={"suspect": "tournament", "role": "control"})
        live = self._live(ctx)
        star = None
        if world.rank == 0 and self.evidence.load_bound(self.opts.slow_pct):
            b0, b1 = best
            star = [[b0, i] for i in live if i not in (b0, b1)]
        star = world.bcast_json("cluster-star", star)
        for n, (a, b) in enumerate(star or [], 1):
            yield from self._pairs(ctx, "alone", n, [(a, b)], latency=False)

    def _recheck(self, ctx: Context, measure: str, via: str | None = None) -> Iterator[tuple[Payload, dict | None]]:
        """Measure each suspect again (cluster_findings.py): a probe pair through it alone, then a
        control pair of hosts no suspect concerns, so a tournament's cross-traffic or a busy moment is
        not named: a slow NIC, cable or uplink is slow again."""
        rnd = 0
        for second in (False, True):
            plan = None
            if ctx.world.rank == 0:
                ev = self.evidence if via is None else self.evidence.via.get(via)
                plan = [[s, list(p), list(c)] for s, p, c in
                        (ev.recheck_plan(measure, self.opts.slow_pct, second) if ev else [])]
            n = "-2" if second else ""
            for suspect, probe, control in ctx.world.bcast_json(f"cluster-{measure}-{via}-suspects{n}",
                                                                 plan):  # type: ignore[union-attr]
                for role, (a, b) in ((("control", control), ("probe", probe)) if second else
                                     (("probe", probe), ("control", control))):
                    rnd += 1
                    yield from self._pairs(ctx, RECHECK[measure] + (f"-{via}" if via else ""), rnd, [(a, b)],
                                           latency=measure == LAT,
                                           extra={"suspect": suspect, "role": role + n,  # the row's test: plain
                                                  **({"via": via, "test": RECHECK[measure]} if via else {})})

    def _live(self, ctx: Context) -> list[int]:
        """Rank 0's word on which endpoints (indices) are still alive, the same on every rank."""
        world = ctx.world
        gone = world.departed() if world.rank == 0 else {}  # one request, not one per endpoint
        live = [i for i, r in enumerate(self.chosen) if r == 0 or r not in gone] if world.rank == 0 else None
        return list(world.bcast_json("cluster-live", live))  # type: ignore[arg-type]

    def _pairs(self, ctx: Context, test: str, rnd: int, pairs: list[tuple[int, int]],
               latency: bool, extra: dict | None = None) -> Iterator[tuple[Payload, dict | None]]:
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
            over = next(((cls, config) for name, cls, config in self.extra if name == (extra or {}).get("via")),
                        (None, None))
            got = self._measure_pair(ctx, group, latency, *over)
            if test == "pairwise" and self.extra and "error" not in got:
                got["via"] = {name: self._measure_pair(ctx, Group(world, [chosen[a], chosen[b]],
                                                                  f"{test}.{rnd}.{a}.{b}.{name}"),
                                                       latency, cls, config)
                              for name, cls, config in self.extra}
            if group.rank == 0:
                world.store.set(f"cluster/{test}/{rnd}/{a}", json.dumps(got).encode())
        if world.rank != 0:
            return
        rows = []
        for a, b in pairs:
            got = _result(world, f"cluster/{test}/{rnd}/{a}", chosen[a])
            row = {"test": test, "round": rnd, "a": self.names[a], "b": self.names[b], "a_rank": chosen[a],
                   "b_rank": chosen[b], "lat_us": got.get("lat_us"), "lat_p99_us": got.get("lat_p99_us"),
                   "mb_s": got.get("mb_s"), "wrong": got.get("wrong"),
                   "note": _short(got.get("error")) or (f"via {extra['via']}" if extra and extra.get("via") else None),
                   **(extra or {})}
            if "error" in got:
                row["error"] = got["error"]
            rows.append(row)
            for name, other in (got.get("via") or {}).items():  # the same pair over --transports' others
                rows.append({**row, "lat_us": other.get("lat_us"), "lat_p99_us": other.get("lat_p99_us"),
                             "mb_s": other.get("mb_s"), "wrong": other.get("wrong"), "via": name,
                             "note": _short(other.get("error")) or f"via {name}",
                             **({"error": other["error"]} if "error" in other else {})})  # (-t's pair had none)
        world.store.forget(f"cluster/{test}/{rnd}/")  # the round's results, all read
        for row in rows:
            self.evidence.add(row)
            yield self.bw_payload, row

    def _in_group(self, ctx: Context, group: Group, peers: set[int], work, cls=None,
                  config: RunConfig | None = None) -> dict:
        """A transport (-t's, or ``cls`` with ``config``) on ``group`` connected to ``peers``,
        ``work(transport, links)`` done over it, and closed once every member is done (a send may be
        written but not yet delivered). A peer's fault is the result, and the group hears of it, so no
        member waits on this one."""
        transport = (cls or type(ctx.transport))(group, dataclasses.replace(config or self.config, ranks=group.size))
        try:
            got = work(transport, transport.connect(peers))
            group.barrier("done", patient=True)
            return got
        except PeerError as exc:
            group.fail(str(exc))
            return {"error": str(exc)}
        finally:
            transport.close()

    def _measure_pair(self, ctx: Context, group: Group, latency: bool, cls=None,
                      config: RunConfig | None = None) -> dict:
        """This rank's part of one pair: latency (if asked) and bandwidth (over ``cls`` if given)."""
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
        return self._in_group(ctx, group, {1 - group.rank}, work, cls, config)

    def _context(self, ctx: Context, group, transport, links, loops: Loops) -> Context:
        config = self.pair_config if group.size == 2 else dataclasses.replace(self.config, ranks=group.size)
        return Context(group, transport, links, config, loops, ctx.validate, ctx.seed, ctx.corrupt_every, ctx.quiet)

    def _ring(self, ctx: Context, test: str, order: list[int]) -> Iterator[tuple[Payload, dict | None]]:
        """Every live endpoint in ``order`` (indices) sends to the next while receiving from the one before."""
        live = set(self._live(ctx))
        order = [i for i in order if i in live]
        members = [self.chosen[i] for i in order]
        n = len(members)
        got = self._one_group(ctx, test, members, lambda r: {(r + 1) % n, (r - 1) % n}, self.ring)
        if got is None:
            return
        rows = []
        for pos, i in enumerate(order):
            prev = order[pos - 1]
            rate = got["links"][pos] if "links" in got else None
            rows.append({"test": test, "round": 1, "a": self.names[prev], "b": self.names[i],
                         "a_rank": self.chosen[prev], "b_rank": self.chosen[i], "mb_s": rate,
                         "note": _short(got.get("error"))})
        for row in rows:
            self.evidence.add(row)
            yield self.bw_payload, row

    def _one_group(self, ctx: Context, test: str, members: list[int], peers, step) -> dict | None:
        """Every member in one group (a ring, a cut), ``step`` measured over each one's ``peers(group
        rank)`` after a barrier of the ranks still alive: rank 0 gets the group's result (its first
        rank's, or why it failed), the others None."""
        world = ctx.world
        world.barrier(test, patient=True, survivors=True)
        if world.rank in members:
            group = Group(world, members, test)
            got = self._in_group(ctx, group, peers(group.rank), lambda transport, links: measure_point(
                self._context(ctx, group, transport, links, self.bw_loops), step, self.bw_payload) or {})
            if group.rank == 0:
                world.store.set(f"cluster/{test}", json.dumps(got).encode())
        if world.rank != 0:
            return None
        return _result(world, f"cluster/{test}", members[0])

    def _cut(self, ctx: Context, c: int, left: list[int], right: list[int]) -> Iterator[tuple[Payload, dict | None]]:
        """One bisection cut: left[i] streams to right[i], all pairs in one group (Cut)."""
        members = [self.chosen[i] for i in left + right]
        k = len(left)
        cut = Cut(dataclasses.replace(self.config, ranks=2 * k, bench=BandwidthOptions(window=self.opts.window,
                                                                                       pairs=k)))
        got = self._one_group(ctx, f"bisection.{c}", members, lambda r: {r + k if r < k else r - k}, cut)
        if got is None:
            return
        links = got.get("links") or [None] * len(left)
        rows = [{"test": "bisection", "round": c, "a": self.names[a], "b": self.names[b], "a_rank": self.chosen[a],
                 "b_rank": self.chosen[b], "mb_s": rate, "wrong": got.get("wrong"), "note": _short(got.get("error")),
                 **({"error": got["error"]} if "error" in got else {})}
                for a, b, rate in zip(left, right, links, strict=True)]
        rates = [r for r in links if r is not None]
        rows.append({"test": "bisection-cut", "round": c, "a": f"{len(left)} pairs", "b": "", "mb_s": got.get("mb_s"),
                     "min_mb_s": min(rates, default=None),
                     "note": f"slowest pair {min(rates):.1f} MB/s" if rates else "no pair measured",
                     "pairs": len(left), "failed": len(left) - len(rates)})
        for row in rows:
            self.evidence.add(row)
            yield self.bw_payload, row

    # -- findings -------------------------------------------------------------------------
    def conclude(self, ctx: Context) -> tuple[list[str], list[dict]]:
        seconds, requests = time.monotonic() - self.start[0], (ctx.world.store_requests or 0) - self.start[1]
        ev = self.evidence
        found, summary = verdict(ev, self.opts.slow_pct, self.baseline, self.expected)
        measured = int(np.isfinite(ev.bw).sum() // 2) + sum(len(r) for r in ev.rings.values()) + \
            sum(c.get("pairs") or 0 for c in ev.cuts)
        summary.insert(0, f"{seconds:.1f} s; the rendezvous answered {requests} requests "
                          f"({requests / max(seconds, 1e-9):.0f}/s, {requests / max(measured, 1):.0f} per pair or "
                          "link measured)")
        return findings_lines(len(self.names), self.opts.slow_pct, summary, found), \
            [{"test": "finding", **f} for f in found] + [{"test": "summary", "note": s} for s in summary]


def findings_lines(endpoints: int, slow_pct: float, summary: list[str], found: list[dict]) -> list[str]:
    """The block below the table (and what ``commbench findings`` prints)."""
    return [f"# findings ({endpoints} endpoints; {slow_pct:g} % below the reference (latency: {2 * slow_pct:g} % "
            "above), out of the spread, and again when measured alone):",
            *(f"#   {s}" for s in summary),
            *([f"#   {f['kind']}: {f['note']}" for f in found] or
              ["#   no outliers: every host, switch and link within the threshold"])]


def _result(world: World, key: str, rank: int) -> dict:
    """Rank 0: the result a group's first rank published at key, or why it never will (it left the run)."""
    blob = world.wait_key(key, rank, patient=True, survivors=True)
    return json.loads(blob) if blob is not None else {"error": world.gone(rank) or "no result"}


def _short(error: str | None) -> str | None:
    """A failure's reason in one table cell."""
    if not error:
        return None
    return error if len(error) <= 90 else error[:87] + "..."
