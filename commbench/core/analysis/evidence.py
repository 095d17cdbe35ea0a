"""What a cluster run measured, as evidence: every pair's latency and bandwidth, the rechecks of the
suspects, the rings and cuts, the pairs that failed; built row by row, live or from the results file,
so the live run and ``commbench findings FILE`` reach the same verdict (verdict.py) from the same rows.

After the pairwise rounds, attribution (attribution.py) names the smallest set of hosts, switches,
uplinks and cables that explains the slow pairs (bandwidth and latency apart). Each is a *suspect*
until measured again as ClusterKit, LinkTest and Google's health scanner confirm one: a *probe* pair
through it, alone, then right after it a *control* pair of hosts no suspect concerns
(``recheck_plan``); an uplink's probe is as many pairs through it at once as it has hosts (at most one
to each other switch: a pair alone may not fill an uplink wider than one host), its control as many
through another uplink. It is named only if the probe is still slower than the control by the threshold,
twice (a second pass, control first, for the suspects the first found slow: on shared CPUs one busy
moment can halve one pair); otherwise it was the tournament's cross-traffic or a busy moment.

Names come from files too: an endpoint's name is taken only where it is a host name Slurm and DNS
accept (letters, digits, ``. _ -``; ``host/rN`` where a host has several ranks), so no name read from
a file reaches a drain list, a reason line or a terminal as anything else.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

import numpy as np

from commbench.core.analysis import attribution, topology
from commbench.core.analysis.attribution import Explanation, Pair
from commbench.core.analysis.kinds import BANDWIDTH, LATENCY, LOSS, MEASURES, Measure
from commbench.core.analysis.topology import Topology
from commbench.core.errors import UsageError
from commbench.core.output.results import Run, read_runs
from commbench.core.output.table import value_problem

BW, LAT = BANDWIDTH, LATENCY
Pairs = tuple[Pair, ...]  # measured at once
RECHECK = {BW: "recheck", LAT: "recheck-latency", LOSS: "recheck-loss"}
RECHECKED = {test: m for m, test in RECHECK.items()}
ENDPOINT = re.compile(r"[A-Za-z0-9._-]{1,253}(/r[0-9]{1,7})?")  # a host (a DNS name at most), or host/rN
MEASURED = ("pairwise", "bisection", "alone", *RECHECK.values())  # tests whose failed rows are failures


def host_of(endpoint: str) -> str:
    """The host an endpoint label names (``host/rN``: host)."""
    return endpoint.rsplit("/r", 1)[0] if re.fullmatch(r".+/r[0-9]+", endpoint) else endpoint


def placed(topo: Topology, names: list[str], source: str = "--topology") -> Topology:
    """``topo`` (a whole machine's file) for a run's endpoints: each label (a host, or ``host/rN``)
    under its host's switch (UsageError where the file does not place a host). The live run and
    ``findings --topology`` both place endpoints through it."""
    hosts = topo.for_hosts([host_of(n) for n in names], source)
    return Topology({n: hosts.switch_of[host_of(n)] for n in names}, hosts.parent)


@dataclass
class Evidence:
    """What a cluster run measured, built row by row (live, or read back from its file)."""

    names: list[str]
    topology: Topology | None = None
    transport: str = "-t's transport"  # what the rows without ``via`` were measured over
    budgeted: bool = False  # --budget: a one-pair suspect it left no time to measure again is not a finding
    serial: bool = False  # --serial: one pair at a time, so no cross-traffic between the pairs
    lat: np.ndarray = field(init=False)
    bw: np.ndarray = field(init=False)
    loss: np.ndarray = field(init=False)  # each pair's share of segments sent once (LOSS), where counted
    failed: list[dict] = field(default_factory=list)
    rings: dict[str, list[dict]] = field(default_factory=dict)
    cuts: list[dict] = field(default_factory=list)
    rechecks: dict[tuple[Measure, str], dict[str, float]] = field(default_factory=dict)  # (measure, suspect) -> role
    at_once: dict[tuple[Measure, str, str], list[float]] = field(default_factory=dict)  # a role's pairs: its figure
    alone: dict[int, float] = field(default_factory=dict)  # a load-bound tournament: each host alone with the best
    via: dict[str, Evidence] = field(default_factory=dict)  # the same pairs over --transports' others
    lost: dict[str, str] = field(default_factory=dict)  # endpoints the run lost (died or stopped) -> the first failure
    refused: list[str] = field(default_factory=list)  # names read from a file that are no host's: their rows left out

    def __post_init__(self) -> None:
        k = len(self.names)
        self.lat, self.bw, self.loss = np.full((k, k), np.nan), np.full((k, k), np.nan), np.full((k, k), np.nan)
        self.index = {n: i for i, n in enumerate(self.names)}

    def attach(self, topo: Topology | None) -> None:
        """Judge the run with ``topo`` (placed for its endpoints): its evidence over every transport."""
        self.topology = topo
        for other in self.via.values():
            other.attach(topo)

    def values(self, measure: Measure) -> np.ndarray:
        return self.bw if measure is BW else self.loss if measure is LOSS else self.lat

    def add(self, row: dict) -> None:
        test = row.get("test")
        if row.get("via"):  # a pair measured over another transport: its evidence apart
            other = self.via.setdefault(str(row["via"]), Evidence(self.names, self.topology))
            other.add({k: v for k, v in row.items() if k != "via"})
            return
        if row.get("error") and test in MEASURED:
            if not (row.get("a") in self.index and row.get("b") in self.index):
                return  # a failure between names that are not this run's endpoints: no one to blame
            self.failed.append(row)
            if isinstance(row.get("lost"), str) and row["lost"] in self.index:
                self.lost.setdefault(row["lost"], f"{test} round {row.get('round')} {row.get('a')} - {row.get('b')}: "
                                                  f"{row.get('error')}")
            return
        if test == "pairwise":
            a, b = self.index.get(str(row.get("a"))), self.index.get(str(row.get("b")))
            if a is None or b is None:
                return
            for measure in (LAT, BW, LOSS):
                if (v := measure.value(row)) is not None:
                    self.values(measure)[a, b] = self.values(measure)[b, a] = v
        elif test in RECHECKED and row.get("suspect") and row.get("role"):
            measure = RECHECKED[test]
            value = measure.value(row)
            if value is not None:  # a role of several pairs at once: their median
                got = self.at_once.setdefault((measure, row["suspect"], row["role"]), [])
                got.append(float(value))
                self.rechecks.setdefault((measure, row["suspect"]), {})[row["role"]] = float(np.median(got))
        elif test == "alone":
            a, b = self.index.get(str(row.get("a"))), self.index.get(str(row.get("b")))
            if a is not None and b is not None and isinstance(row.get("mb_s"), (int, float)):
                self.alone[b] = float(row["mb_s"])  # b measured alone beside a, the best host
                self.alone.setdefault(a, float(row["mb_s"]))
        elif test in ("ring-ordered", "ring-random"):
            self.rings.setdefault(test, []).append(row)
        elif test == "bisection-cut":
            self.cuts.append(row)

    # -- suspects and their rechecks ----------------------------------------------------------
    def suspects(self, measure: Measure, slow_pct: float, keep_lost: bool = False) -> list[Explanation]:
        """The attribution's explanations; where the tournament was load-bound, also each host that was
        slow alone beside the best host (``alone`` rows); not those of a host the run lost, or of its
        cables, unless ``keep_lost``."""
        if not np.isfinite(self.values(measure)).any():
            return []  # not measured (loss: a transport without the kernel's TCP counters)
        found = attribution.explain(self.names, self.values(measure), self.topology, measure.cut(slow_pct),
                                    measure.higher)[1]
        if measure == BW and len(self.alone) >= 3:
            med = float(np.median(list(self.alone.values())))
            named = {i for e in found if e.kind == "host" for i in e.factor.members}
            for i, v in sorted(self.alone.items()):
                if i not in named and med > 0 and v / med < BW.cut(slow_pct):
                    pairs = frozenset(p for p in attribution.measured_pairs(self.bw) if i in p)
                    f = attribution.Factor("host", self.names[i], pairs, (i,))
                    found.append(Explanation(f, v / med, v / med, v / med, 1, 1, "alone", v, med))
        return found if keep_lost else [e for e in found if not self._of_lost(e)]

    def passing_load(self, several: bool = False) -> str:
        """What makes a suspect slow once and fast when measured again, for this run's schedule."""
        moments = "busy moments" if several else "a busy moment"
        return f"{moments} (one pair at a time: no cross-traffic)" if self.serial else \
            f"the tournament's cross-traffic or {moments}"

    def _of_lost(self, e: Explanation) -> bool:
        """A host or a cable of an endpoint the run lost: its failure is the finding, and what it measured
        before (slow or not) cannot be measured again."""
        return e.factor.kind in ("host", "cable") and any(self.names[i] in self.lost for i in e.factor.members)

    def load_bound(self, slow_pct: float) -> tuple[float, float] | None:
        """(the tournament's reference, a pair alone) where a pair of good hosts measured alone (the
        ``tournament`` control) beat the tournament's reference by more than the cut: its rounds were
        held back by their own load (CPUs shared by the pairs of a round), so a slow host may not stand
        out of them; None where it did not, or was not measured."""
        alone = self.rechecks.get((BW, "tournament"), {}).get("control")
        ref = self.reference(BW)
        if alone is None or ref != ref or ref >= BW.cut(slow_pct) * alone:
            return None
        return ref, alone

    def best_pair(self) -> tuple[int, int] | None:
        """The two hosts with the highest median pair (the tournament's control alone)."""
        good = [(float(np.nanmedian(self.bw[i])), i) for i in range(len(self.names)) if np.isfinite(self.bw[i]).any()]
        good.sort(key=lambda x: (-x[0], x[1]))
        return (min(good[0][1], good[1][1]), max(good[0][1], good[1][1])) if len(good) >= 2 else None

    def reference(self, measure: Measure) -> float:
        return attribution.reference(self.values(measure), self.names, self.topology)

    def pairs_at_once(self, measure: Measure, suspect: str) -> int:
        """How many pairs a suspect's probe measured at once (an uplink's: several)."""
        return len(self.at_once.get((measure, suspect, "probe"), ()))

    def recheck_plan(self, measure: Measure, slow_pct: float, second: bool = False) -> list[
            tuple[str, Pairs, Pairs]]:
        """(suspect label, probe pairs, control pairs) for each suspect that can be measured again, at most
        one per endpoint (hosts, switches and uplinks first, then cables slowest first); with ``second``,
        those the first pass found still slow (measured again, control first)."""
        plan = self._measurable(measure, self.suspects(measure, slow_pct))
        if second:
            cut = measure.cut(slow_pct)
            plan = [p for p in plan if len(r := recheck_ratios(self.rechecks.get((measure, p[0]), {}), measure)) == 1
                    and r[0][2] < cut]
        return plan[:self._cap()]

    def _measurable(self, measure: Measure, found: list[Explanation]) -> list[tuple[str, Pairs, Pairs]]:
        """(label, probe, control) for each of the suspects ``found`` that has a probe and a control pair;
        an uplink's bandwidth loaded as the tournament loads it."""
        lost = {self.index[n] for n in self.lost}
        goodness = self.values(measure) if measure.higher else -self.values(measure)
        out = []
        for e in found:
            got = probe_and_control(e, found, self.names, self.topology, goodness, lost)
            if got is not None:
                groups = loaded(e, got[0], found, self.names, self.topology, goodness, lost) if measure == BW else None
                out.append((label(e), *(groups or ((got[0],), (got[1],)))))
        return out

    def past_the_cap(self, measure: Measure, found: list[Explanation]) -> set[str]:
        """The suspects (of ``found``) a first pass of rechecks could measure but left out, its cap reached."""
        return {lab for lab, _, _ in self._measurable(measure, found)[self._cap():]}

    def _cap(self) -> int:
        return max(4, len(self.names))  # the most severe first; more than one per endpoint is the load

    def summary(self, slow_pct: float = 25.0) -> list[str]:
        out = []
        bound = self.load_bound(slow_pct)
        if bound:
            out.append(f"the tournament's own load held its pairs to {bound[0] / bound[1] * 100:.0f} % of a pair alone "
                       f"({bound[0]:.1f} against {bound[1]:.1f} MB/s): every host measured alone beside the best "
                       f"(rows alone: {len(self.alone)} hosts)")
        if np.isfinite(self.bw).any():
            lat = f", {self.reference(LAT):.2f} us" if np.isfinite(self.lat).any() else ""
            out.append(f"pairwise: reference {self.reference(BW):.1f} MB/s{lat} (the median host's); slowest pair "
                       f"{np.nanmin(self.bw):.1f} MB/s")
        out += self.switch_lines()
        for test, rows in self.rings.items():
            rates = [r["mb_s"] for r in rows if isinstance(r.get("mb_s"), (int, float))]
            if rates:
                out.append(f"{test}: slowest link {min(rates):.1f} MB/s, median {float(np.median(rates)):.1f}")
        if self.cuts:
            totals = sorted(c["mb_s"] for c in self.cuts if isinstance(c.get("mb_s"), (int, float)))
            if totals:
                per = [c["mb_s"] / max(c.get("pairs") or 1, 1) for c in self.cuts
                       if isinstance(c.get("mb_s"), (int, float))]
                out.append(f"bisection over {len(totals)} cuts: worst {totals[0]:.1f} MB/s, median "
                           f"{float(np.median(totals)):.1f} ({min(per):.1f} / {float(np.median(per)):.1f} per pair)")
        return out

    def switch_lines(self) -> list[str]:
        """Per switch with a topology: its hosts, the median pair inside it and to the others."""
        topo = self.topology
        if topo is None or len(set(topo.switch_of.values())) < 2:
            return []
        out = []
        for s in dict.fromkeys(topo.switch_of[n] for n in self.names):
            under = [i for i, n in enumerate(self.names) if topo.switch_of[n] == s]
            inside = [self.bw[a, b] for a in under for b in under if a < b]
            across = [self.bw[a, b] for a in under for b in range(len(self.names)) if b not in under]
            med = [f"{float(np.nanmedian(v)):.1f}" if np.isfinite(v).any() else "-" for v in (inside, across)]
            out.append(f"switch {s}: {len(under)} hosts, median pair {med[0]} MB/s inside, {med[1]} to the others")
        return out


def recheck_ratios(again: dict[str, float], measure: Measure) -> list[tuple[float, float, float]]:
    """(probe, control, probe's share of the control's goodness) for each pass of a suspect's recheck
    (a second pass where the first found it slow: it must be slow both times)."""
    out = []
    for n in ("", "-2"):
        p, c = again.get("probe" + n), again.get("control" + n)
        if p is not None and c is not None:
            out.append((p, c, p / c if measure.higher else (c / p if p > 0 else 0.0)))
    return out


def label(e: Explanation) -> str:
    """How rows name a suspect: its kind and name ("host cbh5", "uplink r1", "cable a - b")."""
    return f"{e.kind} {e.name}"


def host_goodness(goodness: np.ndarray) -> list[float]:
    """Each host's median pair (its goodness: higher is better), -inf where none was measured."""
    return [float(np.nanmedian(row)) if np.isfinite(row).any() else -np.inf for row in goodness]


def probe_and_control(e: Explanation, suspects: Iterable[Explanation], names: list[str], topo: Topology | None,
                      goodness: np.ndarray,
                      lost: AbstractSet[int] = frozenset()) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """A probe pair through the suspect, and a control pair that no suspect concerns and that shares
    no host with the probe: each the one crossing the fewest uplinks (a host's partner in its own
    switch), then between the best-measured hosts (the probe: then one no other suspect concerns, so
    a cable between a suspect host and another is its own pair); neither with an endpoint the run
    ``lost``. None where the cluster has no such pairs."""
    k = len(names)
    host_good = host_goodness(goodness)
    others: set[tuple[int, int]] = set()
    for s in suspects:
        if s is not e:
            others |= s.factor.pairs

    def key(p: tuple[int, int]) -> tuple:
        hops = len(topo.uplinks(names[p[0]], names[p[1]])) if topo is not None else 0
        return hops, -min(host_good[p[0]], host_good[p[1]]), p in others, p

    # the hosts measured best first, then a pair no other suspect concerns: a suspect is a guess (in
    # an oversubscribed tree any three of four racks' uplinks explain every slow crossing pair), the
    # measurements are not, and a probe through the one really slow part would confirm an innocent one
    probes = sorted((p for p in e.factor.pairs if not set(p) & lost), key=key)
    if not probes:
        return None
    probe = probes[0]
    taken = others | e.factor.pairs
    pairs = [(a, b) for a in range(k) for b in range(a + 1, k) if np.isfinite(goodness[a, b]) and not {a, b} & lost]
    controls = sorted((p for p in pairs if p not in taken and not set(p) & set(probe)), key=key)
    return (probe, controls[0]) if controls else None


def loaded(e: Explanation, probe: Pair, suspects: Iterable[Explanation], names: list[str], topo: Topology | None,
           goodness: np.ndarray, lost: AbstractSet[int] = frozenset()) -> tuple[Pairs, Pairs] | None:
    """An uplink's probe as loaded as a tournament's round loads it: from each of its hosts a pair to
    a host under another leaf switch (each leaf at most once, the best-measured hosts first), all at
    once, starting with ``probe``; the control as many pairs through the uplink of another switch of
    its level that no suspect concerns. None where ``e`` is no uplink, or the tree has room for
    fewer than two such pairs (the probe and control pairs alone then)."""
    if e.kind != "uplink" or topo is None:
        return None
    k = len(names)
    host_good = host_goodness(goodness)
    leaf = [topo.switch_of[n] for n in names]
    chains = [topo.chain(s) for s in leaf]
    suspected = {i for s in suspects if s is not e and s.kind != "cable" for i in s.factor.members}
    busy = {p for s in suspects if s.kind == "cable" for p in s.factor.pairs}
    usable = [i for i in sorted(range(k), key=lambda i: (-host_good[i], i)) if i not in lost and i not in suspected]
    up = e.name.split(" or ")[0]
    level = len(topo.chain(up))

    def group(first: Pair, inside: str, avoid: set[str]) -> list[Pair]:
        """``first``, then a pair from each other host under ``inside`` to a host under a leaf not yet
        used, outside ``inside`` and ``avoid``'s subtrees; each pair (sender, receiver) from the host
        under ``inside``, so that all of them load its uplink's one direction as a round's do."""
        near = first[0] if inside in chains[first[0]] else first[1]
        out, used, taken = [(near, sum(first) - near)], {leaf[first[0]], leaf[first[1]]}, set(first)
        far = [j for j in usable if inside not in chains[j] and not avoid & set(chains[j])]
        for i in (i for i in usable if inside in chains[i] and i != near):
            j = next((j for j in far if leaf[j] not in used and j not in taken and
                      (min(i, j), max(i, j)) not in busy), None)
            if j is None:
                break
            out.append((i, j))
            used.add(leaf[j])
            taken |= {i, j}
        return out

    if up not in chains[probe[0]] + chains[probe[1]]:
        return None
    probes = group(probe, up, set())
    others = [s for s in topo.switches() if len(topo.chain(s)) == level and s not in topo.chain(up) and
              up not in topo.chain(s) and not any(s in chains[i] for i in suspected)]
    best: list[Pair] = []
    for s in others:
        near = [i for i in usable if s in chains[i]]
        far = [j for j in usable if s not in chains[j] and up not in chains[j]]
        if not near or not far:
            continue
        got = group((min(near[0], far[0]), max(near[0], far[0])), s, {up})
        if len(got) > len(best):
            best = got
    n = min(len(probes), len(best))
    return (tuple(probes[:n]), tuple(best[:n])) if n >= 2 else None


def read_evidence(path: str, topo_file: str | None = None) -> tuple[Run, Evidence]:
    """(run, its evidence) for the one cluster run in a file (the last with rows where it holds several),
    judged with ``topo_file``'s topology where one is given."""
    runs = [r for r in read_runs(path, need_rows=True) if r.meta.get("bench") == "cluster"]
    runs = [r for r in runs if r.rows] or runs
    if not runs:
        raise UsageError(f"{path}: no commbench cluster run in this file; findings reads what `commbench cluster "
                         "-o FILE` wrote")
    run = runs[-1]
    ev = from_rows(dict(run.meta), [r for r in run.rows if r.get("test") not in ("finding", "summary")], path)
    if topo_file:
        ev.attach(placed(topology.load(topo_file), ev.names))
    return run, ev


def from_rows(meta: dict, rows: list[dict], source: str) -> Evidence:
    """A cluster run's evidence from its results file; endpoint names that are no host's are refused
    (kept in ``refused``, their rows left out)."""
    names = meta.get("endpoints")
    if not (isinstance(names, list) and all(isinstance(n, str) for n in names)):
        seen: dict[int, str] = {}
        for r in rows:
            for side in ("a", "b"):
                rank, name = r.get(f"{side}_rank"), r.get(side)
                if isinstance(rank, int) and isinstance(name, str):
                    seen.setdefault(rank, name)
        names = [seen[r] for r in sorted(seen)]
    good = [n for n in dict.fromkeys(names) if ENDPOINT.fullmatch(n)]
    topo = Topology.from_json(meta["topology"], source) if meta.get("topology") is not None else None
    if topo is not None and any(n not in topo.switch_of for n in good):
        raise UsageError(f"{source}: the metadata's topology does not place every endpoint; was the file edited?")
    transport = (meta.get("options") or {}).get("transport")
    ev = Evidence(good, topo, str(transport) if transport else "-t's transport",
                  budgeted=(meta.get("options") or {}).get("budget") is not None,
                  serial=bool((meta.get("options") or {}).get("serial")))
    ev.refused = [n for n in dict.fromkeys(names) if not ENDPOINT.fullmatch(n)]
    for i, r in enumerate(rows, 1):
        for m in MEASURES.values():
            v = r.get(m.key)
            why = value_problem(v, m.unit) if v is not None else ""
            if why:
                raise UsageError(f"{source}: row {i} ({str(r.get('test'))[:20]} {str(r.get('a'))[:40]} - "
                                 f"{str(r.get('b'))[:40]}): {m.key} is {str(v)[:40]!r}, {why}; was the file edited?")
        ev.add(r)
    return ev
