"""Rank 0's side of a cluster run: the steps of every test, measured through the fabric
(_cluster/fabric.py: the ranks, or a simulated fabric), a row written per pair or link as each step
ends, what was measured kept as evidence; an endpoint the fabric loses (died, or silent past its
timeout) fails its pairs naming it, and the steps after it leave it out.
"""

from __future__ import annotations

from collections.abc import Iterator

from commbench.benchmarks._cluster.fabric import Fabric, Pair, PairStep
from commbench.benchmarks._cluster.resume import Resume
from commbench.benchmarks._cluster.schedule import Budget
from commbench.core.analysis.evidence import Evidence
from commbench.core.measure.payload import Payload
from commbench.transports.base import LOSS_KEYS

Rows = Iterator[tuple[Payload, dict | None]]


LOSS = tuple(k.key for k in LOSS_KEYS)


class Conductor:
    """Rank 0: the steps of every test, each measured through the fabric and gathered into rows."""

    def __init__(self, fabric: Fabric, bw_payload: Payload, names: list[str], evidence: Evidence, budget: Budget,
                 resume: Resume) -> None:
        self.fabric, self.bw_payload, self.names, self.evidence = fabric, bw_payload, names, evidence
        self.budget, self.resume = budget, resume
        self.events: list[str] = []  # what happened to the run itself (an endpoint lost, the plan redone)
        self.steps = 0  # the pairs and links measured
        self.slowest = 0.0  # the longest step so far (s): --budget's pace
        self.took = 0.0  # the last step's time (s)
        self.rounds_cost = [0, 0, 0.0, 0.0]  # pair rounds, pairs, s, s of their longest pairs' loops

    def live(self) -> list[int]:
        """The endpoints (indices) still answering: one lost is given no more work."""
        lost = self.fabric.lost()
        return [i for i in range(len(self.names)) if i not in lost]

    def lost_since(self, before: set[int]) -> list[int]:
        """The endpoints (indices) lost since those in ``before`` were."""
        return [i for i in self.fabric.lost() if i not in before]

    def why_not(self, a: int, b: int) -> str:
        lost = self.fabric.lost()
        why = [lost[i] for i in (a, b) if i in lost]
        return f"not measured: {why[0]}" if why else "not measured"

    def over_budget(self, what: str, count: int) -> bool:
        return self.budget.over(what, count, self.slowest)

    def emit(self, rows: list[dict]) -> Rows:
        """Rows into the evidence and out to the results file, as they are."""
        for row in rows:
            self.evidence.add(row)
            yield self.bw_payload, row

    def _timed(self, measure, *args):
        began = self.fabric.now()
        got = measure(*args)
        self.took = self.fabric.now() - began
        self.slowest = max(self.slowest, self.took)
        return got

    def pairs(self, test: str, rnd: int, pairs: list[Pair], latency: bool, extra: dict | None = None) -> Rows:
        """One round: every pair at once, each synchronised on its own; a pair's result, or why an
        endpoint of it was lost."""
        written = (extra or {}).get("test", test)
        if written != "pairwise" and self.over_budget(written, len(pairs)):
            return
        lost = self.fabric.lost()
        steps: list[PairStep] = []
        results: dict[Pair, dict | list[dict]] = {}
        for a, b in pairs:
            old = self.resume.take({"test": written, "round": rnd, "a": self.names[a], "b": self.names[b],
                                    **(extra or {})})
            if old:  # --resume: measured by the run this one continues
                results[(a, b)] = old
            elif a in lost or b in lost:
                results[(a, b)] = {"error": self.why_not(a, b)}
            else:
                steps.append(PairStep((a, b), f"{test}.{rnd}.{a}.{b}", latency, (extra or {}).get("via"),
                                      test == "pairwise"))
        self.steps += len(steps)
        got = self._timed(self.fabric.pairs, steps)
        results.update(got)
        if steps:  # what the round cost beyond its longest pair's measurements: dial, set-up, barriers, results
            measuring = max(float(g.get("measure_s") or 0.0) for g in got.values())
            add = (1, len(steps), self.took, measuring)
            self.rounds_cost = [x + y for x, y in zip(self.rounds_cost, add, strict=True)]
        yield from self.rows(test, rnd, pairs, results, extra)

    def rows(self, test: str, rnd: int, pairs: list[Pair], results: dict, extra: dict | None = None) -> Rows:
        """A row per pair (rows kept from a resumed run as they were), and one per pair and transport of
        --transports' others."""
        rows: list[dict] = []
        lost = self.fabric.lost()
        for a, b in pairs:
            got = results[(a, b)]
            if isinstance(got, list):  # rows kept from the run --resume continues
                rows += got
                continue
            row = {"test": test, "round": rnd, "a": self.names[a], "b": self.names[b], "a_rank": self.fabric.rank(a),
                   "b_rank": self.fabric.rank(b), "lat_us": got.get("lat_us"), "lat_p99_us": got.get("lat_p99_us"),
                   "mb_s": got.get("mb_s"), "wrong": got.get("wrong"),
                   "note": short(got.get("error")) or (f"via {extra['via']}" if extra and extra.get("via") else None),
                   **{k: got[k] for k in LOSS if k in got}, **(extra or {})}
            if "error" in got:
                row["error"] = got["error"]
                gone = [i for i in (a, b) if i in lost]
                if gone:
                    row["lost"] = self.names[gone[0]]
            rows.append(row)
            for name, other in (got.get("via") or {}).items():  # the same pair over --transports' others
                rows.append({**{k: v for k, v in row.items() if k not in LOSS}, "lat_us": other.get("lat_us"),
                             "lat_p99_us": other.get("lat_p99_us"), **{k: other[k] for k in LOSS if k in other},
                             "mb_s": other.get("mb_s"), "wrong": other.get("wrong"), "via": name,
                             "note": short(other.get("error")) or f"via {name}",
                             **({"error": other["error"]} if "error" in other else {})})  # (-t's pair had none)
        yield from self.emit(rows)

    def one_group(self, kind: str, test: str, order: list[int]) -> dict:
        """Every endpoint in ``order`` (indices) in one group (a ring, a cut) measuring at once; the
        group's result (or why its first endpoint was lost)."""
        self.steps += len(order) // 2 if kind == "cut" else len(order)
        return self._timed(self.fabric.group, kind, test, order)

    def cost_lines(self, seconds: float, requests: int, beats: int) -> list[str]:
        """What the run cost rank 0's rendezvous, and the pair rounds beyond their measuring."""
        rounds, pairs, wall, measuring = self.rounds_cost
        if self.fabric.where != "ranks":  # no rendezvous: the fabric's own time
            return [f"{seconds:.1f} s of the {self.fabric.where} fabric's time: {pairs} pairs in {rounds} rounds, "
                    f"{self.steps} pairs or links measured"]
        out = [f"{seconds:.1f} s; the rendezvous answered {requests} requests ({requests / max(seconds, 1e-9):.0f}/s): "
               f"{(requests - beats) / max(self.steps, 1):.1f} per pair or link measured ({self.steps}), and {beats} "
               "heartbeats"]
        if pairs:
            out.append(f"pair rounds: {rounds} ({pairs} pairs) took {wall:.1f} s, {measuring:.1f} s of it their "
                       f"longest pair's measuring: {(wall - measuring) / rounds * 1e3:.0f} ms a round, "
                       f"{(wall - measuring) / pairs * 1e3:.0f} ms a pair beyond its measurements "
                       "(connecting, set-up, barriers, results)")
        return out


def short(error: str | None) -> str | None:
    """A failure's reason in one table cell."""
    if not error:
        return None
    return error if len(error) <= 90 else error[:87] + "..."
