"""Cluster evaluation (as NVIDIA's ClusterKit, on any transport): latency and bandwidth between every
pair of hosts, ordered and random rings, bisection bandwidth, and the findings: the slow host, the
slow cable, the pair that failed.

One rank per host is the host's endpoint (``--per-host``). Pairwise runs as a round-robin tournament
(``N - 1`` rounds of ``N / 2`` disjoint pairs at once, the circle method) or ``--serial`` (one pair
at a time: no cross-traffic, ``N (N - 1) / 2`` turns). Rank 0 conducts: it hands each endpoint its
task and collects the results, one rendezvous request per rank per task (core/run/tasks.py). Each
pair is a group of two ranks of its own whose collectives go over the pair's own control connection
(core/run/link.py), never through rank 0: a transport is built for it, connects the two, measures
p2p-latency's ping-pong and p2p-bandwidth's window (the same code as those benchmarks) and closes,
so a rank holds one data connection at a time. A ring is one group of every endpoint, each sending a window to its
successor while receiving one from its predecessor. A bisection cut splits the endpoints into random
halves and pairs them across the cut, every pair streaming at once.

The run is tolerant: a rank that dies or stops is a finding, not the end (a row per pair it failed,
naming it); it is dropped and the rounds left planned again without it. Rank 0 serves the
rendezvous, and losing it ends the run. Rows are written as each round
is measured, so a run killed at round 400 keeps rounds 1-399.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import overload

import numpy as np

from commbench.benchmarks.base import WRONG, Benchmark, Context, measure_point
from commbench.benchmarks.p2p_bandwidth import BandwidthOptions, P2PBandwidth
from commbench.benchmarks.p2p_latency import P2PLatency
from commbench.core.analysis import kinds, topology
from commbench.core.analysis.evidence import BW, LAT, RECHECK, Evidence, placed, read_evidence
from commbench.core.analysis.verdict import findings_lines, load_reference, same_cluster, verdict
from commbench.core.config.argtypes import DURATION, integer, number
from commbench.core.config.options import Options, opt
from commbench.core.config.run import CommonOptions, RunConfig
from commbench.core.errors import PeerError, UsageError, say
from commbench.core.measure.harness import BANDWIDTH_LOOPS, Loops, Side, Timing
from commbench.core.measure.message import Message
from commbench.core.measure.payload import Payload
from commbench.core.measure.sizes import parse_size
from commbench.core.output.table import Column, key
from commbench.core.run.collectives import Group
from commbench.core.run.link import Control, LinkStore
from commbench.core.run.tasks import Dispatcher, Worker
from commbench.core.run.world import World

TESTS = ("pairwise", "ring", "bisection")
TEST = Column("test", "Test", -15, doc="pairwise, recheck and recheck-latency (a suspect measured again alone: a "
              "probe pair through it, then a control pair; suspect tournament: the best pair alone, against the "
              "tournament's load), alone (where that load held the rounds back: each host alone beside the best), "
              "ring-ordered, ring-random, bisection, bisection-cut (a cut's total), finding or summary")
US, MBS = "{:.2f}", "{:.1f}"
PAIRWISE_SHARE = 0.7  # --budget: of the time left after round 1, what the tournament's rounds may take


class Tournament(Sequence):
    """The round-robin tournament's rounds of disjoint pairs covering every pair of 0..n-1 once (the
    circle method: 0 stays, the others turn one place a round; odd n: one index sits each round out),
    each round made when asked for. Held whole it would be N^2/2 pairs: 50 million, 3.6 GB and 20 s
    of rank 0 at 10,000 endpoints."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.m = n + n % 2  # with a bye when n is odd (index n: no one)

    def __len__(self) -> int:
        return max(0, self.m - 1)

    def pairs_in(self, k: int) -> int:
        """How many pairs round k has (all alike: no round is made to count them)."""
        return self.n // 2

    @overload
    def __getitem__(self, k: int) -> list[tuple[int, int]]: ...

    @overload
    def __getitem__(self, k: slice) -> list[list[tuple[int, int]]]: ...

    def __getitem__(self, k):
        if isinstance(k, slice):
            return [self[i] for i in range(*k.indices(len(self)))]
        if k < 0:
            k += len(self)
        if not 0 <= k < len(self):
            raise IndexError(k)
        turn = self.m - 1
        seat = [0] + [1 + (j - 1 - k) % turn for j in range(1, self.m)]  # who sits where in round k
        pairs = [(seat[i], seat[self.m - 1 - i]) for i in range(self.m // 2)]
        return [(min(a, b), max(a, b)) for a, b in pairs if a != self.n and b != self.n]


def tournament(n: int) -> Tournament:
    return Tournament(n)


def serial(n: int) -> list[list[tuple[int, int]]]:
    """One pair a round: every pair of 0..n-1 in turn."""
    return [[(a, b)] for a in range(n) for b in range(a + 1, n)]


def replan(rounds: list[list[tuple[int, int]]], live: set[int],
           one_at_a_time: bool = False) -> tuple[list[list[tuple[int, int]]], list[tuple[int, int]]]:
    """The rounds left once endpoints are lost: (the new rounds over ``live``, the pairs left out). The
    pairs left are packed again greedily into rounds of disjoint pairs, in their old order, so a lost
    endpoint's partners fill its slots; never more rounds than the old plan without the lost pairs.
    ``one_at_a_time`` (--serial): one pair a round still."""
    kept = [[p for p in rnd if p[0] in live and p[1] in live] for rnd in rounds]
    skipped = [p for rnd in rounds for p in rnd if not (p[0] in live and p[1] in live)]
    kept = [rnd for rnd in kept if rnd]
    if one_at_a_time:
        return kept, skipped
    todo, packed = [p for rnd in kept for p in rnd], []
    while todo:
        busy: set[int] = set()
        now, later = [], []
        for a, b in todo:
            if a in busy or b in busy:
                later.append((a, b))
            else:
                now.append((a, b))
                busy |= {a, b}
        packed.append(now)
        todo = later
    return (packed if len(packed) < len(kept) else kept), skipped


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
    budget: float | None = opt(None, type=DURATION, metavar="TIME",
                               help="fit the run in TIME (90s, 10m, 1.5h): after round 1 the tournament keeps as many "
                                    "of its rounds as fit (chosen at random, --seed: every host meets as many others), "
                                    "rechecks, rings and cuts run while time is left, and the findings say what was "
                                    "left out")
    resume: str = opt("", metavar="FILE",
                      help="continue the cluster run in FILE (one killed part way, same options and hosts): its "
                           "measured rows are kept, not measured again, and only the rest is measured (-o may be "
                           "FILE itself where it is .jsonl, which is appended to)")
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
    imported_units = ("MB/s = 10^6 B/s per pair (converted from the tool's own unit), as the tool measured them "
                      "(mpiGraph: every rank streaming at once, a pair the mean of its two directions)")
    units = ("Lat = p50 one-way latency (us) of a --lat-size ping-pong; MB/s = 10^6 B/s of a --window of --bw-size "
             "messages (osu_bw); ring: each endpoint's receive rate; bisection: each pair's rate, and a cut's: all its "
             "pairs' bytes over the slowest pair's time (osu_mbw_mr)")
    metric, better = "mb_s", "higher"
    tolerant = True
    size_options = "--lat-size and --bw-size"
    payloads = False
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
            key("lost", doc="of a failed pair: its endpoint the run lost (died or stopped), given no more work "
                            "after", optional=True),
            key("min_mb_s", "MB/s", "a cut's slowest pair", optional=True),
            key("pairs", "count", "pairs in a cut", optional=True),
            key("failed", "count", "pairs of a cut that failed", optional=True),
            key("kind", doc=kinds.doc(), optional=True),
            key("via", doc="the transport of a pair measured over --transports' others (rows without it: -t's)",
                optional=True),
            key("suspect", doc="a recheck's suspect: host NAME, switch NAME, uplink NAME, group HOSTLIST or cable "
                "A - B", optional=True),
            key("role", doc="a recheck's pair: probe (through the suspect) or control (hosts no suspect concerns)",
                optional=True),
            key("resumed", doc="true: a row of the run --resume continued, kept as it was measured there",
                optional=True),
            key("ratio", "ratio", "a finding's effect: its pairs' median as a share of the reference (bandwidth; "
                "latency: reference over it)", optional=True),
            key("ratio_lo", "ratio", "the effect's 95 % interval, low end (bootstrap)", optional=True),
            key("ratio_hi", "ratio", "the effect's 95 % interval, high end (bootstrap)", optional=True)]

    Options = ClusterOptions
    opts: ClusterOptions  # its instance (self.opts)
    figure = "pairs"

    @classmethod
    def ranks(cls, opts: ClusterOptions, common: CommonOptions) -> int:
        tests = [t.strip() for t in opts.tests.split(",") if t.strip()]
        bad = [t for t in tests if t not in TESTS]
        if bad or not tests:
            raise UsageError(f"--tests {opts.tests!r}: choose from {', '.join(TESTS)} (comma-separated)")
        if "bisection" in tests and opts.cuts == 0:
            raise UsageError("--cuts 0 with --tests bisection: the bisection test would run no cut; give --cuts 1 or "
                             "more, or leave bisection out of --tests")
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
        if opts.resume:
            read_evidence(opts.resume)
            if common.output and Path(common.output).suffix == ".csv" and _same_file(common.output, opts.resume):
                raise UsageError(f"--resume {opts.resume} -o {common.output}: a CSV results file is written anew, so "
                                 "a run killed before its end would lose the rows it resumes: give -o another file, "
                                 "or resume into a .jsonl (appended to)")
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
        self.start = self.stop = (0.0, 0, 0)  # rank 0: when the tests began and ended, and its rendezvous's
        self.steps = 0  # requests and heartbeats by then; the pairs and links measured (tasks handed out)
        self.slowest = 0.0  # rank 0: the longest step so far (s), for the limit after which a rank is hung
        self.took = 0.0  # rank 0: the last step's wall time (s)
        self.rounds_cost = [0, 0, 0.0, 0.0]  # rank 0: pair rounds, pairs, wall s, s of their longest pairs' loops
        self.ends: float | None = None  # rank 0, --budget: when the run must be done (time.monotonic())
        self.left_out: dict[str, int] = {}  # rank 0, --budget: what was not measured for want of time, by test
        self.mpi = False  # rank 0: some pair is measured over MPI
        self.shrunk: set[int] = set()  # rank 0: the dead ranks MPI's world was shrunk around (or told it could not)
        self.events: list[str] = []  # rank 0: what happened to the run itself (an endpoint lost, the plan redone)
        self.ctl: dict[int, list] = {}  # rank 0: each rank's control listener, where its pairs are dialed
        self.tasks: Dispatcher | None = None  # rank 0: hands out the tasks
        self.replay: dict[tuple, list[dict]] = {}  # rank 0, --resume: the earlier run's rows by step (_step_key)
        self.resumed: dict | None = None  # rank 0, --resume: which run, and how many of its rows are kept

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
                    topo = placed(topology.load(self.opts.topology), names)
                    plan["topology"] = {"switch_of": topo.switch_of, "parent": topo.parent}
                if self.opts.baseline:  # before anything is measured: a baseline of other hosts is bad input
                    self.baseline = (self.opts.baseline, *read_evidence(self.opts.baseline))
                    same_cluster(self.baseline[2].names, names, f"--baseline {self.opts.baseline}")
                if self.opts.reference:
                    self.expected = load_reference(self.opts.reference)
                if self.opts.resume:
                    self._load_resume(names)
            except UsageError as exc:
                plan = {"error": str(exc)}
            self.plan = plan
        return self.plan

    def metadata(self, world: World) -> dict:
        """The endpoints, their topology and the expected values (--reference), kept with the results
        so that the verdict and the report's colours are made again from the file alone."""
        plan = self.decide(world)
        if "error" in plan:  # before the results file is opened: bad input leaves no run in it
            raise UsageError(plan["error"])
        meta = {k: plan[k] for k in ("topology",) if k in plan}
        if "names" in plan:
            meta["endpoints"] = plan["names"]
        if self.expected:
            meta["expected"] = [dataclasses.asdict(x) for x in self.expected]
        if self.resumed:
            meta["resumed"] = self.resumed
        return meta

    SAME = ("transport", "tests", "per_host", "serial", "lat_size", "bw_size", "window", "bw_time", "iterations",
            "warmup", "transports", "seed")  # what a resumed run must share with the run it continues

    def _load_resume(self, names: list[str]) -> None:
        """--resume: the earlier run's measured rows, by the step that measured them (UsageError where that
        run measured other hosts or otherwise)."""
        path = self.opts.resume
        run, _ = read_evidence(path)
        old, new = run.meta.get("options") or {}, self.config.options()
        differ = [k for k in self.SAME if old.get(k) != new.get(k)]
        if differ:
            k = differ[0]
            raise UsageError(f"--resume {path}: that run measured with --{k.replace('_', '-')} {old.get(k)}, this one "
                             f"{new.get(k)}: resume with the options it was started with")
        if run.meta.get("endpoints") != names:
            were = ", ".join((run.meta.get("endpoints") or [])[:3])
            raise UsageError(f"--resume {path}: that run's endpoints ({were}...) are not this run's "
                             f"({', '.join(names[:3])}...): resume on the same hosts")
        mine, steps = set(self.row_keys()), {}
        for row in run.rows:
            if row.get("test") not in ("finding", "summary"):
                steps.setdefault(_step_key(row), []).append({k: v for k, v in row.items() if k in mine} |
                                                            {"resumed": True})
        # a step whose own rows failed is measured again (a via row's failure is that transport's finding)
        self.replay = {k: rows for k, rows in steps.items()
                       if any(not r.get("via") for r in rows) and not any(r.get("error") and not r.get("via")
                                                                          for r in rows)}
        kept = sum(map(len, self.replay.values()))
        self.resumed = {"file": path, "run_id": run.meta.get("run_id"), "rows": kept}

    def measure(self, ctx: Context) -> Iterator[tuple[Payload, dict | None]]:
        """Rank 0 conducts: it decides every step from what it has measured and hands each endpoint
        its task (core/run/tasks.py); the other ranks do their tasks until told to end."""
        world = ctx.world
        if world.rank != 0:
            self._serve(ctx)
            return
        plan = self.decide(world)
        if "error" in plan:
            raise UsageError(plan["error"])
        self.chosen, self.names = plan["chosen"], plan["names"]
        topo = topology.Topology.from_json(plan["topology"], "--topology") if "topology" in plan else None
        self.evidence = Evidence(self.names, topo, ctx.transport.name, budgeted=self.opts.budget is not None)
        self.tasks, self.control = Dispatcher(world), Control(world)
        try:
            first = self.tasks.collect(range(1, world.size))  # each rank's control address
            self.ctl = {0: self.control.address, **{r: got.get("ctl") for r, got in first.items()}}
            self.mpi = "mpi" in {ctx.transport.name, *(name for name, _, _ in self.extra)}
            if not self.mpi:  # under MPI every rank stays to shrink the world should one die (ULFM)
                self.tasks.end(r for r in range(1, world.size) if r not in self.chosen)
            self.start = (time.monotonic(), *world.store_requests)
            self.ends = self.start[0] + self.opts.budget if self.opts.budget else None
            yield from self._tests(ctx, topo)
            self.stop = (time.monotonic(), *world.store_requests)  # the ranks' goodbyes are not the tests'
            self.tasks.end(r for r in range(1, world.size) if r in self.chosen or self.mpi)
        finally:
            self.control.close()

    def _tests(self, ctx: Context, topo) -> Iterator[tuple[Payload, dict | None]]:
        k = len(self.chosen)
        rng = np.random.default_rng(self.common.seed)
        for test in self.tests:
            if test == "pairwise":
                yield from self._pairwise(ctx)
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
                    live = self._live()
                    left, right = tree_cut(self.names, live, topo, c - 1) if topo else (None, None)
                    if left is None:  # random halves (and the rest of the cuts beside the tree's)
                        order = [live[int(i)] for i in rng.permutation(len(live))]
                        half = len(order) // 2
                        left, right = order[:half], order[half:2 * half]
                    yield from self._cut(ctx, c, left, right)

    def _pairwise(self, ctx: Context) -> Iterator[tuple[Payload, dict | None]]:
        """The tournament's rounds (or --serial's turns). An endpoint lost (died, or silent past its
        timeout) is dropped and the rounds left are planned again over the endpoints left, its pairs
        written as not measured rather than each waiting for it."""
        k = len(self.chosen)
        rounds: Sequence[list[tuple[int, int]]] = serial(k) if self.opts.serial else tournament(k)
        done = [(a, b) for rnd in rounds for a, b in rnd
                if _pair_key(self.names[a], self.names[b]) in self.replay] if self.replay else []
        if done:  # --resume: the pairs measured before are kept, the others planned into as few rounds as fit
            for a, b in done:
                yield from self._replayed(self.replay.pop(_pair_key(self.names[a], self.names[b])))
            left = set(done)
            rounds, _ = replan([[p for p in rnd if p not in left] for rnd in rounds], set(range(k)), self.opts.serial)
            self.events.append(f"resumed {self.opts.resume} (run {self.resumed['run_id']}): {len(done)} of "
                               f"{len(done) + sum(map(len, rounds))} pairs kept as measured there, the rest in "
                               f"{len(rounds)} round(s)")
        planned, rnd, began = len(rounds), 0, time.monotonic()
        at = 0  # the next of ``rounds`` (a tournament's are made one at a time, never held whole)
        while at < len(rounds):
            rnd += 1
            lost = set(self.tasks.lost)
            at += 1
            yield from self._pairs(ctx, "pairwise", rnd, rounds[at - 1], latency=True)
            if rnd == 1 and at < len(rounds):
                took = time.monotonic() - began
                say(f"cluster: pairwise round 1 of {planned} took {took:.1f} s: about {took * planned:.0f} s for "
                    f"the {'turns' if self.opts.serial else 'tournament'}")
                if self.ends is not None:
                    rounds, at = self._fit(rounds, at, took, planned), 0
            gone = [i for i, r in enumerate(self.chosen) if r in self.tasks.lost and r not in lost]
            if gone and at < len(rounds):
                live = set(self._live())
                old = len(rounds) - at
                rounds, skipped = replan(rounds[at:], live, self.opts.serial)
                at = 0
                names, why = ", ".join(self.names[i] for i in gone), self.tasks.lost[self.chosen[gone[0]]]
                self.events.append(f"lost {names} in pairwise round {rnd} of {planned} ({why}); "
                                   f"its {len(skipped)} pair(s) left not measured, the {sum(map(len, rounds))} others "
                                   f"planned again over the {len(live)} endpoints left: {len(rounds)} round(s) "
                                   f"where {old} were left")
                for a, b in skipped:
                    yield from self._rows("pairwise", rnd, [(a, b)], {(a, b): {"error": self._why_not(a, b)}})

    def _replayed(self, rows: list[dict]) -> Iterator[tuple[Payload, dict | None]]:
        for row in rows:
            self.evidence.add(row)
            yield self.bw_payload, row

    def _fit(self, rounds: Sequence[list[tuple[int, int]]], at: int, took: float,
             planned: int) -> Sequence[list[tuple[int, int]]]:
        """--budget: of the rounds from ``at`` on, those that fit in the pairwise share of the time left
        (the rechecks, rings and cuts need the rest), at ``took`` s a round; a random sample of whole
        rounds, so every host meets as many others."""
        left = len(rounds) - at
        afford = int(PAIRWISE_SHARE * max(0.0, self.ends - time.monotonic()) / max(took, 1e-3))  # type: ignore[operator]
        if afford >= left:
            return rounds[at:]
        rng = np.random.default_rng(self.common.seed)
        keep = sorted(rng.choice(left, size=afford, replace=False).tolist()) if afford else []
        count = rounds.pairs_in if isinstance(rounds, Tournament) else lambda i: len(rounds[i])
        dropped = sum(count(at + i) for i in range(left)) - sum(count(at + i) for i in keep)
        self.left_out["pairwise"] = dropped
        k = len(self.chosen)
        unit = "turns" if self.opts.serial else "rounds"
        met = "" if self.opts.serial else f"each endpoint met about {1 + afford} of its {k - 1} others, "
        self.events.append(f"budget {self.opts.budget:g} s: {1 + afford} of {planned} tournament {unit} fit (round 1 "
                           f"took {took:.1f} s), the others left out at random (--seed {self.common.seed}): {met}"
                           f"{dropped} of {k * (k - 1) // 2} pairs not measured")
        say(f"cluster: --budget {self.opts.budget:g} s: {1 + afford} of {planned} {unit} fit")
        return [rounds[at + i] for i in keep]

    def _over_budget(self, what: str, count: int = 1) -> bool:
        """--budget: True (and ``what`` counted as left out) when the next step would not end in time, at
        the slowest step's pace so far."""
        if self.ends is None or time.monotonic() + max(self.slowest, 0.1) <= self.ends:
            return False
        self.left_out[what] = self.left_out.get(what, 0) + count
        return True

    def _why_not(self, a: int, b: int) -> str:
        lost = [self.tasks.lost[r] for r in (self.chosen[a], self.chosen[b]) if r in self.tasks.lost]
        return f"not measured: {lost[0]}" if lost else "not measured"

    def _load_check(self, ctx: Context) -> Iterator[tuple[Payload, dict | None]]:
        """A tournament's rounds share the hosts' CPUs (and, emulated, this machine's): a pair of the
        best hosts measured alone says whether the rounds were held back by their own load; if so,
        every host is measured alone beside the best one (N - 1 pairs, one at a time), so that a slow
        host hidden among pairs as slow as it is still found (LinkTest's serial re-test)."""
        best = self.evidence.best_pair()
        if not best:
            return
        yield from self._pairs(ctx, RECHECK[BW], 0, [best], latency=False,
                               extra={"suspect": "tournament", "role": "control"})
        if not self.evidence.load_bound(self.opts.slow_pct):
            return
        b0, b1 = best
        for n, i in enumerate((i for i in self._live() if i not in best), 1):
            yield from self._pairs(ctx, "alone", n, [(b0, i)], latency=False)

    def _recheck(self, ctx: Context, measure: str, via: str | None = None) -> Iterator[tuple[Payload, dict | None]]:
        """Measure each suspect again (core/analysis/evidence.py): a probe pair through it alone, then a
        control pair of hosts no suspect concerns, so a tournament's cross-traffic or a busy moment is
        not named: a slow NIC, cable or uplink is slow again."""
        rnd = 0
        for second in (False, True):
            ev = self.evidence if via is None else self.evidence.via.get(via)
            n = "-2" if second else ""
            live = set(self._live())
            for suspect, probe, control in (ev.recheck_plan(measure, self.opts.slow_pct, second) if ev else []):
                if not {*probe, *control} <= live:
                    continue  # an endpoint lost since: its pairs are the finding already
                for role, (a, b) in ((("control", control), ("probe", probe)) if second else
                                     (("probe", probe), ("control", control))):
                    rnd += 1
                    yield from self._pairs(ctx, RECHECK[measure] + (f"-{via}" if via else ""), rnd, [(a, b)],
                                           latency=measure == LAT,
                                           extra={"suspect": suspect, "role": role + n,  # the row's test: plain
                                                  **({"via": via, "test": RECHECK[measure]} if via else {})})

    def _live(self) -> list[int]:
        """The endpoints (indices) still answering: a rank lost (died, or silent past its timeout) is
        given no more work."""
        self.tasks.refresh()
        return [i for i, r in enumerate(self.chosen) if r not in self.tasks.lost]

    # -- one step: tasks handed out, results collected -----------------------------------------
    def _step(self, ctx: Context, tasks: dict[int, dict]) -> dict[int, dict]:
        """Every task at once (rank 0 does its own meanwhile); each rank's result, or why it has none."""
        own = tasks.pop(0, None)
        began = time.monotonic()
        self.tasks.assign(tasks)
        got = {0: self._do(ctx, own, self.control)} if own is not None else {}
        # a rank still busy long after every wait of its task would have timed out is hung (an MPI call
        # to a peer that died does not time out): dropped, so one stuck rank does not hold the run
        limit = 3 * ctx.world.timeout + 10 * max(self.slowest, self.opts.bw_time + 1)
        got.update(self.tasks.collect(tasks, max(0.0, limit - (time.monotonic() - began))))
        self.took = time.monotonic() - began
        self.slowest = max(self.slowest, self.took)
        if self.mpi and self.tasks.died() - self.shrunk:
            self._shrink(ctx)
        return got

    def _shrink(self, ctx: Context) -> None:
        """A rank died under MPI: every rank left makes MPI's world anew without it (ULFM's shrink), so
        the communicators of later pairs can be made; without ULFM (mpiexec --with-ft ulfm --mca
        mpi_ft_detector true) the launcher has ended the job or MPI calls to the dead rank would hang."""
        from commbench.core.run import mpi_env

        dead = self.tasks.died() - self.shrunk
        self.shrunk |= dead
        names = ", ".join(ctx.world.describe(r) for r in sorted(dead))
        if not mpi_env.ulfm():
            self.events.append(f"{names} died: MPI has no fault tolerance in this run (start it with mpiexec "
                               "--with-ft ulfm --mca mpi_ft_detector true --mca mpi_ft_detector_timeout 60), so its "
                               "later pairs over MPI may fail")
            return
        began = time.monotonic()
        alive = [r for r in range(ctx.world.size) if r not in self.tasks.lost]
        own = {0: {"kind": "shrink"}} if 0 in alive else {}
        self.tasks.assign({r: {"kind": "shrink"} for r in alive if r != 0})
        if own:
            self._do(ctx, own[0], self.control)
        # MPI learns of the death within its detector's timeout (mpi_ft_detector_timeout, 60 s advised)
        others = self.tasks.collect([r for r in alive if r != 0], 3 * ctx.world.timeout + 120)
        failed = {r: g["error"] for r, g in others.items() if "error" in g}
        self.events.append(f"{names} died: MPI's world shrunk around it (ULFM) in {time.monotonic() - began:.1f} s"
                           + (f"; {len(failed)} rank(s) failed to: {next(iter(failed.values()))}" if failed else ""))

    def _serve(self, ctx: Context) -> None:
        """A rank other than 0: its tasks, one after the other, until rank 0 says the run is over."""
        control, worker = Control(ctx.world), Worker(ctx.world)
        try:
            result: dict = {"ctl": control.address}
            while (task := worker.next(result))["kind"] != "end":
                result = self._do(ctx, task, control)
        finally:
            control.close()

    def _do(self, ctx: Context, task: dict, control: Control) -> dict:
        if task["kind"] == "pair":
            return self._pair_task(ctx, task, control)
        if task["kind"] == "shrink":
            from commbench.core.run import mpi_env

            try:
                mpi_env.shrink(mpi_env.mpi())
            except Exception as exc:  # noqa: BLE001 (MPI's own error: reported, the run goes on)
                return {"error": f"MPI_Comm_shrink: {exc}"}
            return {}
        world, members = ctx.world, task["members"]
        group, n = Group(world, members, task["tag"]), len(members)
        if task["kind"] == "ring":
            peers, step = {(group.rank + 1) % n, (group.rank - 1) % n}, self.ring
        else:  # a bisection cut: the first half streams to the second
            k = n // 2
            peers = {group.rank + k if group.rank < k else group.rank - k}
            step = Cut(dataclasses.replace(self.config, ranks=2 * k,
                                           bench=BandwidthOptions(window=self.opts.window, pairs=k)))
        return self._in_group(ctx, group, peers, lambda transport, links: measure_point(
            self._context(ctx, group, transport, links, self.bw_loops), step, self.bw_payload) or {})

    def _pair_task(self, ctx: Context, task: dict, control: Control) -> dict:
        """This rank's part of one pair, synchronised over the pair's own connection (core/run/link.py):
        the first rank dials the second's control listener."""
        world, (ra, rb) = ctx.world, task["members"]
        try:
            sock, seal = control.dial(task["addr"], rb, task["tag"], world.timeout) if world.rank == ra else \
                control.accept(ra, task["tag"], world.timeout)
        except PeerError as exc:
            return {"error": str(exc)}
        link = LinkStore(sock, seal, world, rb if world.rank == ra else ra, world.timeout)
        try:
            over = next(((cls, config) for name, cls, config in self.extra if name == task["via"]), (None, None))
            got = self._measure_pair(ctx, Group(world, [ra, rb], task["tag"], link), task["latency"], *over)
            if task["also"] and self.extra and "error" not in got:
                got["via"] = {name: self._measure_pair(ctx, Group(world, [ra, rb], f"{task['tag']}.{name}", link),
                                                       task["latency"], cls, config)
                              for name, cls, config in self.extra}
            return got
        finally:
            link.close()

    def _pairs(self, ctx: Context, test: str, rnd: int, pairs: list[tuple[int, int]],
               latency: bool, extra: dict | None = None) -> Iterator[tuple[Payload, dict | None]]:
        """One round: every pair at once, each synchronised over its own connection; a pair's result is
        its first rank's, or why a rank of it was lost (died, or silent past its timeout)."""
        written = (extra or {}).get("test", test)
        if written != "pairwise" and self._over_budget(written, len(pairs)):
            return
        self.tasks.refresh()
        tasks, results = {}, {}
        for a, b in pairs:
            old = self.replay.pop(_step_key({"test": written, "round": rnd, "a": self.names[a],
                                             "b": self.names[b], **(extra or {})}), None)
            if old:  # --resume: measured by the run this one continues
                results[(a, b)] = old
                continue
            ra, rb = self.chosen[a], self.chosen[b]
            if ra in self.tasks.lost or rb in self.tasks.lost:
                results[(a, b)] = {"error": self._why_not(a, b)}
                continue
            task = {"kind": "pair", "tag": f"{test}.{rnd}.{a}.{b}", "members": [ra, rb], "latency": latency,
                    "via": (extra or {}).get("via"), "also": test == "pairwise"}
            tasks[ra], tasks[rb] = {**task, "addr": self.ctl[rb]}, task
            self.steps += 1
        measured = len(tasks) // 2  # (_step takes rank 0's own task out of ``tasks``)
        got = self._step(ctx, tasks)
        measuring = 0.0
        for a, b in pairs:
            if (a, b) not in results:
                first, second = got[self.chosen[a]], got[self.chosen[b]]
                lost = first if first.get("lost") else second if second.get("lost") else None
                results[(a, b)] = {"error": lost["error"]} if lost else first
                measuring = max(measuring, float(first.get("measure_s") or 0.0))
        if measured:  # what the round cost beyond its longest pair's measurements: dial, set-up, barriers, results
            add = (1, measured, self.took, measuring)
            self.rounds_cost = [x + y for x, y in zip(self.rounds_cost, add, strict=True)]
        yield from self._rows(test, rnd, pairs, results, extra)

    def _rows(self, test: str, rnd: int, pairs: list[tuple[int, int]], results: dict,
              extra: dict | None = None) -> Iterator[tuple[Payload, dict | None]]:
        rows = []
        for a, b in pairs:
            got = results[(a, b)]
            if isinstance(got, list):  # rows kept from the run --resume continues
                rows += got
                continue
            row = {"test": test, "round": rnd, "a": self.names[a], "b": self.names[b], "a_rank": self.chosen[a],
                   "b_rank": self.chosen[b], "lat_us": got.get("lat_us"), "lat_p99_us": got.get("lat_p99_us"),
                   "mb_s": got.get("mb_s"), "wrong": got.get("wrong"),
                   "note": _short(got.get("error")) or (f"via {extra['via']}" if extra and extra.get("via") else None),
                   **(extra or {})}
            if "error" in got:
                row["error"] = got["error"]
                gone = [i for i in (a, b) if self.tasks is not None and self.chosen[i] in self.tasks.lost]
                if gone:
                    row["lost"] = self.names[gone[0]]
            rows.append(row)
            for name, other in (got.get("via") or {}).items():  # the same pair over --transports' others
                rows.append({**row, "lat_us": other.get("lat_us"), "lat_p99_us": other.get("lat_p99_us"),
                             "mb_s": other.get("mb_s"), "wrong": other.get("wrong"), "via": name,
                             "note": _short(other.get("error")) or f"via {name}",
                             **({"error": other["error"]} if "error" in other else {})})  # (-t's pair had none)
        for row in rows:
            self.evidence.add(row)
            yield self.bw_payload, row

    def _in_group(self, ctx: Context, group: Group, peers: set[int], work, cls=None,
                  config: RunConfig | None = None) -> dict:
        """A transport (-t's, or ``cls`` with ``config``) on ``group`` connected to ``peers``,
        ``work(transport, links)`` done over it, and closed once every member is done (a send may be
        written but not yet delivered). A peer's fault is the result, and the group hears of it, so no
        member waits on this one."""
        kind = cls or type(ctx.transport)
        faults = tuple(getattr(ctx.transport, "peer_faults", ())) if kind is type(ctx.transport) else ()
        try:  # an MPI communicator of the pair is made here: after a peer's death under ULFM that can fail
            transport = kind(group, dataclasses.replace(config or self.config, ranks=group.size))
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

    def _measure_pair(self, ctx: Context, group: Group, latency: bool, cls=None,
                      config: RunConfig | None = None) -> dict:
        """This rank's part of one pair: latency (if asked) and bandwidth (over ``cls`` if given)."""
        def work(transport, links) -> dict:
            got: dict = {"wrong": 0}
            began = time.monotonic()
            if latency:
                row = measure_point(self._context(ctx, group, transport, links, self.lat_loops), self.latency,
                                    self.lat_payload)
                if row is not None:
                    got.update(lat_us=row["p50_us"], lat_p99_us=row["p99_us"], wrong=row["wrong"])
            row = measure_point(self._context(ctx, group, transport, links, self.bw_loops), self.bandwidth,
                                self.bw_payload)
            if row is not None:
                got.update(mb_s=row["mb_s"], wrong=got["wrong"] + row["wrong"])
            got["measure_s"] = time.monotonic() - began  # its loops, warm-up included: the rest is the round's cost
            return got
        return self._in_group(ctx, group, {1 - group.rank}, work, cls, config)

    def _context(self, ctx: Context, group, transport, links, loops: Loops) -> Context:
        config = self.pair_config if group.size == 2 else dataclasses.replace(self.config, ranks=group.size)
        return Context(group, transport, links, config, loops, ctx.validate, ctx.seed, ctx.corrupt_every, ctx.quiet)

    def _ring(self, ctx: Context, test: str, order: list[int]) -> Iterator[tuple[Payload, dict | None]]:
        """Every live endpoint in ``order`` (indices) sends to the next while receiving from the one before."""
        live = set(self._live())
        order = [i for i in order if i in live]
        old = self.replay.pop(_step_key({"test": test, "round": 1}), None)
        if old and len(old) == len(order):  # --resume: this ring was measured by the run this one continues
            yield from self._replayed(old)
            return
        if self._over_budget(test, len(order)):
            return
        got = self._one_group(ctx, "ring", test, order)
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

    def _one_group(self, ctx: Context, kind: str, test: str, order: list[int]) -> dict:
        """Every endpoint in ``order`` (indices) in one group (a ring, a cut) measuring at once; the
        group's result (its first rank's, or why that rank was lost)."""
        members = [self.chosen[i] for i in order]
        task = {"kind": kind, "tag": test, "members": members}
        self.steps += len(members) // 2 if kind == "cut" else len(members)
        got = self._step(ctx, {m: task for m in members})[members[0]]
        return {"error": got["error"]} if got.get("lost") else got

    def _cut(self, ctx: Context, c: int, left: list[int], right: list[int]) -> Iterator[tuple[Payload, dict | None]]:
        """One bisection cut: left[i] streams to right[i], all pairs in one group (Cut)."""
        old = self.replay.pop(_step_key({"test": "bisection", "round": c}), None)
        if old and any(r["test"] == "bisection-cut" for r in old):  # --resume: measured by the run continued
            yield from self._replayed(old)
            return
        if self._over_budget("bisection", len(left)):
            return
        got = self._one_group(ctx, "cut", f"bisection.{c}", left + right)
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

    def failed(self) -> bool:
        return bool(self.tasks and self.tasks.lost)

    # -- findings -------------------------------------------------------------------------
    def conclude(self, ctx: Context) -> tuple[list[str], list[dict]]:
        seconds = self.stop[0] - self.start[0]
        requests, beats = self.stop[1] - self.start[1], self.stop[2] - self.start[2]
        found, summary = verdict(self.evidence, self.opts.slow_pct, self.baseline, self.expected)
        if self.left_out:
            self.events.append(f"budget {self.opts.budget:g} s: left out for want of time: " +
                               ", ".join(f"{n} {t} {'pair or link' if n == 1 else 'pairs or links'}"
                                         for t, n in self.left_out.items()))
        summary[:0] = self.events
        summary.insert(0, f"{seconds:.1f} s; the rendezvous answered {requests} requests "
                          f"({requests / max(seconds, 1e-9):.0f}/s): {(requests - beats) / max(self.steps, 1):.1f} "
                          f"per pair or link measured ({self.steps}), and {beats} heartbeats")
        rounds, pairs, wall, measuring = self.rounds_cost
        if pairs:
            summary.insert(1, f"pair rounds: {rounds} ({pairs} pairs) took {wall:.1f} s, {measuring:.1f} s of it their "
                              f"longest pair's measuring: {(wall - measuring) / rounds * 1e3:.0f} ms a round, "
                              f"{(wall - measuring) / pairs * 1e3:.0f} ms a pair beyond its measurements "
                              "(connecting, set-up, barriers, results)")
        return findings_lines(len(self.names), self.opts.slow_pct, summary, found), \
            [{"test": "finding", **f} for f in found] + [{"test": "summary", "note": s} for s in summary]


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:  # -o not there yet: another file
        return False


def _pair_key(a: str, b: str) -> tuple:
    return ("pairwise", *sorted((a, b)))


def _step_key(row: dict) -> tuple:
    """The step of the run that measures a row, as --resume finds it again: a tournament's pair (in any
    round: a resumed run plans its rounds anew), a ring, a bisection cut (its pairs and its total), or a
    recheck's or alone pair by its round, pair, transport and role."""
    test = row.get("test")
    if test == "pairwise":
        return _pair_key(str(row.get("a")), str(row.get("b")))
    if test in ("ring-ordered", "ring-random"):
        return (test,)
    if test in ("bisection", "bisection-cut"):
        return ("bisection", row.get("round"))
    return (test, row.get("round"), row.get("a"), row.get("b"), row.get("via"), row.get("role"))


def _short(error: str | None) -> str | None:
    """A failure's reason in one table cell."""
    if not error:
        return None
    return error if len(error) <= 90 else error[:87] + "..."
