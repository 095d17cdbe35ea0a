"""The cluster's tests, each declared once: what ``--tests`` names it, the rows it writes, how --resume
finds its steps again, and its steps (rank 0 hands them out through the conductor). In nccl-tests'
spirit: the shared work lives in the conductor and the worker, a test says what it measures.

``TESTS`` maps each ``--tests`` word to the tests it runs, in order: pairwise is the tournament (or
``--serial``'s turns), then the load check (every host alone beside the best where the tournament's
own load held its rounds back), then the rechecks of every suspect over each transport.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from commbench.benchmarks._cluster.conductor import Conductor, Rows, short
from commbench.benchmarks._cluster.schedule import random_ring, replan, serial, tournament, tree_cut
from commbench.core.analysis.evidence import BW, LAT, RECHECK
from commbench.core.analysis.kinds import JUDGED, Measure
from commbench.core.analysis.topology import Topology
from commbench.core.errors import say


@dataclass
class Plan:
    """What the tests are run with: the options they read, the topology, the random draws."""

    serial: bool
    slow_pct: float
    cuts: int
    resume: str  # --resume's file ("" where none)
    topology: Topology | None
    via: list[str]  # --transports' others
    rng: np.random.Generator


def pair_key(a: str, b: str) -> tuple:
    return ("pairwise", *sorted((a, b)))


class ClusterTest:
    """A test: the rows it writes (their ``test``), how --resume keys them, its steps."""

    rows: tuple[str, ...] = ()

    @staticmethod
    def key(row: dict) -> tuple:
        """A step by its round, pair, transport and role (a recheck's, an alone pair's)."""
        return (row.get("test"), row.get("round"), row.get("a"), row.get("b"), row.get("via"), row.get("role"))

    def run(self, c: Conductor, plan: Plan) -> Rows:
        raise NotImplementedError


class Pairwise(ClusterTest):
    """The tournament's rounds (or --serial's turns). An endpoint lost (died, or silent past its
    timeout) is dropped and the rounds left are planned again over the endpoints left, its pairs
    written as not measured rather than each waiting for it. A resumed run keeps the pairs measured
    before and plans the others into as few rounds as fit."""

    rows = ("pairwise",)

    @staticmethod
    def key(row: dict) -> tuple:
        return pair_key(str(row.get("a")), str(row.get("b")))  # in any round: a resumed run plans anew

    def run(self, c: Conductor, plan: Plan) -> Rows:
        k = len(c.names)
        rounds: Sequence[list[tuple[int, int]]] = serial(k) if plan.serial else tournament(k)
        rounds = yield from self._resumed(c, plan, rounds)
        planned, rnd, at, began = len(rounds), 0, 0, c.fabric.now()
        while at < len(rounds):  # ``at``: the next round (a tournament's are made one at a time, never held whole)
            rnd, at = rnd + 1, at + 1
            before = set(c.fabric.lost())
            yield from c.pairs("pairwise", rnd, rounds[at - 1], latency=True)
            if rnd == 1 and at < len(rounds):
                took = c.fabric.now() - began
                say(f"cluster: pairwise round 1 of {planned} took {took:.1f} s: about {took * planned:.0f} s for "
                    f"the {'turns' if plan.serial else 'tournament'}")
                fitted = c.budget.fit(rounds, at, took, planned, k)
                if fitted is not None:
                    (rounds, line), at = fitted, 0
                    c.events += [line] if line else []
            gone = c.lost_since(before)
            if gone and at < len(rounds):
                live = set(c.live())
                old = len(rounds) - at
                rounds, skipped = replan(list(rounds[at:]), live, plan.serial)
                at = 0
                names, why = ", ".join(c.names[i] for i in gone), c.fabric.lost()[gone[0]]
                c.events.append(f"lost {names} in pairwise round {rnd} of {planned} ({why}); its {len(skipped)} "
                                f"pair(s) left not measured, the {sum(map(len, rounds))} others planned again over "
                                f"the {len(live)} endpoints left: {len(rounds)} round(s) where {old} were left")
                for a, b in skipped:
                    yield from c.rows("pairwise", rnd, [(a, b)], {(a, b): {"error": c.why_not(a, b)}})

    @staticmethod
    def _resumed(c: Conductor, plan: Plan, rounds: Sequence[list[tuple[int, int]]]):
        """The pairs a resumed run measured, as rows; the rounds left to measure."""
        def row(a: int, b: int) -> dict:
            return {"test": "pairwise", "a": c.names[a], "b": c.names[b]}

        done = [(a, b) for rnd in rounds for a, b in rnd if c.resume.has(row(a, b))] if c.resume.replay else []
        if not done:
            return rounds
        for a, b in done:
            yield from c.emit(c.resume.take(row(a, b)) or [])
        left = set(done)
        kept, _ = replan([[p for p in rnd if p not in left] for rnd in rounds], set(range(len(c.names))),
                         plan.serial)
        c.events.append(f"resumed {plan.resume} (run {(c.resume.resumed or {}).get('run_id')}): {len(done)} of "
                        f"{len(done) + sum(map(len, kept))} pairs kept as measured there, the rest in "
                        f"{len(kept)} round(s)")
        return kept


class LoadCheck(ClusterTest):
    """A tournament's rounds share the hosts' CPUs (and, emulated, this machine's): a pair of the best
    hosts measured alone says whether the rounds were held back by their own load; if so, every host
    is measured alone beside the best one (N - 1 pairs, one at a time), so that a slow host hidden
    among pairs as slow as it is still found (LinkTest's serial re-test)."""

    rows = ("alone",)

    def run(self, c: Conductor, plan: Plan) -> Rows:
        best = c.evidence.best_pair()
        if plan.serial or len(c.names) < 4 or not best:
            return
        yield from c.pairs(RECHECK[BW], 0, [best], latency=False, extra={"suspect": "tournament", "role": "control"})
        if not c.evidence.load_bound(plan.slow_pct):
            return
        for n, i in enumerate((i for i in c.live() if i not in best), 1):
            yield from c.pairs("alone", n, [(best[0], i)], latency=False)


class Recheck(ClusterTest):
    """Each suspect measured again (core/analysis/evidence.py), over -t's transport and each of
    --transports' others, bandwidth then latency: a probe pair through it alone (an uplink: a pair from
    each of its hosts at once), then a control pair of hosts no suspect concerns (as many at once), so
    a tournament's cross-traffic or a busy moment is not named; those slow the first time are measured
    once more, control first."""

    rows = tuple(RECHECK.values())

    def run(self, c: Conductor, plan: Plan) -> Rows:
        for via in (None, *plan.via):
            for measure in JUDGED:  # loss: where the transport counted it (tcp)
                yield from self._measure(c, plan, measure, via)

    @staticmethod
    def _measure(c: Conductor, plan: Plan, measure: Measure, via: str | None) -> Rows:
        rnd = 0
        for second in (False, True):
            ev = c.evidence if via is None else c.evidence.via.get(via)
            n = "-2" if second else ""
            live = set(c.live())
            for suspect, probe, control in (ev.recheck_plan(measure, plan.slow_pct, second) if ev else []):
                if not {i for p in (*probe, *control) for i in p} <= live:
                    continue  # an endpoint lost since: its pairs are the finding already
                for role, pairs in ((("control", control), ("probe", probe)) if second else
                                    (("probe", probe), ("control", control))):
                    rnd += 1
                    yield from c.pairs(RECHECK[measure] + (f"-{via}" if via else ""), rnd, list(pairs),
                                       latency=measure == LAT,
                                       extra={"suspect": suspect, "role": role + n,  # the row's test: plain
                                              **({"via": via, "test": RECHECK[measure]} if via else {})})


class Rings(ClusterTest):
    """The ordered ring, then a random one whose links are other pairs: every live endpoint sends to
    the next while receiving from the one before."""

    rows = ("ring-ordered", "ring-random")

    @staticmethod
    def key(row: dict) -> tuple:
        return (row.get("test"),)

    def run(self, c: Conductor, plan: Plan) -> Rows:
        k = len(c.names)
        for test, order in (("ring-ordered", list(range(k))), ("ring-random", random_ring(plan.rng, k))):
            yield from self._ring(c, test, order)

    @staticmethod
    def _ring(c: Conductor, test: str, order: list[int]) -> Rows:
        live = set(c.live())
        order = [i for i in order if i in live]
        old = c.resume.take({"test": test, "round": 1})
        if old and len(old) == len(order):  # --resume: this ring was measured by the run this one continues
            yield from c.emit(old)
            return
        if c.over_budget(test, len(order)):
            return
        got = c.one_group("ring", test, order)
        yield from c.emit([{"test": test, "round": 1, "a": c.names[order[pos - 1]], "b": c.names[i],
                            "a_rank": c.fabric.rank(order[pos - 1]), "b_rank": c.fabric.rank(i),
                            "mb_s": got["links"][pos] if "links" in got else None, "note": short(got.get("error"))}
                           for pos, i in enumerate(order)])


class Bisection(ClusterTest):
    """--cuts cuts, each pairing one half of the endpoints with the other, every pair streaming at once
    (Cut): with a topology the first along the tree (one child of a switch against its siblings),
    then random halves."""

    rows = ("bisection", "bisection-cut")

    @staticmethod
    def key(row: dict) -> tuple:
        return ("bisection", row.get("round"))

    def run(self, c: Conductor, plan: Plan) -> Rows:
        for n in range(1, plan.cuts + 1):
            live = c.live()
            left, right = tree_cut(c.names, live, plan.topology, n - 1) if plan.topology else (None, None)
            if left is None or right is None:  # random halves (and the rest of the cuts beside the tree's)
                order = [live[int(i)] for i in plan.rng.permutation(len(live))]
                half = len(order) // 2
                left, right = order[:half], order[half:2 * half]
            yield from self._cut(c, n, left, right)

    @staticmethod
    def _cut(c: Conductor, n: int, left: list[int], right: list[int]) -> Rows:
        old = c.resume.take({"test": "bisection", "round": n})
        if old and any(r["test"] == "bisection-cut" for r in old):  # --resume: measured by the run continued
            yield from c.emit(old)
            return
        if c.over_budget("bisection", len(left)):
            return
        got = c.one_group("cut", f"bisection.{n}", left + right)
        links = got.get("links") or [None] * len(left)
        rows = [{"test": "bisection", "round": n, "a": c.names[a], "b": c.names[b], "a_rank": c.fabric.rank(a),
                 "b_rank": c.fabric.rank(b), "mb_s": rate, "wrong": got.get("wrong"), "note": short(got.get("error")),
                 **({"error": got["error"]} if "error" in got else {})}
                for a, b, rate in zip(left, right, links, strict=True)]
        rates = [r for r in links if r is not None]
        rows.append({"test": "bisection-cut", "round": n, "a": f"{len(left)} pairs", "b": "", "mb_s": got.get("mb_s"),
                     "min_mb_s": min(rates, default=None),
                     "note": f"slowest pair {min(rates):.1f} MB/s" if rates else "no pair measured",
                     "pairs": len(left), "failed": len(left) - len(rates)})
        yield from c.emit(rows)


TESTS: dict[str, tuple[ClusterTest, ...]] = {"pairwise": (Pairwise(), LoadCheck(), Recheck()), "ring": (Rings(),),
                                             "bisection": (Bisection(),)}
_BY_ROW = {row: t for tests in TESTS.values() for t in tests for row in t.rows}


def step_key(row: dict) -> tuple:
    """The step that measured ``row``, as --resume finds it again (its test's key)."""
    test = _BY_ROW.get(str(row.get("test")))
    return (test or ClusterTest).key(row)
