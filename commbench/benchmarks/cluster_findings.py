"""A cluster run's verdict, from its rows alone: the live run and ``commbench findings FILE`` feed the
same rows to the same ``Evidence`` and get the same findings.

After the pairwise rounds, attribution (core/analysis/attribution.py) names the smallest set of
hosts, switches, uplinks and cables that explains the slow pairs (bandwidth and latency apart). Each
is a *suspect* until measured again as ClusterKit, LinkTest and Google's health scanner confirm one:
a *probe* pair through it, alone, then right after it a *control* pair of hosts no suspect concerns.
It is named only if the probe is still slower than the control by the threshold, twice (a second
pass, control first, for the suspects the first found slow: on shared CPUs one busy moment can halve
one pair); otherwise it was the tournament's cross-traffic or a busy moment, and the findings say it
was cleared.
"""

from __future__ import annotations

from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

import numpy as np

from commbench.core.analysis import attribution, topology
from commbench.core.analysis.attribution import Explanation
from commbench.core.analysis.topology import Topology
from commbench.core.errors import UsageError
from commbench.core.measure import outliers
from commbench.core.output.results import Run, read_runs

BW, LAT = "bandwidth", "latency"
RECHECK = {BW: "recheck", LAT: "recheck-latency"}
KIND = {"host": "slow-host", "switch": "slow-switch", "uplink": "slow-uplink", "group": "slow-group",
        "cable": "slow-link"}
WHAT = {"host": "every pair it is in", "switch": "every pair with a host under it",
        "uplink": "every pair through it", "group": "the pairs between these hosts and the others",
        "cable": "this pair alone"}


def cuts(slow_pct: float) -> dict[str, float]:
    """The ratio to the reference below which a pair is slow: bandwidth --slow-pct below it; latency
    twice --slow-pct above it (latency moves more)."""
    share = slow_pct / 100
    return {BW: 1 - share, LAT: 1 / (1 + 2 * share)}


@dataclass
class Evidence:
    """What a cluster run measured, built row by row (live, or read back from its file)."""

    names: list[str]
    topology: Topology | None = None
    transport: str = "-t's transport"  # what the rows without ``via`` were measured over
    budgeted: bool = False  # --budget: a one-pair suspect it left no time to measure again is not a finding
    lat: np.ndarray = field(init=False)
    bw: np.ndarray = field(init=False)
    failed: list[dict] = field(default_factory=list)
    rings: dict[str, list[dict]] = field(default_factory=dict)
    cuts: list[dict] = field(default_factory=list)
    rechecks: dict[tuple[str, str], dict[str, float]] = field(default_factory=dict)  # (measure, suspect) -> role
    alone: dict[int, float] = field(default_factory=dict)  # a load-bound tournament: each host alone with the best
    via: dict[str, Evidence] = field(default_factory=dict)  # the same pairs over --transports' others
    lost: dict[str, str] = field(default_factory=dict)  # endpoints the run lost (died or stopped) -> the first failure

    def __post_init__(self) -> None:
        k = len(self.names)
        self.lat, self.bw = np.full((k, k), np.nan), np.full((k, k), np.nan)
        self.index = {n: i for i, n in enumerate(self.names)}

    def add(self, row: dict) -> None:
        test = row.get("test")
        if row.get("via"):  # a pair measured over another transport: its evidence apart
            other = self.via.setdefault(str(row["via"]), Evidence(self.names, self.topology))
            other.add({k: v for k, v in row.items() if k != "via"})
            return
        if row.get("error") and test in ("pairwise", "bisection", "alone", *RECHECK.values()):
            self.failed.append(row)
            if isinstance(row.get("lost"), str) and row["lost"] in self.index:
                self.lost.setdefault(row["lost"], f"{test} round {row.get('round')} {row.get('a')} - {row.get('b')}: "
                                                  f"{row.get('error')}")
            return
        if test == "pairwise":
            a, b = self.index.get(str(row.get("a"))), self.index.get(str(row.get("b")))
            if a is None or b is None:
                return
            for m, key in ((self.lat, "lat_us"), (self.bw, "mb_s")):
                if isinstance(row.get(key), (int, float)):
                    m[a, b] = m[b, a] = row[key]
        elif test in RECHECK.values() and row.get("suspect") and row.get("role"):
            measure = LAT if test == RECHECK[LAT] else BW
            value = row.get("lat_us" if measure == LAT else "mb_s")
            if isinstance(value, (int, float)):
                self.rechecks.setdefault((measure, row["suspect"]), {})[row["role"]] = float(value)
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
    def suspects(self, measure: str, slow_pct: float, keep_lost: bool = False) -> list[Explanation]:
        """The attribution's explanations; where the tournament was load-bound, also each host that was
        slow alone beside the best host (``alone`` rows); not those of a host the run lost, or of its
        cables, unless ``keep_lost``."""
        values = self.bw if measure == BW else self.lat
        found = attribution.explain(self.names, values, self.topology, cuts(slow_pct)[measure], measure == BW)[1]
        if measure == BW and len(self.alone) >= 3:
            med = float(np.median(list(self.alone.values())))
            named = {i for e in found if e.kind == "host" for i in e.factor.members}
            for i, v in sorted(self.alone.items()):
                if i not in named and med > 0 and v / med < cuts(slow_pct)[BW]:
                    pairs = frozenset(p for p in attribution.measured_pairs(self.bw) if i in p)
                    f = attribution.Factor("host", self.names[i], pairs, (i,))
                    found.append(Explanation(f, v / med, v / med, v / med, 1, 1, "alone", v, med))
        return found if keep_lost else [e for e in found if not self._of_lost(e)]

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
        if alone is None or ref != ref or ref >= cuts(slow_pct)[BW] * alone:
            return None
        return ref, alone

    def best_pair(self) -> tuple[int, int] | None:
        """The two hosts with the highest median pair (the tournament's control alone)."""
        good = [(float(np.nanmedian(self.bw[i])), i) for i in range(len(self.names)) if np.isfinite(self.bw[i]).any()]
        good.sort(key=lambda x: (-x[0], x[1]))
        return (min(good[0][1], good[1][1]), max(good[0][1], good[1][1])) if len(good) >= 2 else None

    def reference(self, measure: str) -> float:
        return attribution.reference(self.bw if measure == BW else self.lat, self.names, self.topology)

    def recheck_plan(self, measure: str, slow_pct: float, second: bool = False) -> list[
            tuple[str, tuple[int, int], tuple[int, int]]]:
        """(suspect label, probe pair, control pair) for each suspect that can be measured again, at most
        one per endpoint (hosts, switches and uplinks first, then cables slowest first); with ``second``,
        those the first pass found still slow (measured again, control first)."""
        plan = self._measurable(measure, self.suspects(measure, slow_pct))
        if second:
            cut = cuts(slow_pct)[measure]
            plan = [p for p in plan if len(r := recheck_ratios(self.rechecks.get((measure, p[0]), {}), measure)) == 1
                    and r[0][2] < cut]
        return plan[:self._cap()]

    def _measurable(self, measure: str, found: list[Explanation]) -> list[
            tuple[str, tuple[int, int], tuple[int, int]]]:
        """(label, probe, control) for each of the suspects ``found`` that has a probe and a control pair."""
        lost = {self.index[n] for n in self.lost}
        goodness = self.bw if measure == BW else -self.lat
        return [(label(e), *got) for e in found
                if (got := probe_and_control(e, found, self.names, self.topology, goodness, lost)) is not None]

    def past_the_cap(self, measure: str, found: list[Explanation]) -> set[str]:
        """The suspects (of ``found``) a first pass of rechecks could measure but left out, its cap reached."""
        return {lab for lab, _, _ in self._measurable(measure, found)[self._cap():]}

    def _cap(self) -> int:
        return max(4, len(self.names))  # the most severe first; more than one per endpoint is the load

    # -- the verdict --------------------------------------------------------------------------
    def findings(self, slow_pct: float) -> tuple[list[dict], list[str]]:
        """(finding rows, lines on suspects cleared when measured again or left unconfirmed: in a budgeted
        run, or past the rechecks' cap where most of those measured again were cleared)."""
        found, cleared, unconfirmed = [], [], []
        for measure in (BW, LAT):
            cut = cuts(slow_pct)[measure]
            ref = self.reference(measure)
            unit = "MB/s" if measure == BW else "us"
            suspects = self.suspects(measure, slow_pct)
            measured = [r for r in (recheck_ratios(self.rechecks.get((measure, label(e)), {}), measure)
                                    for e in suspects) if r]
            load = sum(max(x for _, _, x in r) >= cut for r in measured)  # suspects cleared: the load's share
            capped = self.past_the_cap(measure, suspects) if 2 * load > len(measured) else set()
            left: list[str] = []
            for e in suspects:
                again = self.rechecks.get((measure, label(e)))
                kind = KIND[e.kind] + ("-latency" if measure == LAT else "")
                seen = _effect(e, ref, unit, measure)
                ratios = recheck_ratios(again or {}, measure)
                if not ratios and label(e) in capped:  # left out of a plan most of whose suspects cleared
                    left.append(f"{e.name} {seen.split(',')[0]}")
                    continue
                if ratios:
                    digits = 2 if measure == LAT else 1
                    alone = "; ".join(f"again alone {p:.{digits}f} {unit}, a control pair {c:.{digits}f} "
                                      f"({r * 100:.0f} %)" for p, c, r in ratios)
                    if max(r for _, _, r in ratios) >= cut:
                        cleared.append((kind, e.name, f"{kind} {e.name} cleared: {seen}; {alone}: the tournament's "
                                                      "cross-traffic or a busy moment"))
                        continue
                    seen += f"; {alone}"
                elif self.budgeted and len(e.factor.pairs) < 2:  # one pair, once: out of the spread is not enough
                    unconfirmed.append(f"{kind} {e.name} not confirmed: {seen}; --budget left no time to measure "
                                       "it again, and one pair measured once is not a finding")
                    continue
                else:
                    seen += "; not measured again"
                row = {"kind": kind, "a": e.name.split(" - ")[0] if e.kind == "cable" else e.name, "_name": e.name,
                       "note": f"{e.name}: {seen}", "ratio": round(e.ratio, 4), "ratio_lo": round(e.lo, 4),
                       "ratio_hi": round(e.hi, 4)}
                if e.kind == "cable":
                    row["b"] = e.name.split(" - ")[1]
                row["mb_s" if measure == BW else "lat_us"] = e.value if e.value is not None else float(np.median(
                    [(self.bw if measure == BW else self.lat)[p] for p in e.factor.pairs]))
                found.append(row)
            if left:
                unconfirmed.append(f"{measure} suspects: {len(left)} not confirmed ({', '.join(left)}): "
                                   f"more than the rechecks take, and {load} of the {len(measured)} measured again "
                                   "were cleared: the tournament's load, not findings")
        found += self._across_transports(found, slow_pct)
        for f in found:
            f.pop("_name", None)
        lines = []
        for kind in dict.fromkeys(k for k, _, _ in cleared):  # many of a kind: one line (a loaded tournament)
            mine = [(name, line) for k, name, line in cleared if k == kind]
            lines += [line for _, line in mine] if len(mine) <= 3 else [
                f"{kind}: {len(mine)} suspects cleared when measured alone ({', '.join(n for n, _ in mine[:3])} and "
                f"{len(mine) - 3} more, in the rows recheck): the tournament's cross-traffic or busy moments"]
        found += self._failures(slow_pct)
        found += self._ring_findings(slow_pct, found)
        return found, lines + unconfirmed

    def _failures(self, slow_pct: float) -> list[dict]:
        """A finding per endpoint the run lost (died or stopped: its pairs failed or were not measured,
        the first failure, and what it was suspected of before, which it cannot be measured again to
        confirm), one per other endpoint in three failed pairs or more, one per failed pair left."""
        suspected: dict[str, list[str]] = {}
        for measure in (BW, LAT):
            for e in self.suspects(measure, slow_pct, keep_lost=True):
                for lost in {self.names[i] for i in e.factor.members} & set(self.lost) if self._of_lost(e) else ():
                    suspected.setdefault(lost, []).append(f"{KIND[e.kind]}{'-latency' if measure == LAT else ''} "
                                                          f"{e.name}")
        count: dict[str, int] = {}
        for row in self.failed:
            for end in {row.get("a"), row.get("b")}:
                count[str(end)] = count.get(str(end), 0) + 1
        out, told = [], set()
        for end in sorted((e for e in count if e in self.lost or count[e] >= 3),
                          key=lambda e: (e not in self.lost, -count[e])):
            mine = [r for r in self.failed if end in (r.get("a"), r.get("b")) and id(r) not in told]
            if len(mine) < 3 and end not in self.lost:
                continue
            told |= {id(r) for r in mine}
            first = self.lost.get(end) or (f"{mine[0].get('test')} round {mine[0].get('round')} {mine[0].get('a')} - "
                                            f"{mine[0].get('b')}: {mine[0].get('error')}")
            note = (f"{end}{' lost' if end in self.lost else ''}: {len(mine)} pair(s) failed or not measured, "
                    f"first {first}")
            if suspected.get(end):
                note += (f"; suspected before it was lost ({', '.join(suspected[end])}): not a finding, as it could "
                         "not be measured again")
            out.append({"kind": "failed", "a": end, "b": None, "note": note})
        return out + [{"kind": "failed", "a": row.get("a"), "b": row.get("b"),
                       "note": f"{row.get('test')} round {row.get('round')} {row.get('a')} - {row.get('b')}: "
                               f"{row.get('error')}"} for row in self.failed if id(row) not in told]

    def _across_transports(self, found: list[dict], slow_pct: float) -> list[dict]:
        """With --transports: each finding says on which transports its pairs are slow too (every one:
        the fabric, a cable or the NIC; one: that transport's stack on the host, e.g. a TCP setting or
        an IPoIB MTU), and what is slow over another transport alone (measured again over it, as any
        suspect is) is a finding of its own."""
        if not self.via:
            return []
        theirs: dict[str, dict[tuple[str, str], dict]] = {}
        for name, ev in self.via.items():
            rows = [r for r in ev.findings(slow_pct)[0] if r["kind"].startswith("slow")]
            theirs[name] = {(r["kind"], r["a"] + (f" - {r['b']}" if r.get("b") else "")): r for r in rows}
        ours = {(f["kind"], f.get("_name")) for f in found}
        for f in found:
            if f.get("_name") is None:
                continue
            on = [name for name, got in theirs.items() if (f["kind"], f["_name"]) in got]
            every = ", ".join([self.transport, *on])
            f["note"] += (f"; slow over every transport ({every}): the fabric, a cable or the NIC"
                          if len(on) == len(theirs) else
                          f"; over {self.transport} only" + (f" and {', '.join(on)}" if on else "") + " (not " +
                          ", ".join(n for n in theirs if n not in on) + "): that transport's stack on the host")
        out = []
        for name, got in theirs.items():
            for key in sorted(set(got) - ours):
                row = dict(got[key])
                row["via"] = name
                row["note"] = f"over {name} only (not {self.transport}): {row['note']}: that transport's stack"
                out.append(row)
        return out

    def _ring_findings(self, slow_pct: float, found: list[dict]) -> list[dict]:
        """A ring link off the ring's median, unless a finding explains it or the same link measured as
        a pair was healthy (every endpoint of a ring streams at once: on shared CPUs one link of eight
        can fall to two thirds of the median without a fault)."""
        share = slow_pct / 100
        named = {f.get("a") for f in found if f["kind"].startswith("slow") and not f["kind"].endswith("latency")}
        named |= {f.get("b") for f in found if f["kind"] == "slow-link"}
        med = self.reference(BW)
        out = []
        for test, rows in self.rings.items():
            rates = [r["mb_s"] if isinstance(r.get("mb_s"), (int, float)) else np.nan for r in rows]
            for j in outliers.outliers(rates, share, low=True):
                a, b = self.index.get(rows[j]["a"]), self.index.get(rows[j]["b"])
                if a is None or b is None or {rows[j]["a"], rows[j]["b"]} & named:
                    continue
                alone = float(self.bw[a, b])
                if alone == alone and alone >= med * (1 - share):
                    continue
                out.append({"kind": "slow-ring-link", "a": rows[j]["a"], "b": rows[j]["b"], "mb_s": rates[j],
                            "note": f"{test}: {rows[j]['a']} -> {rows[j]['b']} {rates[j]:.1f} MB/s, the ring's "
                                    f"median {outliers.median_mad(rates)[0]:.1f}"})
        return out

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


def recheck_ratios(again: dict[str, float], measure: str) -> list[tuple[float, float, float]]:
    """(probe, control, probe's share of the control's goodness) for each pass of a suspect's recheck
    (a second pass where the first found it slow: it must be slow both times)."""
    out = []
    for n in ("", "-2"):
        p, c = again.get("probe" + n), again.get("control" + n)
        if p is not None and c is not None:
            out.append((p, c, p / c if measure == BW else (c / p if p > 0 else 0.0)))
    return out


def label(e: Explanation) -> str:
    """How rows name a suspect: its kind and name ("host cbh5", "uplink r1", "cable a - b")."""
    return f"{e.kind} {e.name}"


def _effect(e: Explanation, ref: float, unit: str, measure: str) -> str:
    if e.basis == "alone":
        return (f"{e.value:.1f} {unit} alone beside the best host, {e.ratio * 100:.0f} % of the median host's "
                f"{e.reference:.1f} alone")
    figure = f"{ref * e.ratio:.1f} {unit}" if measure == BW else f"{ref / max(e.ratio, 1e-9):.2f} {unit}"
    reference = f"the reference {ref:.{1 if measure == BW else 2}f} {unit}"
    if e.n == 1:
        return f"{figure}, {e.ratio * 100:.0f} % of {reference}"
    return (f"{figure}, {e.ratio * 100:.0f} % (95 % CI {e.lo * 100:.0f}-{e.hi * 100:.0f} %) of {reference} over "
            f"{WHAT[e.kind]} ({e.low} of {e.n} pairs slow)")


def probe_and_control(e: Explanation, suspects: Iterable[Explanation], names: list[str], topo: Topology | None,
                      goodness: np.ndarray,
                      lost: AbstractSet[int] = frozenset()) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """A probe pair through the suspect that no other suspect concerns (where it has one: a cable
    between a suspect host and another is its own pair), and a control pair that no suspect concerns
    and that shares no host with the probe: each the one crossing the fewest uplinks
    (a host's partner in its own switch), then between the best-measured hosts; neither with an
    endpoint the run ``lost``. None where the cluster has no such pairs."""
    k = len(names)
    host_good = [float(np.nanmedian(goodness[i])) if np.isfinite(goodness[i]).any() else -np.inf for i in range(k)]
    others: set[tuple[int, int]] = set()
    for s in suspects:
        if s is not e:
            others |= s.factor.pairs

    def key(p: tuple[int, int]) -> tuple:
        hops = len(topo.uplinks(names[p[0]], names[p[1]])) if topo is not None else 0
        return hops, -min(host_good[p[0]], host_good[p[1]]), p

    mine = {p for p in e.factor.pairs if not set(p) & lost}
    probes = sorted(mine - others, key=key) or sorted(mine, key=key)  # a cable of a suspect host
    if not probes:
        return None
    probe = probes[0]
    taken = others | e.factor.pairs
    pairs = [(a, b) for a in range(k) for b in range(a + 1, k) if np.isfinite(goodness[a, b]) and not {a, b} & lost]
    controls = sorted((p for p in pairs if p not in taken and not set(p) & set(probe)), key=key)
    return (probe, controls[0]) if controls else None


def read_evidence(path: str, topo_file: str | None = None) -> tuple[Run, Evidence]:
    """(run, its evidence) for the one cluster run in a file (the last with rows where it holds several)."""
    runs = [r for r in read_runs(path, need_rows=True) if r.meta.get("bench") == "cluster"]
    runs = [r for r in runs if r.rows] or runs
    if not runs:
        raise UsageError(f"{path}: no commbench cluster run in this file; findings reads what `commbench cluster "
                         "-o FILE` wrote")
    run = runs[-1]
    ev = from_rows(dict(run.meta), [r for r in run.rows if r.get("test") not in ("finding", "summary")], path)
    if topo_file:
        ev.topology = topology.load(topo_file).for_hosts(ev.names)
    return run, ev


def from_rows(meta: dict, rows: list[dict], source: str) -> Evidence:
    """A cluster run's evidence from its results file (``commbench findings``)."""
    names = meta.get("endpoints")
    if not (isinstance(names, list) and all(isinstance(n, str) for n in names)):
        seen: dict[int, str] = {}
        for r in rows:
            for side in ("a", "b"):
                rank, name = r.get(f"{side}_rank"), r.get(side)
                if isinstance(rank, int) and isinstance(name, str):
                    seen.setdefault(rank, name)
        names = [seen[r] for r in sorted(seen)]
    topo = Topology.from_json(meta["topology"], source) if meta.get("topology") is not None else None
    transport = (meta.get("options") or {}).get("transport")
    ev = Evidence(list(names), topo, str(transport) if transport else "-t's transport",
                  budgeted=(meta.get("options") or {}).get("budget") is not None)
    for r in rows:
        ev.add(r)
    return ev


# -- against an earlier run, and against reference values ------------------------------------
CHANGED = {"host": "host", "switch": "switch", "uplink": "uplink", "group": "group", "cable": "link"}


def verdict(ev: Evidence, slow_pct: float, baseline: tuple[str, Run, Evidence] | None = None,
            expected: list[Expected] | None = None) -> tuple[list[dict], list[str]]:
    """The findings, then what changed since a baseline run ((its file, run, evidence)) and how each
    class of links did against expected values; with the summary lines: the evidence's own, the
    suspects cleared, the baseline's, the reference's. The live run and ``commbench findings`` both
    give their verdict through it."""
    found, cleared = ev.findings(slow_pct)
    summary = [*ev.summary(slow_pct), *cleared]
    if baseline is not None:
        path, run, old = baseline
        moved, lines = changes(old, ev, slow_pct, str(run.meta.get("start", "?"))[:10], f"--baseline {path}", found)
        found, summary = found + moved, summary + lines
    if expected:
        failed, lines = check_reference(ev, expected)
        found, summary = found + failed, summary + lines
    return found, summary


def changes(old: Evidence, new: Evidence, slow_pct: float, since: str, source: str,
            now_found: list[dict]) -> tuple[list[dict], list[str]]:
    """What changed from ``old`` to ``new`` beyond the noise of both runs: attribution over each pair's
    ratio new / old (so a host, switch, uplink or cable that lost is named as itself, and the spread
    of the ratios is the two runs' noise together; the ratios are judged against their own median,
    and a median itself below the cut is ``lost-cluster``; a single cable only where either run named
    it, measured again alone: one pair in two runs is otherwise noise), and the findings that are new
    or gone.
    Rows ``lost-*`` are regressions; ``gained-*``, ``new``, ``fixed``, ``new-host``, ``gone-host`` say what
    else moved. ``now_found``: the new run's findings, as its verdict made them. Raises UsageError
    where the runs share too few endpoints to be the same cluster."""
    common = same_cluster(old.names, new.names, source)
    rows: list[dict] = []
    lines = [f"against the baseline of {since}: {len(common)} endpoints in both"]
    for n in new.names:
        if n not in old.index:
            rows.append({"kind": "new-host", "a": n, "note": f"{n}: not in the baseline of {since}"})
    for n in old.names:
        if n not in new.index:
            rows.append({"kind": "gone-host", "a": n, "note": f"{n}: in the baseline of {since}, not in this run"})
    idx_old, idx_new = [old.index[n] for n in common], [new.index[n] for n in common]
    was_found = old.findings(slow_pct)[0]
    named = {(f["kind"].endswith("-latency"), frozenset((f.get("a"), f.get("b")))) for f in was_found + now_found
             if f["kind"].startswith("slow-link")}  # cables either run named (measured again alone)
    for measure, key, unit in ((BW, "bw", "MB/s"), (LAT, "lat", "us")):
        a = getattr(old, key)[np.ix_(idx_old, idx_old)]
        b = getattr(new, key)[np.ix_(idx_new, idx_new)]
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = b / a if measure == BW else a / b
        ratio[~np.isfinite(ratio)] = np.nan
        if not np.isfinite(ratio).any():
            continue
        med = float(np.nanmedian(ratio))
        lines.append(f"{measure}: the median pair at {med * 100:.0f} % of the baseline's")
        cut = cuts(slow_pct)[measure]
        d = 1 if measure == BW else 2
        if med < cut:  # everything moved together: no one part stands out, the whole did
            rows.append({"kind": "lost-cluster" + ("-latency" if measure == LAT else ""), "a": "every pair",
                         "ratio": round(med, 4), "note": f"every pair: the median at {med * 100:.0f} % of the "
                                                         f"baseline's of {since} ({measure})"})
        for sign, r in (("lost", ratio), ("gained", 1 / ratio)):
            _, found = attribution.explain(common, r, new.topology, cut, True)
            for e in found:
                if e.kind == "cable" and (measure == LAT, frozenset(e.name.split(" - "))) not in named:
                    continue  # one pair in two runs is noise until either run measured it again alone
                pairs = list(e.factor.pairs)
                before = float(np.nanmedian([a[p] for p in pairs]))
                after = float(np.nanmedian([b[p] for p in pairs]))
                moved = (f"{sign} {abs(after / before - 1) * 100:.0f} %" if measure == BW else
                         f"latency {'up' if after > before else 'down'} {abs(after / before - 1) * 100:.0f} %")
                rows.append({"kind": f"{sign}-{CHANGED[e.kind]}" + ("-latency" if measure == LAT else ""),
                             "a": e.name.split(" - ")[0] if e.kind == "cable" else e.name,
                             **({"b": e.name.split(" - ")[1]} if e.kind == "cable" else {}),
                             "ratio": round(e.ratio, 4), "ratio_lo": round(e.lo, 4), "ratio_hi": round(e.hi, 4),
                             "note": f"{e.kind} {e.name} {moved} since {since} ({before:.{d}f} -> {after:.{d}f} "
                                     f"{unit}" + (f", median of {e.n} pairs)" if e.n > 1 else ")")})
    was = {(f["kind"], f.get("a"), f.get("b")) for f in was_found if f["kind"] != "failed"}
    now = {(f["kind"], f.get("a"), f.get("b")) for f in now_found if f["kind"] != "failed"}
    for kind, a, b in sorted(now - was, key=str):
        rows.append({"kind": "new", "a": a, "b": b, "note": f"{kind} {a}{' - ' + b if b else ''} (not in the "
                                                          f"baseline of {since})"})
    for kind, a, b in sorted(was - now, key=str):
        rows.append({"kind": "fixed", "a": a, "b": b, "note": f"{kind} {a}{' - ' + b if b else ''} (in the "
                                                            f"baseline of {since}, not now)"})
    return rows, lines


def same_cluster(old: list[str], new: list[str], source: str) -> list[str]:
    """The endpoints both runs measured; UsageError where they share fewer than half of the new run's."""
    have = set(old)
    common = [n for n in new if n in have]
    if len(common) < 2 or len(common) < len(new) / 2:
        raise UsageError(f"{source}: the baseline shares {len(common)} of this run's {len(new)} endpoints "
                         f"(it measured {', '.join(old[:3])}...): a run of another cluster? Give a baseline "
                         "of the same hosts")
    return common


REGRESSIONS = ("lost-", "new")  # kinds of change that make the verdict fail


@dataclass(frozen=True)
class Expected:
    """A reference value for a class of links (ReFrame's reference with its tolerance, and a warn halo)."""

    link: str  # inside (a pair under one switch), across (through an uplink), any
    metric: str  # mb_s or lat_us
    value: float
    warn: float  # percent worse than value that warns
    fail: float  # percent worse than value that fails


REFERENCE_HEADER = ["link", "metric", "expected", "warn_pct", "fail_pct"]


def load_reference(path: str) -> list[Expected]:
    """A reference file: CSV ``link,metric,expected,warn_pct,fail_pct`` (header first, # comments),
    link one of inside, across, any; metric mb_s or lat_us; warn below fail. One line per mistake."""
    import csv
    import io

    from commbench.core.output.results import read_text_file

    text = read_text_file(path, "reference file (CSV: link,metric,expected,warn_pct,fail_pct)")
    out: list[Expected] = []
    seen_header = False
    for no, row in enumerate(csv.reader(io.StringIO(text)), 1):
        cells = [c.strip() for c in row]
        if not any(cells) or cells[0].startswith("#"):
            continue
        where = f"--reference {path} line {no}"
        if not seen_header:
            if [c.lower() for c in cells] != REFERENCE_HEADER:
                raise UsageError(f"{where}: the first line must be the header {','.join(REFERENCE_HEADER)}")
            seen_header = True
            continue
        if len(cells) != 5:
            raise UsageError(f"{where}: give 5 cells ({','.join(REFERENCE_HEADER)}), not {len(cells)}")
        link, metric = cells[0].lower(), cells[1].lower()
        if link not in ("inside", "across", "any"):
            raise UsageError(f"{where}: link {cells[0][:20]!r} is not inside, across or any")
        if metric not in ("mb_s", "lat_us"):
            raise UsageError(f"{where}: metric {cells[1][:20]!r} is not mb_s or lat_us")
        try:
            value, warn, fail = (float(c) for c in cells[2:])
        except ValueError:
            raise UsageError(f"{where}: expected, warn_pct and fail_pct are numbers, not {','.join(cells[2:])[:40]!r}"
                             ) from None
        top = 100 if metric == "mb_s" else 1e6  # a bandwidth cannot fall by 100 % or more; a latency can grow
        if not (value > 0 and 0 <= warn < fail < top and np.isfinite(value)):
            raise UsageError(f"{where}: give expected > 0 and 0 <= warn_pct < fail_pct" +
                             (" < 100" if metric == "mb_s" else "") + f", not {value:g}, {warn:g}, {fail:g}")
        out.append(Expected(link, metric, value, warn, fail))
    if not out:
        raise UsageError(f"--reference {path}: no reference line below the header")
    return out


def check_reference(ev: Evidence, expected: list[Expected]) -> tuple[list[dict], list[str]]:
    """Each class of links' median pair against its reference: fail beyond fail_pct worse, warn beyond
    warn_pct (the halo ReFrame's users ask for); the pairs beyond the fail band are counted."""
    rows, lines = [], []
    topo = ev.topology
    k = len(ev.names)
    pairs = [(a, b) for a in range(k) for b in range(a + 1, k)]

    def crosses(p: tuple[int, int]) -> bool:
        return bool(topo.uplinks(ev.names[p[0]], ev.names[p[1]])) if topo is not None else False

    for x in expected:
        m = ev.bw if x.metric == "mb_s" else ev.lat
        chosen = [float(m[p]) for p in pairs if np.isfinite(m[p]) and
                  (x.link == "any" or (x.link == "across") == crosses(p))]
        label_ = f"{x.link} {x.metric}"
        if not chosen:
            lines.append(f"reference {label_}: no pair of this class measured")
            continue
        med = float(np.median(chosen))
        worse = (x.value - med) / x.value * 100 if x.metric == "mb_s" else (med - x.value) / x.value * 100
        beyond = sum(((x.value - v) / x.value * 100 if x.metric == "mb_s" else (v - x.value) / x.value * 100) > x.fail
                     for v in chosen)
        state = "fail" if worse > x.fail else "warn" if worse > x.warn else "pass"
        text = (f"reference {label_}: median {med:.{1 if x.metric == 'mb_s' else 2}f} against {x.value:g} "
                f"({-worse:+.0f} %; warn beyond {x.warn:g} % worse, fail beyond {x.fail:g} %): {state}; "
                f"{beyond} of {len(chosen)} pairs beyond the fail band")
        lines.append(text)
        if state != "pass":
            rows.append({"kind": f"reference-{state}", "a": label_, "note": text})
    return rows, lines
