"""Attribution: the smallest set of hosts, switches, uplinks and cables that explains a cluster's slow
pairs, each with its effect and a confidence interval.

Every measured pair's figure is turned into a *ratio* to the cluster's reference (bandwidth: measured /
reference; latency: reference / measured), so 1 is as good as the healthy pairs and 0.5 is half as
good. A flow runs at its narrowest part's rate, so a pair is as slow as the slowest thing on its path:
its two hosts, the uplinks of the switches it climbs through (topology.py), or its own cable. Each of
these *factors* covers a set of pairs (a host: every pair it is in; a switch: every pair with a host
under it; an uplink: every pair that crosses it; a cable: its pair).

The reference is robust to the faults it is meant to find: each host's median over its pairs inside
its own switch (crossing no uplink) or over all its pairs, whichever is higher, then the median over
the hosts. One slow host moves no healthy host's median; a degraded uplink moves no
pair inside a switch; fewer than half the hosts slow move the median of hosts not at all.

Explanations are chosen greedily, as a set cover: first the factor with the most low pairs less the
fine pairs it would wrongly take with it (a degraded uplink before its switch, whose pairs inside are
fine; a whole slow switch before its uplink, which leaves them out). A factor is a candidate when
the median ratio of the pairs it covers (and nothing chosen before covers) is below the cut, stands
out of the pairs' spread (modified z-score over 3.5, or twice the cut's distance from 1), and is
*consistent*: at least 80 % of those pairs are low (below halfway to the cut). Consistency is what
tells a slow host (all its pairs low) from a host behind a slow uplink (its pairs inside the switch
are fine) from a slow uplink (every pair through it low). Factors that cover exactly the same pairs
are one explanation named by both (a two-switch tree: every crossing pair crosses both uplinks). Low
pairs that no host, switch or uplink explains are cables. The effect is the median ratio over the
factor's own pairs; its 95 % interval a bootstrap of that median (fixed seed: the same file gives the
same findings).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import hostlist
import numpy as np

from commbench.core.analysis.topology import Topology
from commbench.core.measure.outliers import MAD_SCALE, Z

CONSISTENT = 0.8  # share of a factor's pairs that must be low for it to explain them
MIN_PAIRS = 2  # a host, switch or uplink is judged on two pairs or more
BOOTSTRAP = 2000
KIND_ORDER = {"host": 0, "uplink": 1, "switch": 2, "group": 3, "cable": 4}

Pair = tuple[int, int]


@dataclass(frozen=True)
class Factor:
    """Something pairs share: a host, a switch, an uplink, or one pair's cable."""

    kind: str  # host, switch, uplink, group (hosts that share something no topology names), cable
    name: str  # the host, the switch (``or`` between ones that cover the same pairs), a hostlist, or "a - b"
    pairs: frozenset[Pair]
    members: tuple[int, ...] = ()  # the endpoints it concerns (a host: itself; a switch: its hosts; a cable: both)
    judged: frozenset[Pair] | None = None  # the pairs it is judged on, where not all of ``pairs``

    @property
    def basis(self) -> frozenset[Pair]:
        """The pairs it is judged on."""
        return self.pairs if self.judged is None else self.judged


@dataclass(frozen=True)
class Explanation:
    """A factor chosen to explain low pairs: its effect (median ratio to the reference) and interval."""

    factor: Factor
    ratio: float
    lo: float
    hi: float
    low: int  # its pairs below the cut
    n: int  # its pairs (those no earlier explanation covers)
    basis: str = "pairs"  # what it was judged on: the pairwise matrix, or a figure of its own ("alone")
    value: float | None = None  # that figure, where it has one
    reference: float | None = None  # and what it was compared with

    @property
    def kind(self) -> str:
        return self.factor.kind

    @property
    def name(self) -> str:
        return self.factor.name


def factors(names: Sequence[str], pairs: Sequence[Pair], topo: Topology | None) -> list[Factor]:
    """Every host; with a topology of two switches or more, every switch and every uplink a pair
    crosses; merged where two cover the same pairs."""
    k = len(names)
    mine: list[set[Pair]] = [set() for _ in range(k)]  # each host's pairs, in one pass over the pairs
    for p in pairs:
        mine[p[0]].add(p)
        mine[p[1]].add(p)
    found: list[Factor] = [Factor("host", names[i], frozenset(mine[i]), (i,)) for i in range(k)]
    if topo is not None and len(set(topo.switch_of[n] for n in names)) > 1:
        leaf = [topo.switch_of[n] for n in names]
        for s in dict.fromkeys(leaf):
            under = tuple(i for i in range(k) if leaf[i] == s)
            found.append(Factor("switch", s, frozenset(p for i in under for p in mine[i]), under))
        crossing: dict[str, set[Pair]] = {}
        for p in pairs:
            for u in topo.uplinks(names[p[0]], names[p[1]]):
                crossing.setdefault(u, set()).add(p)
        for u, ps in crossing.items():
            under = tuple(i for i in range(k) if u in topo.chain(leaf[i]))
            found.append(Factor("uplink", u, frozenset(ps), under))
    merged: dict[tuple[str, frozenset[Pair]], Factor] = {}
    for f in found:
        if not f.pairs:
            continue
        key = (f.kind, f.pairs)
        if key in merged:
            old = merged[key]
            merged[key] = Factor(f.kind, f"{old.name} or {f.name}", f.pairs, tuple(sorted(set(old.members) |
                                                                                          set(f.members))))
        else:
            merged[key] = f
    return list(merged.values())


def group_factor(names: Sequence[str], r: dict[Pair, float], soft: float) -> list[Factor]:
    """Without a topology: the hosts whose pairs to the others are low while the pairs among them are
    not (what a shared switch or uplink does), as one factor covering the pairs across the group's
    edge: the hosts with half their pairs low or more, but not most of them (those are slow hosts)."""
    k = len(names)
    low, seen = [0] * k, [0] * k
    for p, x in r.items():
        for i in p:
            seen[i] += 1
            low[i] += x < soft
    group = [i for i in range(k) if seen[i] and 1 / 2 <= low[i] / seen[i] < CONSISTENT]
    if not 2 <= len(group) <= k - 2:
        return []
    inside = [x for p, x in r.items() if p[0] in group and p[1] in group]
    if not inside or float(np.median(inside)) < soft:
        return []
    edge = frozenset(p for p in r if (p[0] in group) != (p[1] in group))
    return [Factor("group", hostlist.collect_hostlist([names[i] for i in group]), edge, tuple(group))]


def local_pairs(names: Sequence[str], pairs: Sequence[Pair], topo: Topology | None) -> list[Pair]:
    """The pairs that cross no uplink (all of them without a topology)."""
    if topo is None:
        return list(pairs)
    return [p for p in pairs if not topo.uplinks(names[p[0]], names[p[1]])]


def host_medians(values: np.ndarray, names: Sequence[str], topo: Topology | None) -> list[float]:
    """Each host's median over all its pairs or over its pairs inside its switch, whichever is higher
    (a host behind a slow uplink is fine inside its switch; a fine host beside two slow ones in a
    switch of three is fine across the others); NaN where none was measured. One pass over the pairs."""
    pairs = measured_pairs(values)
    local = set(local_pairs(names, pairs, topo))
    mine: list[list[float]] = [[] for _ in names]
    near: list[list[float]] = [[] for _ in names]
    for p in pairs:
        for i in p:
            mine[i].append(float(values[p]))
            if p in local:
                near[i].append(float(values[p]))
    return [max(float(np.median(m)), float(np.median(n)) if len(n) >= 2 else 0.0) if m else float("nan")
            for n, m in zip(near, mine, strict=True)]


def reference(values: np.ndarray, names: Sequence[str], topo: Topology | None) -> float:
    """The healthy figure: the median over hosts of host_medians. NaN: nothing measured."""
    meds = [m for m in host_medians(values, names, topo) if m == m]
    return float(np.median(meds)) if meds else float("nan")


def measured_pairs(values: np.ndarray) -> list[Pair]:
    k = values.shape[0]
    return [(a, b) for a in range(k) for b in range(a + 1, k) if np.isfinite(values[a, b])]


def ratios(values: np.ndarray, ref: float, higher: bool) -> dict[Pair, float]:
    """Each measured pair's figure as a share of the reference's goodness (1: as good; 0.5: half)."""
    out = {}
    for p in measured_pairs(values):
        v = float(values[p])
        out[p] = v / ref if higher else (ref / v if v > 0 else float("inf"))
    return out


def median_ci(values: Sequence[float], seed: int = 0) -> tuple[float, float, float]:
    """(median, 2.5th, 97.5th percentile of bootstrap medians): seeded, so reproducible."""
    arr = np.asarray(values, dtype=np.float64)
    med = float(np.median(arr))
    if len(arr) < 2:
        return med, med, med
    rng = np.random.default_rng(seed)
    boots = np.median(arr[rng.integers(0, len(arr), size=(BOOTSTRAP, len(arr)))], axis=1)
    return med, float(np.percentile(boots, 2.5)), float(np.percentile(boots, 97.5))


def explain(names: Sequence[str], values: np.ndarray, topo: Topology | None, cut: float,
            higher: bool = True) -> tuple[float, list[Explanation]]:
    """(the reference, the explanations of the low pairs, the most low pairs first, cables last).

    ``values``: the symmetric pairwise matrix (NaN: not measured); ``cut``: the ratio below which a
    pair is slow (bandwidth at 25 % off: 0.75; latency at 1.5x: 1 / 1.5); ``higher``: whether a
    higher figure is better (bandwidth) or worse (latency)."""
    per_host = host_medians(values, names, topo)
    meds = [m for m in per_host if m == m]
    ref = float(np.median(meds)) if meds else float("nan")
    if ref != ref or ref <= 0:
        return ref, []
    r = ratios(values, ref, higher)
    judge = _Judge(names, r, [m / ref if higher else ref / m for m in per_host], topo, cut)
    chosen: list[Explanation] = []
    open_pairs = set(r)
    candidates = factors(names, list(r), topo)
    if topo is None or len(set(topo.switch_of.values())) < 2:
        candidates += group_factor(names, r, judge.soft)
    elif crossing_load_bound(r, judge.local_all, cut, judge.soft):
        candidates = [f if f.kind == "uplink" else replace(f, judged=f.pairs & judge.local_all) for f in candidates]
    while (best := judge.best(candidates, chosen, open_pairs)) is not None:
        chosen.append(best)
        open_pairs -= best.factor.pairs
    return ref, chosen + judge.cables(open_pairs)


def crossing_load_bound(r: dict[Pair, float], local: set[Pair], cut: float, soft: float) -> bool:
    """Whether most hosts' pairs across uplinks are slow while their pairs inside their switch are fine:
    an oversubscribed tree under the tournament, whose rounds share each uplink among several pairs
    (a slow host or a slow uplink makes only some hosts' crossing pairs slow). The crossing figures
    then say how the uplinks were shared, not how fast a host is: hosts and switches are judged on
    the pairs inside switches (still taking their crossing pairs with them), uplinks on their crossing
    pairs, and the rechecks measure each alone. ``soft``: the ratio at or above which a pair looks fine."""
    inside: dict[int, list[float]] = {}
    crossing: dict[int, list[float]] = {}
    for p, x in r.items():
        for i in p:
            (inside if p in local else crossing).setdefault(i, []).append(x)
    judged = [i for i in inside if len(inside[i]) >= 2 and len(crossing.get(i, ())) >= 2]
    bound = sum(float(np.median(crossing[i])) < cut and float(np.median(inside[i])) >= soft for i in judged)
    return len(judged) >= 3 and bound > len(judged) / 2


class _Judge:
    """Whether a factor's pairs stand out of the healthy pairs' spread (explain's rules)."""

    def __init__(self, names: Sequence[str], r: dict[Pair, float], host_ratio: list[float], topo: Topology | None,
                 cut: float) -> None:
        self.names, self.r, self.cut = names, r, cut
        self.soft = (1 + cut) / 2
        looks_fine = {i for i, x in enumerate(host_ratio) if x == x and x >= self.soft}
        self.healthy = [p for p in r if p[0] in looks_fine and p[1] in looks_fine]
        self.local = set(local_pairs(names, self.healthy, topo))
        self.local_all = set(local_pairs(names, list(r), topo))

    def spread(self, open_pairs: set[Pair]) -> float:
        """The healthy pairs' spread: the MAD of log ratios around the reference (log 1 = 0) over the
        pairs between hosts that look fine, that no explanation took: those inside a switch where 3 or
        more are (an uplink's pairs are not the spread), else all of them, else every pair left (small
        switches with slow hosts in them: their pairs would be taken for the spread and hide them)."""
        mine: list[float] = []
        for tier in (self.local, self.healthy, open_pairs):
            mine = [self.r[p] for p in tier if p in open_pairs]
            if len(mine) >= 3:
                break
        return float(np.median(np.abs(np.log(np.maximum(mine, 1e-12))))) if mine else 0.0

    def stands_out(self, ratio: float, n: int, mad: float) -> bool:
        """Below the cut, and out of the healthy spread (the median of n pairs: its standard error,
        1.2533 sigma / sqrt(n)) or below twice the cut's distance from 1 whatever the spread."""
        if ratio >= self.cut:
            return False
        if ratio < 1 - 2 * (1 - self.cut):
            return True
        se = mad / MAD_SCALE * (1.2533 / np.sqrt(n) if n > 1 else 1.0)
        return se <= 0 or abs(np.log(max(ratio, 1e-12))) / se > Z

    def best(self, candidates: list[Factor], chosen: list[Explanation], open_pairs: set[Pair]) -> Explanation | None:
        """The candidate with the most low pairs less the fine ones it would take with it (then the
        slowest), of those that stand out and are consistent; None where none is."""
        best = None
        mad = self.spread(open_pairs)
        for f in candidates:
            if any(e.factor is f for e in chosen):
                continue
            mine = sorted(f.basis & open_pairs)
            if len(mine) < MIN_PAIRS:
                continue
            rs = [self.r[p] for p in mine]
            if not self.stands_out(float(np.median(rs)), len(rs), mad) or \
                    sum(x < self.soft for x in rs) < CONSISTENT * len(rs):
                continue
            if f.judged is not None and f.kind == "switch" and max(rs) >= self.soft:
                continue  # two of its hosts fine between themselves: not the switch (slow hosts under it)
            taken = [self.r[p] for p in f.pairs & open_pairs]
            low = sum(x < self.cut for x in taken)
            fine = sum(x >= self.soft for x in taken)  # pairs it would call slow that are not
            # among equals the slowest first: in an oversubscribed tree the uplinks of all racks but one
            # explain every slow crossing pair, and the one whose pairs are slowest is the likeliest fault
            rank = (fine - low, len(taken), KIND_ORDER[f.kind], float(np.median(rs)), f.name)
            if best is None or rank < best[0]:
                best = (rank, f, rs)
        if best is None:
            return None
        _, f, rs = best
        med, lo, hi = median_ci(rs)
        return Explanation(f, med, lo, hi, sum(x < self.cut for x in rs), len(rs))

    def cables(self, open_pairs: set[Pair]) -> list[Explanation]:
        """The low pairs no host, switch or uplink explains: each its own cable, if it stands out."""
        mad = self.spread(open_pairs)
        out = []
        for p in sorted(open_pairs, key=lambda p: (self.r[p], p)):
            if self.stands_out(self.r[p], 1, mad):
                f = Factor("cable", f"{self.names[p[0]]} - {self.names[p[1]]}", frozenset({p}), p)
                out.append(Explanation(f, self.r[p], self.r[p], self.r[p], 1, 1))
        return out
