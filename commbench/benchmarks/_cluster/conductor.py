"""Rank 0's side of a cluster run: it hands each endpoint its task and collects the results, one
rendezvous request per rank per task (core/run/tasks.py), writes a row per pair or link as each
step ends, keeps what it measured as evidence, and drops an endpoint that dies or stops (its pair
fails naming it; the steps after it leave it out).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from commbench.benchmarks._cluster.resume import Resume
from commbench.benchmarks._cluster.schedule import Budget
from commbench.benchmarks._cluster.worker import PairWorker, Setup
from commbench.core.analysis.evidence import Evidence
from commbench.core.measure.payload import Payload
from commbench.core.run.tasks import Dispatcher

Rows = Iterator[tuple[Payload, dict | None]]
Pair = tuple[int, int]


class Conductor:
    """Rank 0: the steps of every test, each handed out as tasks and gathered into rows."""

    def __init__(self, worker: PairWorker, setup: Setup, chosen: list[int], names: list[str], evidence: Evidence,
                 budget: Budget, resume: Resume, bw_time: float) -> None:
        self.worker, self.setup, self.world = worker, setup, worker.ctx.world
        self.chosen, self.names, self.evidence = chosen, names, evidence
        self.budget, self.resume, self.bw_time = budget, resume, bw_time
        self.tasks = Dispatcher(self.world)
        self.ctl: dict[int, object] = {}  # each rank's control listener, where its pairs are dialed
        self.mpi = False  # some pair is measured over MPI
        self.shrunk: set[int] = set()  # the dead ranks MPI's world was shrunk around (or told it could not)
        self.events: list[str] = []  # what happened to the run itself (an endpoint lost, the plan redone)
        self.steps = 0  # the pairs and links measured (tasks handed out)
        self.slowest = 0.0  # the longest step so far (s), for the limit after which a rank is hung
        self.took = 0.0  # the last step's wall time (s)
        self.rounds_cost = [0, 0, 0.0, 0.0]  # pair rounds, pairs, wall s, s of their longest pairs' loops

    def live(self) -> list[int]:
        """The endpoints (indices) still answering: a rank lost (died, or silent past its timeout) is
        given no more work."""
        self.tasks.refresh()
        return [i for i, r in enumerate(self.chosen) if r not in self.tasks.lost]

    def lost_since(self, before: set[int]) -> list[int]:
        """The endpoints (indices) lost since the ranks ``before`` were."""
        return [i for i, r in enumerate(self.chosen) if r in self.tasks.lost and r not in before]

    def why_not(self, a: int, b: int) -> str:
        lost = [self.tasks.lost[r] for r in (self.chosen[a], self.chosen[b]) if r in self.tasks.lost]
        return f"not measured: {lost[0]}" if lost else "not measured"

    def over_budget(self, what: str, count: int) -> bool:
        return self.budget.over(what, count, self.slowest)

    def emit(self, rows: list[dict]) -> Rows:
        """Rows into the evidence and out to the results file, as they are."""
        for row in rows:
            self.evidence.add(row)
            yield self.setup.bw_payload, row

    # -- one step: tasks handed out, results collected -----------------------------------------
    def step(self, tasks: dict[int, dict]) -> dict[int, dict]:
        """Every task at once (rank 0 does its own meanwhile); each rank's result, or why it has none."""
        own = tasks.pop(0, None)
        began = time.monotonic()
        self.tasks.assign(tasks)
        got = {0: self.worker.do(own)} if own is not None else {}
        # a rank still busy long after every wait of its task would have timed out is hung (an MPI call
        # to a peer that died does not time out): dropped, so one stuck rank does not hold the run
        limit = 3 * self.world.timeout + 10 * max(self.slowest, self.bw_time + 1)
        got.update(self.tasks.collect(tasks, max(0.0, limit - (time.monotonic() - began))))
        self.took = time.monotonic() - began
        self.slowest = max(self.slowest, self.took)
        if self.mpi and self.tasks.died() - self.shrunk:
            self._shrink()
        return got

    def _shrink(self) -> None:
        """A rank died under MPI: every rank left makes MPI's world anew without it (ULFM's shrink), so
        the communicators of later pairs can be made; without ULFM (mpiexec --with-ft ulfm --mca
        mpi_ft_detector true) the launcher has ended the job or MPI calls to the dead rank would hang."""
        from commbench.core.run import mpi_env

        dead = self.tasks.died() - self.shrunk
        self.shrunk |= dead
        names = ", ".join(self.world.describe(r) for r in sorted(dead))
        if not mpi_env.ulfm():
            self.events.append(f"{names} died: MPI has no fault tolerance in this run (start it with mpiexec "
                               "--with-ft ulfm --mca mpi_ft_detector true --mca mpi_ft_detector_timeout 60), so its "
                               "later pairs over MPI may fail")
            return
        began = time.monotonic()
        alive = [r for r in range(self.world.size) if r not in self.tasks.lost]
        self.tasks.assign({r: {"kind": "shrink"} for r in alive if r != 0})
        if 0 in alive:
            self.worker.do({"kind": "shrink"})
        # MPI learns of the death within its detector's timeout (mpi_ft_detector_timeout, 60 s advised)
        others = self.tasks.collect([r for r in alive if r != 0], 3 * self.world.timeout + 120)
        failed = {r: g["error"] for r, g in others.items() if "error" in g}
        self.events.append(f"{names} died: MPI's world shrunk around it (ULFM) in {time.monotonic() - began:.1f} s"
                           + (f"; {len(failed)} rank(s) failed to: {next(iter(failed.values()))}" if failed else ""))

    def pairs(self, test: str, rnd: int, pairs: list[Pair], latency: bool, extra: dict | None = None) -> Rows:
        """One round: every pair at once, each synchronised over its own connection; a pair's result is
        its first rank's, or why a rank of it was lost (died, or silent past its timeout)."""
        written = (extra or {}).get("test", test)
        if written != "pairwise" and self.over_budget(written, len(pairs)):
            return
        self.tasks.refresh()
        tasks: dict[int, dict] = {}
        results: dict[Pair, dict | list[dict]] = {}
        for a, b in pairs:
            old = self.resume.take({"test": written, "round": rnd, "a": self.names[a], "b": self.names[b],
                                    **(extra or {})})
            if old:  # --resume: measured by the run this one continues
                results[(a, b)] = old
                continue
            ra, rb = self.chosen[a], self.chosen[b]
            if ra in self.tasks.lost or rb in self.tasks.lost:
                results[(a, b)] = {"error": self.why_not(a, b)}
                continue
            task = {"kind": "pair", "tag": f"{test}.{rnd}.{a}.{b}", "members": [ra, rb], "latency": latency,
                    "via": (extra or {}).get("via"), "also": test == "pairwise"}
            tasks[ra], tasks[rb] = {**task, "addr": self.ctl[rb]}, task
            self.steps += 1
        measured = len(tasks) // 2  # (step takes rank 0's own task out of ``tasks``)
        got = self.step(tasks)
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
        yield from self.rows(test, rnd, pairs, results, extra)

    def rows(self, test: str, rnd: int, pairs: list[Pair], results: dict, extra: dict | None = None) -> Rows:
        """A row per pair (rows kept from a resumed run as they were), and one per pair and transport of
        --transports' others."""
        rows: list[dict] = []
        for a, b in pairs:
            got = results[(a, b)]
            if isinstance(got, list):  # rows kept from the run --resume continues
                rows += got
                continue
            row = {"test": test, "round": rnd, "a": self.names[a], "b": self.names[b], "a_rank": self.chosen[a],
                   "b_rank": self.chosen[b], "lat_us": got.get("lat_us"), "lat_p99_us": got.get("lat_p99_us"),
                   "mb_s": got.get("mb_s"), "wrong": got.get("wrong"),
                   "note": short(got.get("error")) or (f"via {extra['via']}" if extra and extra.get("via") else None),
                   **(extra or {})}
            if "error" in got:
                row["error"] = got["error"]
                gone = [i for i in (a, b) if self.chosen[i] in self.tasks.lost]
                if gone:
                    row["lost"] = self.names[gone[0]]
            rows.append(row)
            for name, other in (got.get("via") or {}).items():  # the same pair over --transports' others
                rows.append({**row, "lat_us": other.get("lat_us"), "lat_p99_us": other.get("lat_p99_us"),
                             "mb_s": other.get("mb_s"), "wrong": other.get("wrong"), "via": name,
                             "note": short(other.get("error")) or f"via {name}",
                             **({"error": other["error"]} if "error" in other else {})})  # (-t's pair had none)
        yield from self.emit(rows)

    def one_group(self, kind: str, test: str, order: list[int]) -> dict:
        """Every endpoint in ``order`` (indices) in one group (a ring, a cut) measuring at once; the
        group's result (its first rank's, or why that rank was lost)."""
        members = [self.chosen[i] for i in order]
        task = {"kind": kind, "tag": test, "members": members}
        self.steps += len(members) // 2 if kind == "cut" else len(members)
        got = self.step({m: task for m in members})[members[0]]
        return {"error": got["error"]} if got.get("lost") else got

    def cost_lines(self, seconds: float, requests: int, beats: int) -> list[str]:
        """What the run cost rank 0's rendezvous, and the pair rounds beyond their measuring."""
        out = [f"{seconds:.1f} s; the rendezvous answered {requests} requests ({requests / max(seconds, 1e-9):.0f}/s): "
               f"{(requests - beats) / max(self.steps, 1):.1f} per pair or link measured ({self.steps}), and {beats} "
               "heartbeats"]
        rounds, pairs, wall, measuring = self.rounds_cost
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
