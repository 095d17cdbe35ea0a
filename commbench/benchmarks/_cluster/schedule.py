"""The cluster's schedules: which pairs are measured at once. The round-robin tournament (``N - 1``
rounds of ``N / 2`` disjoint pairs, the circle method), ``--serial`` (one pair at a time), the rounds
planned again without the endpoints a run lost, cuts along the switch tree, random rings; which rank
stands for each host; and ``--budget``'s share of the rounds.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import overload

import numpy as np

from commbench.core.analysis.topology import Topology
from commbench.core.errors import UsageError, say

PAIRWISE_SHARE = 0.7  # --budget: of the time left after round 1, what the tournament's rounds may take
Rounds = Sequence[list[tuple[int, int]]]


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


def tree_cut(names: list[str], live: list[int], topo: Topology, k: int) -> tuple[list[int] | None, list[int] | None]:
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




class Budget:
    """--budget: when the run must be done, which of the tournament's rounds fit, and what was left
    out for want of time (by test)."""

    def __init__(self, seconds: float | None, seed: int | None, serial: bool) -> None:
        self.seconds, self.seed, self.serial = seconds, seed, serial
        self.ends: float | None = None  # the fabric's clock by which the run must be done
        self.clock: Callable[[], float] = time.monotonic
        self.left_out: dict[str, int] = {}

    def start(self, clock: Callable[[], float]) -> None:
        """The run begins now, by ``clock`` (the fabric's: wall time, or the simulation's)."""
        self.clock = clock
        self.ends = clock() + self.seconds if self.seconds else None

    def fit(self, rounds: Rounds, at: int, took: float, planned: int, k: int) -> tuple[Rounds, str | None] | None:
        """Of the rounds from ``at`` on, those that fit in the pairwise share of the time left (the
        rechecks, rings and cuts need the rest), at ``took`` s a round: a random sample of whole
        rounds, so every host meets as many others; and what to say of it (None: they all fit). None
        without a budget (the rounds stay as they are: a tournament's are never made all at once)."""
        left = len(rounds) - at
        if self.ends is None:
            return None
        afford = int(PAIRWISE_SHARE * max(0.0, self.ends - self.clock()) / max(took, 1e-3))
        if afford >= left:
            return rounds[at:], None
        rng = np.random.default_rng(self.seed)
        keep = sorted(rng.choice(left, size=afford, replace=False).tolist()) if afford else []
        count = rounds.pairs_in if isinstance(rounds, Tournament) else lambda i: len(rounds[i])
        dropped = sum(count(at + i) for i in range(left)) - sum(count(at + i) for i in keep)
        self.left_out["pairwise"] = dropped
        unit = "turns" if self.serial else "rounds"
        met = "" if self.serial else f"each endpoint met about {1 + afford} of its {k - 1} others, "
        say(f"cluster: --budget {self.seconds:g} s: {1 + afford} of {planned} {unit} fit")
        return [rounds[at + i] for i in keep], (
            f"budget {self.seconds:g} s: {1 + afford} of {planned} tournament {unit} fit (round 1 took {took:.1f} s), "
            f"the others left out at random (--seed {self.seed}): {met}{dropped} of {k * (k - 1) // 2} pairs not "
            "measured")

    def over(self, what: str, count: int, slowest: float) -> bool:
        """True (and ``what`` counted as left out) when a step would not end in time at the slowest
        step's pace so far."""
        if self.ends is None or self.clock() + max(slowest, 0.1) <= self.ends:
            return False
        self.left_out[what] = self.left_out.get(what, 0) + count
        return True

    def summary(self) -> str | None:
        if not self.left_out:
            return None
        return f"budget {self.seconds:g} s: left out for want of time: " + ", ".join(
            f"{n} {t} {'pair or link' if n == 1 else 'pairs or links'}" for t, n in self.left_out.items())
