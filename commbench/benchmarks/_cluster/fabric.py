"""The seam between the cluster's plan and what it measures: a ``Fabric`` measures pairs, rings and
cuts of endpoints 0..n-1 and says which endpoints it lost and what time it is. The planner (the
tournament, --serial, the load check, the rechecks, --budget, --resume, the re-plan after a loss) and
the verdict run unchanged over either fabric:

- ``RankFabric``: the run's ranks over a transport. Rank 0 hands each endpoint its task and collects
  the results, one rendezvous request per rank per task (core/run/tasks.py); a rank that dies or stops
  is lost; under MPI the world is shrunk around a dead rank (ULFM).
- the simulated fabric (emulators/simfabric.py): the same pairs at once as SimGrid transfers over a
  platform made from the topology file, with its faults.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from commbench.benchmarks._cluster.worker import PairWorker
from commbench.core.run.tasks import Dispatcher

Pair = tuple[int, int]


@dataclass(frozen=True)
class PairStep:
    """A pair to measure in a round: its tag (unique in the run), latency too or bandwidth alone, over
    which of --transports' others (None: -t's), and over every other of them too (the tournament's)."""

    pair: Pair
    tag: str
    latency: bool
    via: str | None = None
    also: bool = False


class Fabric:
    """What the cluster's tests measure through. A result is a dict: ``lat_us``, ``lat_p99_us``,
    ``mb_s``, ``wrong``, ``measure_s`` (the pair's own measuring, s), ``via`` (the same over the other
    transports), or ``error`` (with ``lost``: an endpoint of it was lost)."""

    where = "ranks"  # metadata: what measured

    def now(self) -> float:
        """The fabric's clock (s): wall time, or the simulation's."""
        raise NotImplementedError

    def rank(self, i: int) -> int:
        """The rank standing for endpoint ``i`` (rows' a_rank, b_rank)."""
        raise NotImplementedError

    def lost(self) -> dict[int, str]:
        """Endpoints lost so far (died, or silent past their timeout) and why."""
        raise NotImplementedError

    def pairs(self, steps: list[PairStep]) -> dict[Pair, dict]:
        """Every pair at once, each synchronised on its own; each pair's result."""
        raise NotImplementedError

    def group(self, kind: str, tag: str, order: list[int]) -> dict:
        """Every endpoint in ``order`` in one group measuring at once: ``ring`` (each sends to the next,
        ``links``: each one's receive rate) or ``cut`` (the first half streams to the second, ``links``:
        each pair's rate, ``mb_s``: the cut's)."""
        raise NotImplementedError

    def events(self) -> list[str]:
        """What happened to the fabric itself (an MPI world shrunk around a dead rank)."""
        return []


class RankFabric(Fabric):
    """The run's ranks: ``chosen[i]`` stands for endpoint i. Rank 0 does its own task meanwhile."""

    def __init__(self, worker: PairWorker, chosen: list[int], bw_time: float) -> None:
        self.worker, self.world, self.chosen, self.bw_time = worker, worker.ctx.world, chosen, bw_time
        self.tasks = Dispatcher(self.world)
        self.ctl: dict[int, object] = {}  # each rank's control listener, where its pairs are dialed
        self.mpi = False  # some pair is measured over MPI
        self.shrunk: set[int] = set()  # the dead ranks MPI's world was shrunk around (or told it could not)
        self.said: list[str] = []
        self.slowest = 0.0  # the longest step so far (s), for the limit after which a rank is hung

    def now(self) -> float:
        return time.monotonic()

    def rank(self, i: int) -> int:
        return self.chosen[i]

    def lost(self) -> dict[int, str]:
        self.tasks.refresh()
        return {i: self.tasks.lost[r] for i, r in enumerate(self.chosen) if r in self.tasks.lost}

    def events(self) -> list[str]:
        return self.said

    def start(self, address: object, others: range) -> None:
        """Every rank's control address (each rank's first report); ranks that stand for no host sent
        home, but under MPI, where every rank stays to shrink the world should one die (ULFM)."""
        first = self.tasks.collect(others)
        self.ctl = {0: address, **{r: got.get("ctl") for r, got in first.items()}}
        if not self.mpi:
            self.tasks.end(r for r in others if r not in self.chosen)

    def end(self, others: range) -> None:
        self.tasks.end(r for r in others if r in self.chosen or self.mpi)

    def pairs(self, steps: list[PairStep]) -> dict[Pair, dict]:
        tasks: dict[int, dict] = {}
        for s in steps:
            ra, rb = self.chosen[s.pair[0]], self.chosen[s.pair[1]]
            task = {"kind": "pair", "tag": s.tag, "members": [ra, rb], "latency": s.latency, "via": s.via,
                    "also": s.also}
            tasks[ra], tasks[rb] = {**task, "addr": self.ctl[rb]}, task
        got = self._step(tasks)
        out = {}
        for s in steps:
            first, second = got[self.chosen[s.pair[0]]], got[self.chosen[s.pair[1]]]
            lost = first if first.get("lost") else second if second.get("lost") else None
            out[s.pair] = {"error": lost["error"], "lost": True} if lost else first
        return out

    def group(self, kind: str, tag: str, order: list[int]) -> dict:
        members = [self.chosen[i] for i in order]
        got = self._step({m: {"kind": kind, "tag": tag, "members": members} for m in members})[members[0]]
        return {"error": got["error"]} if got.get("lost") else got

    def _step(self, tasks: dict[int, dict]) -> dict[int, dict]:
        """Every task at once (rank 0 does its own meanwhile); each rank's result, or why it has none."""
        own = tasks.pop(0, None)
        began = time.monotonic()
        self.tasks.assign(tasks)
        got = {0: self.worker.do(own)} if own is not None else {}
        # a rank still busy long after every wait of its task would have timed out is hung (an MPI call
        # to a peer that died does not time out): dropped, so one stuck rank does not hold the run
        limit = 3 * self.world.timeout + 10 * max(self.slowest, self.bw_time + 1)
        got.update(self.tasks.collect(tasks, max(0.0, limit - (time.monotonic() - began))))
        self.slowest = max(self.slowest, time.monotonic() - began)
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
            self.said.append(f"{names} died: MPI has no fault tolerance in this run (start it with mpiexec "
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
        self.said.append(f"{names} died: MPI's world shrunk around it (ULFM) in {time.monotonic() - began:.1f} s"
                         + (f"; {len(failed)} rank(s) failed to: {next(iter(failed.values()))}" if failed else ""))
