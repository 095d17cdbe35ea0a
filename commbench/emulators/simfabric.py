"""The simulated fabric: the cluster's plan measured on SimGrid (flow-level network models with
contention, validated against real clusters) instead of on ranks, so that the same planner and
verdict run on clusters no machine here holds, and a cluster run can be rehearsed on the cluster's
topology file before its nodes are booked.

A scenario (``Scenario``, from a JSON file or made by bench/'s generator) says the platform and its
faults: the hosts under their switches (a topology file, or N hosts in K racks under a spine), each
host's link rate, each switch's uplink rate (default: non-blocking, the sum of what is below it, over
``oversubscription``), each link's latency; faults as a share of line rate for a host's link, a cable
(one pair of hosts, their other pairs not: as ``commbench hosts up --cable``), a switch's uplink or a
whole switch (its hosts' links and its uplink), and latency added to a host's link.

Each switch is a SimGrid star zone whose gateway's route to its parent crosses the switch's uplink;
each host's link is its route to its switch (split duplex: each direction its own rate, as a
full-duplex link). A round measures its pairs at once, so cross-traffic shares links as on a fabric:
latency is the time of one ``--lat-size`` message over the pair's route (all the round's pairs at
once), bandwidth each pair's bytes over ``--bw-time`` while every pair of the round streams. A cable
is a cap on its pair's flows (SimGrid rates a flow through a mailbox; a host-to-host flow cannot be
capped).

SimGrid runs one simulation per process: its engine drives the conductor in an actor, and the rows
come out to the caller as they are measured.
"""

from __future__ import annotations

import json
import math
import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from commbench.benchmarks._cluster.fabric import Fabric, Pair, PairStep
from commbench.core.analysis.topology import Topology, load
from commbench.core.errors import UsageError
from commbench.core.output.results import read_text_file
from commbench.launch.hosts import parse_rate

FAULT_KINDS = {"host": "a host's link at a share of line rate", "cable": "one pair of hosts at a share of line rate",
               "uplink": "a switch's uplink at a share of its rate",
               "switch": "a whole switch (its hosts' links and its uplink) at a share of line rate",
               "latency": "latency added to a host's link (add, e.g. 50us)"}
KEYS = {"hosts", "racks", "topology", "known", "rate", "uplink", "oversubscription", "latency", "faults", "seed",
        "noise"}
NOISE = Path(__file__).with_name("fabric_noise.json")  # made by bench/noise_model.py on emulated hosts
NOISES = ("none", "quiet", "busy")
MAX_HOSTS = 100_000
MAX_FAULTS = 10_000


@dataclass(frozen=True)
class Fault:
    """A fault with its ground truth: where (a host; a cable's two hosts; a switch), how bad."""

    kind: str
    at: tuple[str, ...]
    share: float = 1.0  # of line rate (0 < share < 1)
    add_s: float = 0.0  # latency added (s)


@dataclass
class Scenario:
    """A simulated fabric: its topology (told to the run as --topology where ``known``), rates in B/s,
    link latency in s, its faults and the seed of its random draws."""

    topology: Topology
    rate: float = 1.25e9  # 10 Gbit/s
    uplink: float | None = None  # every switch's uplink (None: non-blocking over ``oversubscription``)
    oversubscription: float = 1.0
    latency: float = 2e-6
    faults: list[Fault] = field(default_factory=list)
    seed: int | None = None
    known: bool = True
    noise: str = "none"  # none, or the measured spread of a quiet or a busy machine's healthy pairs

    @property
    def hosts(self) -> list[str]:
        return list(self.topology.switch_of)

    def uplink_of(self, switch: str, below: int) -> float:
        """A switch's uplink rate: as given, else the rates of the ``below`` hosts under it over the
        oversubscription."""
        return self.uplink if self.uplink is not None else self.rate * below / self.oversubscription

    def as_json(self) -> dict:
        """What a results file keeps of it (the metadata's ``scenario``)."""
        return {"hosts": len(self.hosts), "switches": len(self.topology.switches()), "rate_B_s": self.rate,
                "uplink_B_s": self.uplink, "oversubscription": self.oversubscription, "latency_s": self.latency,
                "faults": [asdict(f) for f in self.faults], "seed": self.seed, "known": self.known,
                "noise": self.noise}


def racks(n: int, k: int, source: str = "scenario") -> Topology:
    """N hosts n0..n{N-1} in K racks (rack0..) of N/K hosts each under one spine (``hosts up --racks``'s
    layout: host i in rack i // (N / K))."""
    if k < 1 or n < 2 or n % k:
        raise UsageError(f"{source}: {n} hosts in {k} racks: give 2 hosts or more, a whole number per rack")
    per = n // k
    switch_of = {f"n{i}": f"rack{i // per}" if k > 1 else "switch0" for i in range(n)}
    return Topology(switch_of, {f"rack{r}": "spine" for r in range(k)} if k > 1 else {})


def _share(v: Any, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < 1:
        raise UsageError(f"{where}: share {v!r} is not a share of line rate above 0 and below 1 (e.g. 0.5)")
    return float(v)


def _time(v: Any, where: str) -> float:
    units = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
    text = str(v).strip().lower()
    unit = next((u for u in ("ns", "us", "ms", "s") if text.endswith(u)), "s")
    try:
        value = float(text[:-len(unit)] if text.endswith(unit) else text) * units[unit]
    except ValueError:
        value = -1.0
    if not 0 <= value <= 10 or not math.isfinite(value):
        raise UsageError(f"{where}: {str(v)[:40]!r} is not a time from 0 to 10 s (e.g. 2us, 50us, 1ms)")
    return value


def _fault(item: Any, topo: Topology, where: str) -> Fault:
    if not isinstance(item, dict) or not isinstance(item.get("kind"), str) or item["kind"] not in FAULT_KINDS:
        raise UsageError(f"{where}: a fault is {{\"kind\": K, \"at\": ..., \"share\": S}} with K one of "
                         f"{', '.join(FAULT_KINDS)}")
    kind, at = item["kind"], item.get("at")
    unknown = set(item) - {"kind", "at", "share", "add"}
    if unknown:
        raise UsageError(f"{where}: {sorted(unknown)[0][:30]!r} is not a fault's key (kind, at, share, add)")
    names = tuple(at) if kind == "cable" and isinstance(at, list) else (at,)
    if not all(isinstance(x, str) for x in names) or len(names) != (2 if kind == "cable" else 1):
        raise UsageError(f"{where}: a {kind} fault's \"at\" is " + ("two hosts, [\"A\", \"B\"]" if kind == "cable" else
                         "a switch's name" if kind in ("uplink", "switch") else "a host's name"))
    known = set(topo.switches()) if kind in ("uplink", "switch") else set(topo.switch_of)
    bad = next((x for x in names if x not in known), None)
    if bad is not None:
        what = "switch" if kind in ("uplink", "switch") else "host"
        raise UsageError(f"{where}: {kind} fault at {bad[:40]!r}: no such {what} in the scenario's topology")
    if kind == "cable" and names[0] == names[1]:
        raise UsageError(f"{where}: a cable joins two hosts, not {names[0]} with itself")
    if kind == "uplink" and names[0] not in topo.parent and len([s for s in topo.switches()
                                                                 if s not in topo.parent]) < 2:
        raise UsageError(f"{where}: switch {names[0]} is the top of the tree: no traffic crosses its uplink")
    if kind == "latency":
        if "add" not in item:
            raise UsageError(f"{where}: a latency fault says how much it adds: \"add\": \"50us\"")
        return Fault(kind, names, 1.0, _time(item["add"], where))
    return Fault(kind, names, _share(item.get("share"), where))


def scenario_from(data: Any, source: str, topology: Topology | None = None) -> Scenario:
    """A scenario from its JSON form (checked: one UsageError naming the problem). ``topology``
    (--topology's) is the platform where the scenario names none."""
    if not isinstance(data, dict):
        raise UsageError(f"{source}: a scenario is a JSON object (hosts or topology, rate, faults, ...)")
    unknown = sorted(set(data) - KEYS)
    if unknown:
        raise UsageError(f"{source}: {unknown[0][:30]!r} is not a scenario key ({', '.join(sorted(KEYS))})")
    if "topology" in data:
        if not isinstance(data["topology"], str):
            raise UsageError(f"{source}: \"topology\" is a file (Slurm's topology.conf or a host,switch CSV)")
        topo = load(str(Path(source).parent / data["topology"]))
    elif "hosts" in data:
        n, k = data["hosts"], data.get("racks", 1)
        if not all(isinstance(x, int) and not isinstance(x, bool) for x in (n, k)) or not 2 <= n <= MAX_HOSTS:
            raise UsageError(f"{source}: \"hosts\" is a count from 2 to {MAX_HOSTS} and \"racks\" a count dividing it")
        topo = racks(n, k, source)
    elif topology is not None:
        topo = topology
    else:
        raise UsageError(f"{source}: say the platform: \"hosts\": N (and \"racks\": K), or \"topology\": FILE "
                         "(or give --topology)")
    rates = {}
    for k in ("rate", "uplink"):
        if k in data:
            bits = parse_rate(str(data[k]), f"{source} {k}") if isinstance(data[k], str) else None
            if bits is None:
                raise UsageError(f"{source}: \"{k}\" is a rate in tc's notation, e.g. \"10gbit\"")
            rates[k] = bits / 8
    over = data.get("oversubscription", 1)
    if isinstance(over, bool) or not isinstance(over, (int, float)) or not 1 <= over <= 1000:
        raise UsageError(f"{source}: \"oversubscription\" is a ratio from 1 (non-blocking) to 1000")
    faults = data.get("faults", [])
    if not isinstance(faults, list) or len(faults) > MAX_FAULTS:
        raise UsageError(f"{source}: \"faults\" is a list of at most {MAX_FAULTS} faults")
    seed = data.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63):
        raise UsageError(f"{source}: \"seed\" is a whole number from 0")
    noise = data.get("noise", "none")
    if noise not in NOISES:
        raise UsageError(f"{source}: \"noise\" is one of {', '.join(NOISES)} (the spread measured on emulated hosts "
                         "of a quiet or a busy machine)")
    return Scenario(topo, rates.get("rate", 1.25e9), rates.get("uplink"), float(over),
                    _time(data.get("latency", "2us"), f"{source} latency"),
                    [_fault(f, topo, f"{source} fault {i + 1}") for i, f in enumerate(faults)], seed,
                    bool(data.get("known", True)), noise)


def load_scenario(path: str, topology: Topology | None = None) -> Scenario:
    text = read_text_file(path, "scenario file (JSON)")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"--scenario {path}: not JSON ({exc.msg} at line {exc.lineno})") from None
    return scenario_from(data, f"--scenario {path}", topology)


def simgrid():
    """SimGrid's Python module, or one UsageError saying how to install it."""
    try:
        import simgrid as sg
    except ImportError:
        raise UsageError("--fabric sim needs SimGrid's Python module: run bash launchers/setup.sh --dev (it installs "
                         "Debian's python3-simgrid and links it into the venv)") from None
    return sg


class Platform:
    """The scenario's platform built in SimGrid: each switch a star zone, each host's link its route
    to its switch, each switch's uplink its gateway's route to its parent."""

    def __init__(self, sg, sc: Scenario) -> None:
        self.sg, self.sc = sg, sc
        topo = sc.topology
        self.children: dict[str, list[str]] = {}
        for c, p in topo.parent.items():
            self.children.setdefault(p, []).append(c)
        self.hosts_of: dict[str, list[str]] = {}
        for h, s in topo.switch_of.items():
            self.hosts_of.setdefault(s, []).append(h)
        self.factor = {("host", f.at[0]): f.share for f in sc.faults if f.kind == "host"}
        self.factor.update({("uplink", f.at[0]): f.share for f in sc.faults if f.kind == "uplink"})
        for f in sc.faults:
            if f.kind == "switch":
                self.factor[("uplink", f.at[0])] = f.share
                for h in self.hosts_of.get(f.at[0], []):
                    self.factor[("host", h)] = f.share
        self.added = {f.at[0]: f.add_s for f in sc.faults if f.kind == "latency"}
        self.caps = {frozenset(f.at): f.share * sc.rate for f in sc.faults if f.kind == "cable"}
        self.host: dict[str, Any] = {}
        top = sg.NetZone.create_star_zone("fabric")
        for root in [s for s in topo.switches() if s not in topo.parent]:
            self._switch(root, top)
        top.seal()

    def _below(self, switch: str) -> int:
        return len(self.hosts_of.get(switch, [])) + sum(self._below(c) for c in self.children.get(switch, []))

    def _switch(self, s: str, parent) -> None:
        sg, sc = self.sg, self.sc
        up_dir = sg.LinkInRoute.Direction.UP
        zone = sg.NetZone.create_star_zone(f"switch:{s}")
        zone.set_parent(parent)
        gateway = zone.create_router(f"gateway:{s}")
        for h in self.hosts_of.get(s, []):
            host = zone.create_host(h, 1e9)
            link = zone.create_split_duplex_link(f"link:{h}", sc.rate * self.factor.get(("host", h), 1.0))
            link.set_latency(sc.latency + self.added.get(h, 0.0))
            zone.add_route(host.netpoint, None, None, None, [sg.LinkInRoute(link, up_dir)], True)
            self.host[h] = host
        for c in self.children.get(s, []):
            self._switch(c, zone)
        zone.seal()
        rate = sc.uplink_of(s, self._below(s)) * self.factor.get(("uplink", s), 1.0)
        uplink = parent.create_split_duplex_link(f"uplink:{s}", rate).set_latency(sc.latency)
        parent.add_route(zone.netpoint, None, gateway, None, [sg.LinkInRoute(uplink, up_dir)], True)


class _Flow:
    """One stream from host a to host b: a host-to-host communication, or where its pair is capped (a
    cable fault) one through a mailbox between two actors, which SimGrid can rate."""

    def __init__(self, sg, a, b, size: int, cap: float | None, name: str) -> None:
        self.size = size
        self.comm = None
        if cap is None:
            self.comm = sg.Comm.sendto_async(a, b, size)
            return
        box = sg.Mailbox.by_name(name)

        def send() -> None:
            self.comm = box.put_init(None, size).set_rate(cap).start()
            try:
                self.comm.wait()
            except Exception:  # noqa: BLE001 (cancelled: the measurement is over)
                return

        def receive() -> None:
            try:
                box.get()
            except Exception:  # noqa: BLE001 (cancelled with the send)
                return
        sg.Actor.create(f"{name}.send", a, send)
        sg.Actor.create(f"{name}.recv", b, receive)

    def remaining(self) -> float:
        return float(self.comm.remaining) if self.comm is not None else float(self.size)

    def cancel(self) -> None:
        if self.comm is not None:
            self.comm.cancel()


@dataclass(frozen=True)
class Loops:
    """What a pair's measurement sends, as the live run's: ``iterations`` ping-pongs of ``lat_size``
    bytes after ``warmup``, then ``bw_time`` s of streaming after ``bw_warmup`` s."""

    lat_size: int
    iterations: int
    warmup: int
    bw_time: float
    bw_warmup: float


class Noise:
    """What a healthy pair's measurement draws, as shares of the run's median (bench/noise_model.py,
    measured on emulated hosts): a pair of the tournament's rounds, or a pair alone. Each draw is its
    own (a round's pairs are not drawn together: on emulated hosts a round's median is within its
    pairs' spread). ``none``: every share 1."""

    def __init__(self, load: str, seed: int | None) -> None:
        self.rng = np.random.default_rng(seed)
        self.q: dict[str, list[float]] = {}
        if load != "none":
            try:
                self.q = json.loads(NOISE.read_text())["quantiles"][load]
            except (OSError, KeyError, ValueError):
                raise UsageError(f"noise {load!r}: {NOISE.name} holds no measured spread for it; run bench/"
                                 "noise_model.py, or \"noise\": \"none\"") from None

    def _draw(self, name: str, n: int):
        q = self.q[name]
        return np.interp(self.rng.random(n) * (len(q) - 1), range(len(q)), q)

    def shares(self, measure: str, n: int):
        """n pairs measured at once: each one's share (bandwidth: of the median's rate; latency: the
        median's over its own, so both are below 1 when slower)."""
        if not self.q or n == 0:
            return [1.0] * n
        got = self._draw(f"{'alone' if n == 1 else 'pair'}_{measure}", n)
        return (got if measure == "bw" else 1.0 / got).tolist()


class SimFabric(Fabric):
    """The cluster's plan measured on a SimGrid platform: endpoint i is the scenario's i-th host."""

    where = "sim"

    def __init__(self, sc: Scenario, loops: Loops) -> None:
        self.sg, self.sc, self.loops = simgrid(), sc, loops
        # LV08's bandwidth factor (a TCP flow's share of a link's rate); no latency factor (its slow start
        # belongs to wide-area flows); no ACK traffic on the reverse path (skews max-min in rings)
        self.engine = self.sg.Engine(["commbench", "--log=root.thres:critical", "--log=xbt_cfg.thres:critical",
                                      "--cfg=network/optim:Full", "--cfg=network/latency-factor:1",
                                      "--cfg=network/crosstraffic:0"])
        self.platform = Platform(self.sg, sc)
        self.hosts = [self.platform.host[h] for h in sc.hosts]
        self.names = sc.hosts
        self.flows = 0
        self.noise = Noise(sc.noise, sc.seed)

    def now(self) -> float:
        return float(self.sg.Engine.clock)

    def rank(self, i: int) -> int:
        return i

    def lost(self) -> dict[int, str]:
        return {}

    def _flow(self, a: int, b: int, size: int) -> _Flow:
        self.flows += 1
        cap = self.platform.caps.get(frozenset((self.names[a], self.names[b])))
        return _Flow(self.sg, self.hosts[a], self.hosts[b], size, cap, f"flow{self.flows}")

    def _latency(self, pairs: list[Pair]) -> dict[Pair, float]:
        """One --lat-size message over each pair's route, all at once: its one-way time (s); then the
        rest of the ping-pongs' time passes. (A cable's cap is on rate: a small message's time is its
        route's.)"""
        began, sg = self.now(), self.sg
        keys = list(pairs)
        pending = [sg.Comm.sendto_async(self.hosts[a], self.hosts[b], max(1, self.loops.lat_size)) for a, b in keys]
        took: dict[Pair, float] = {}
        while pending:
            i = sg.Comm.wait_any(pending)
            took[keys.pop(i)] = self.now() - began
            pending.pop(i)
        slowest = max(took.values(), default=0.0)
        sg.this_actor.sleep_for(max(0.0, 2 * (self.loops.iterations + self.loops.warmup) * slowest - slowest))
        return took

    def _stream(self, pairs: list[Pair]) -> dict[Pair, float]:
        """Every pair streaming at once for the warm-up and --bw-time: each one's rate (B/s) over --bw-time."""
        size = int(self.sc.rate * (self.loops.bw_time + self.loops.bw_warmup) * 4) + (1 << 20)
        flows = {p: self._flow(*p, size) for p in pairs}
        self.sg.this_actor.sleep_for(self.loops.bw_warmup)
        first = {p: f.remaining() for p, f in flows.items()}
        self.sg.this_actor.sleep_for(self.loops.bw_time)
        rates = {p: (first[p] - f.remaining()) / self.loops.bw_time for p, f in flows.items()}
        for f in flows.values():
            f.cancel()
        return rates

    def pairs(self, steps: list[PairStep]) -> dict[Pair, dict]:
        if not steps:
            return {}
        began = self.now()
        lat = self._latency([s.pair for s in steps if s.latency])
        rates = self._stream([s.pair for s in steps])
        took = self.now() - began
        out = {}
        bw, slower = self.noise.shares("bw", len(steps)), self.noise.shares("lat", len(steps))
        for n, s in enumerate(steps):
            got = {"mb_s": rates[s.pair] / 1e6 * bw[n], "wrong": 0, "measure_s": took}
            if s.pair in lat:
                us = lat[s.pair] * 1e6 / slower[n]  # a latency share is the median's over the pair's
                got.update(lat_us=us, lat_p99_us=us)
            out[s.pair] = got
        return out

    def group(self, kind: str, tag: str, order: list[int]) -> dict:
        if kind == "ring":
            flows = [(order[i - 1], i_) for i, i_ in enumerate(order)]
            rates = self._stream(flows)
            return {"links": [rates[p] / 1e6 for p in flows], "wrong": 0}
        k = len(order) // 2
        flows = list(zip(order[:k], order[k:2 * k], strict=True))
        rates = self._stream(flows)
        links = [rates[p] / 1e6 for p in flows]
        return {"links": links, "mb_s": k * min(links, default=0.0), "wrong": 0}

    def run(self, conduct: Callable[[], Iterator]) -> Iterator:
        """``conduct()``'s items as they come: it runs in an actor of the simulation (its fabric calls
        advance the simulated clock), the engine in a thread of its own."""
        out: queue.Queue = queue.Queue()

        def actor() -> None:
            try:
                for item in conduct():
                    out.put(("item", item))
            except BaseException as exc:  # noqa: BLE001 (handed to the caller, raised there)
                out.put(("error", exc))
            else:
                out.put(("end", None))

        self.sg.Actor.create("conductor", self.hosts[0], actor)
        engine = threading.Thread(target=self.engine.run, name="simgrid", daemon=True)
        engine.start()
        while True:
            kind, item = out.get()
            if kind == "end":
                break
            if kind == "error":
                raise item
            yield item
        engine.join()

