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

import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from commbench.benchmarks._cluster.conductor import Conductor, Rows
from commbench.benchmarks._cluster.fabric import Fabric, RankFabric
from commbench.benchmarks._cluster.resume import Resume, same_options
from commbench.benchmarks._cluster.schedule import Budget, endpoints, labels
from commbench.benchmarks._cluster.tests import TESTS as DECLARED
from commbench.benchmarks._cluster.tests import Plan, step_key
from commbench.benchmarks._cluster.worker import PairWorker, Setup
from commbench.benchmarks.base import WRONG, Benchmark, Context
from commbench.core.analysis import kinds, topology
from commbench.core.analysis.evidence import Evidence, placed, read_evidence
from commbench.core.analysis.verdict import Expected, findings_lines, load_reference, same_cluster, verdict
from commbench.core.config.argtypes import DURATION, integer, number
from commbench.core.config.options import Options, opt
from commbench.core.config.run import CommonOptions, RunConfig
from commbench.core.errors import UsageError
from commbench.core.measure.harness import Loops
from commbench.core.measure.payload import Payload
from commbench.core.measure.sizes import parse_size
from commbench.core.output.results import Run
from commbench.core.output.table import Column, key
from commbench.core.run.link import Control
from commbench.core.run.world import World
from commbench.transports.base import LOSS_KEYS, Transport

TESTS = ("pairwise", "ring", "bisection")
FABRICS = ("ranks", "sim")
TEST = Column("test", "Test", -15, doc="pairwise, recheck, recheck-latency and recheck-loss (a suspect measured "
              "again alone: a probe pair through it, then a control pair; an uplink's as many pairs at once as it "
              "has hosts; suspect tournament: the best pair alone, against the tournament's load), alone (where that "
              "load held the rounds back: each host alone beside the best), ring-ordered, ring-random, bisection, "
              "bisection-cut (a cut's total), finding or summary")
US, MBS = "{:.2f}", "{:.1f}"
def also(opts: ClusterOptions, common: CommonOptions) -> list[tuple[str, type[Transport], Options]]:
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
    fabric: str = opt("ranks", choices=FABRICS,
                      help="what is measured: ranks (the run's, over -t; default) or sim: a simulated fabric on "
                           "SimGrid, one process, the hosts and their faults from --scenario or --topology (rehearse "
                           "a run's schedule, time and findings before booking the nodes)")
    scenario: str = opt("", metavar="FILE",
                        help="with --fabric sim: the platform and its faults, a JSON file (hosts or topology, rate, "
                             "uplink, oversubscription, latency, faults, seed; docs/cluster.md)")


class Cluster(Benchmark[ClusterOptions]):
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
            key("ratio_hi", "ratio", "the effect's 95 % interval, high end (bootstrap)", optional=True),
            key("loss_pct", "%", "a lossy finding's share of its pairs' segments TCP sent again", optional=True),
            *LOSS_KEYS]

    Options = ClusterOptions
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
        n = cls._simulated(opts, common) if opts.fabric == "sim" else cls._ranked(opts, common)
        also(opts, common)  # checked before any rank starts
        if opts.topology and opts.fabric != "sim":  # read before any rank starts: a bad file is one line, exit 2
            topology.load(opts.topology)
        if opts.reference:
            load_reference(opts.reference)
        if opts.baseline:
            read_evidence(opts.baseline)
        if opts.resume:  # its options too, before any rank starts: one line from this process, exit 2
            run, _ = read_evidence(opts.resume)
            if common.output and Path(common.output).suffix == ".csv" and _same_file(common.output, opts.resume):
                raise UsageError(f"--resume {opts.resume} -o {common.output}: a CSV results file is written anew, so "
                                 "a run killed before its end would lose the rows it resumes: give -o another file, "
                                 "or resume into a .jsonl (appended to)")
            same_options(opts.resume, run.meta.get("options") or {}, {**common.plain(), **opts.plain()})
        return n

    @classmethod
    def _ranked(cls, opts: ClusterOptions, common: CommonOptions) -> int:
        """The run's ranks: how many (--np, else --hosts, else 4)."""
        if opts.scenario:
            raise UsageError("--scenario describes a simulated fabric: add --fabric sim, or leave --scenario out")
        if common.hosts == 1:
            raise UsageError("--hosts 1: a cluster of one host has no links to test; use --hosts 2 or more")
        n = common.np if common.np is not None else (common.hosts or 4)
        if n < 2:
            raise UsageError(f"cluster needs two ranks or more, not --np {n}")
        ph = opts.per_host
        if common.hosts and ph.isdigit():  # the local launcher puts rank r in host r mod --hosts
            fewest = n // common.hosts
            if int(ph) >= fewest:
                raise UsageError(f"--per-host {ph}: with --np {n} on --hosts {common.hosts} some host runs {fewest} "
                                 f"rank(s) (local index 0 to {fewest - 1}); pick a smaller index, first or all")
        return n

    @classmethod
    def _simulated(cls, opts: ClusterOptions, common: CommonOptions) -> int:
        """--fabric sim: one process measures the scenario's simulated hosts (its scenario and SimGrid
        checked before it starts)."""
        if opts.transports:
            raise UsageError("--transports with --fabric sim: the simulated fabric models the network, not a "
                             "transport's stack; leave --transports out")
        if common.hosts or (common.np not in (None, 1)):
            raise UsageError("--fabric sim runs one process; its hosts come from --scenario or --topology: leave "
                             "--np and --hosts out")
        if not opts.scenario and not opts.topology:
            raise UsageError("--fabric sim needs the hosts to simulate: --topology FILE, or --scenario FILE "
                             "(docs/cluster.md)")
        cls._scenario(opts)
        from commbench.emulators.simfabric import simgrid

        simgrid()
        return 1

    @staticmethod
    def _scenario(opts: ClusterOptions):
        from commbench.emulators.simfabric import Scenario, load_scenario

        topo = topology.load(opts.topology) if opts.topology else None
        if opts.scenario:
            return load_scenario(opts.scenario, topo)
        assert topo is not None
        return Scenario(topo)

    @classmethod
    def needs(cls, opts: ClusterOptions, common: CommonOptions) -> frozenset[str]:
        return frozenset({"call", "stream", "exchange"})

    @classmethod
    def plan_points(cls, opts: ClusterOptions,
                    common: CommonOptions) -> tuple[list[Payload], str | None] | None:
        lat, bw = parse_size(opts.lat_size, "--lat-size"), parse_size(opts.bw_size, "--bw-size")
        if bw == 0:
            raise UsageError("--bw-size must be at least 1 byte")
        return [Payload(str(lat), (lat,)), Payload(str(bw), (bw,))], None

    def __init__(self, config: RunConfig) -> None:
        super().__init__(config)
        o, c = self.opts, self.common
        self.tests = [t.strip() for t in o.tests.split(",") if t.strip()]
        lat_payload, bw_payload = config.points
        self.setup = Setup(config, o.window, lat_payload, bw_payload,
                           Loops(c.iterations or 1000, 100 if c.warmup is None else c.warmup),
                           Loops(time=o.bw_time, warmup_time=min(0.2, o.bw_time / 4)),
                           [(name, cls, replace(config, net=net, poll=cls.default_poll(net)))
                            for name, cls, net in also(o, c)])  # other transports each pair is measured over
        self.names: list[str] = []
        self.evidence = Evidence([])  # rank 0: every row measured, the findings' only source
        self.plan: dict | None = None  # rank 0: the endpoints and the topology, decided once (metadata, measure)
        self.baseline: tuple[str, Run, Evidence] | None = None  # rank 0: (--baseline's file, its run, its evidence)
        self.expected: list[Expected] | None = None  # rank 0: --reference's values (both read once by decide)
        self.resume = Resume(step_key)  # rank 0: --resume's rows, read once by decide
        self.budget = Budget(o.budget, c.seed, o.serial)
        self.conductor: Conductor | None = None  # rank 0, while it measures
        self.scenario = None  # rank 0 of --fabric sim: the scenario, read once by decide
        # rank 0: when the tests began and ended, and its rendezvous's requests and heartbeats by then
        self.start = self.stop = (0.0, 0, 0)

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
        sc = meta.get("scenario")
        if o.get("fabric") == "sim" and isinstance(sc, dict):
            lines[1] = (f"# fabric: simulated on SimGrid {meta.get('simgrid', '?')}: {sc.get('hosts')} hosts, "
                        f"{sc.get('switches')} switches, {len(sc.get('faults') or [])} fault(s)"
                        f"{'' if sc.get('known') else ', the topology not told to the run'}; times are the "
                        "simulation's")
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
                if self.opts.fabric == "sim":
                    sc = self.scenario = self._scenario(self.opts)
                    names, chosen = sc.hosts, list(range(len(sc.hosts)))
                    plan: dict = {"chosen": chosen, "names": names, "scenario": sc.as_json()}
                    if sc.known or self.opts.topology:
                        plan["topology"] = {"switch_of": sc.topology.switch_of, "parent": sc.topology.parent}
                else:
                    chosen = endpoints(world.hosts, self.opts.per_host)
                    names = labels(world.hosts, chosen)
                    plan = {"chosen": chosen, "names": names}
                if self.opts.topology and self.opts.fabric != "sim":
                    topo = placed(topology.load(self.opts.topology), names)
                    plan["topology"] = {"switch_of": topo.switch_of, "parent": topo.parent}
                if self.opts.baseline:  # before anything is measured: a baseline of other hosts is bad input
                    self.baseline = (self.opts.baseline, *read_evidence(self.opts.baseline))
                    same_cluster(self.baseline[2].names, names, f"--baseline {self.opts.baseline}")
                if self.opts.reference:
                    self.expected = load_reference(self.opts.reference)
                if self.opts.resume:
                    self.resume = Resume.load(self.opts.resume, names, self.config.options(), set(self.row_keys()),
                                              step_key)
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
        meta = {k: plan[k] for k in ("topology", "scenario") if k in plan}
        if "scenario" in plan:
            from commbench.emulators.simfabric import simgrid

            version = simgrid().simgrid_version
            meta["simgrid"] = version if isinstance(version, str) else ".".join(map(str, version))
        if "names" in plan:
            meta["endpoints"] = plan["names"]
        if self.expected:
            meta["expected"] = [asdict(x) for x in self.expected]
        if self.resume.resumed:
            meta["resumed"] = self.resume.resumed
        return meta

    def measure(self, ctx: Context) -> Iterator[tuple[Payload, dict | None]]:
        """Rank 0 conducts: it decides every step from what it has measured and hands each endpoint
        its task (core/run/tasks.py); the other ranks do their tasks until told to end."""
        world, control = ctx.world, Control(ctx.world)
        worker = PairWorker(ctx, self.setup, control)
        try:
            if world.rank != 0:
                worker.serve()
                return
            plan = self.decide(world)
            if "error" in plan:
                raise UsageError(plan["error"])
            chosen, self.names = plan["chosen"], plan["names"]
            if self.opts.fabric == "sim":
                yield from self._simulate(ctx.transport.name, plan, world)
                return
            fabric = RankFabric(worker, chosen, self.opts.bw_time)
            fabric.mpi = "mpi" in {ctx.transport.name, *(name for name, _, _ in self.setup.extra)}
            fabric.start(control.address, range(1, world.size))
            yield from self._conduct(fabric, ctx.transport.name, plan, world)
            fabric.end(range(1, world.size))
        finally:
            control.close()

    def _simulate(self, transport: str, plan: dict, world: World) -> Rows:
        from commbench.emulators.simfabric import Loops as Sent
        from commbench.emulators.simfabric import SimFabric

        s = self.setup
        assert self.scenario is not None  # read by decide
        fabric = SimFabric(self.scenario,
                           Sent(s.lat_payload.nbytes, s.lat_loops.iterations or 0, s.lat_loops.warmup or 0,
                                self.opts.bw_time, min(0.2, self.opts.bw_time / 4)))
        yield from fabric.run(lambda: self._conduct(fabric, transport, plan, world))

    def _conduct(self, fabric: Fabric, transport: str, plan: dict, world: World) -> Rows:
        """Every test's steps, measured through ``fabric``, as rows; the evidence kept for the verdict."""
        topo = topology.Topology.from_json(plan["topology"], "--topology") if "topology" in plan else None
        self.evidence = Evidence(self.names, topo, transport, budgeted=self.opts.budget is not None,
                                 serial=self.opts.serial)
        c = self.conductor = Conductor(fabric, self.setup.bw_payload, self.names, self.evidence, self.budget,
                                       self.resume)
        self.start = (fabric.now(), *(world.store_requests or (0, 0)))
        self.budget.start(fabric.now)
        run = Plan(self.opts.serial, self.opts.slow_pct, self.opts.cuts, self.opts.resume, topo,
                   [name for name, _, _ in self.setup.extra], np.random.default_rng(self.common.seed))
        for test in self.tests:
            for declared in DECLARED[test]:
                yield from declared.run(c, run)
        self.stop = (fabric.now(), *(world.store_requests or (0, 0)))  # the ranks' goodbyes are not the tests'

    def failed(self) -> bool:
        return bool(self.conductor and self.conductor.fabric.lost())

    # -- findings -------------------------------------------------------------------------
    def conclude(self, ctx: Context) -> tuple[list[str], list[dict]]:
        c = self.conductor
        found, summary = verdict(self.evidence, self.opts.slow_pct, self.baseline, self.expected)
        events = [*c.events, *c.fabric.events(), *filter(None, [self.budget.summary()])] if c else []
        costs = c.cost_lines(self.stop[0] - self.start[0], self.stop[1] - self.start[1],
                             self.stop[2] - self.start[2]) if c else []
        summary[:0] = [*costs, *events]
        return findings_lines(len(self.names), self.opts.slow_pct, summary, found), \
            [{"test": "finding", **f} for f in found] + [{"test": "summary", "note": s} for s in summary]


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:  # -o not there yet: another file
        return False
