"""Rank 0 hands each rank its next task and collects the result: one rendezvous request per task per rank.

A rank's report of its last task and its wait for the next are one GET frame carrying a SET
(``StoreClient.swap``); rank 0 reads and writes the store in its own process (``StoreServer.put``
and ``take``), which costs no request. So a round of pairs costs the rendezvous two requests a pair,
whatever the two do between themselves (over their own connection: core/run/link.py), and a rank
with no task waits in one GET. Tasks and results are JSON objects; a task ``{"kind": "end"}`` ends
a rank's loop.

Rank 0 hears of a rank that died at once (its connection ends) and of one that stopped or lost its
network when its heartbeat goes stale (timeout + grace s: the watchdog beats every timeout / 2 s
even while it measures), so ``collect`` never waits on a rank that will not answer, and no fixed
deadline cuts a long but healthy task short.
"""

from __future__ import annotations

import json
import time

from commbench.core.errors import PeerTimeout
from commbench.core.run.collectives import STALE_GRACE

END = {"kind": "end"}
LOOK_S = 0.5  # rank 0 looks for ranks that died or went silent this often while it collects


def _task(rank: int, seq: int) -> str:
    return f"task/{rank}/{seq}"


def _result(rank: int, seq: int) -> str:
    return f"result/{rank}/{seq}"


class Worker:
    """A rank other than 0: ``next(result)`` reports the last task's result (the first call: anything
    rank 0 should know of this rank) and returns the next task."""

    def __init__(self, world) -> None:
        self.world = world
        self.seq = 0

    def next(self, result: dict) -> dict:
        store, rank = self.world.store, self.world.rank
        self.seq += 1
        key = _task(rank, self.seq)
        try:
            blob = store.swap(_result(rank, self.seq - 1), json.dumps(result).encode(), key)
        except PeerTimeout:
            while True:  # no task yet (others are still measuring): wait on, one request per timeout
                try:
                    blob = store.get(key)
                    break
                except PeerTimeout:
                    continue
        return json.loads(blob)


class Dispatcher:
    """Rank 0's side: ``assign`` tasks, ``collect`` results (rank 0's own tasks are the caller's to run)."""

    def __init__(self, world) -> None:
        self.world = world
        self.server = world.server
        self.seq: dict[int, int] = {}  # rank -> its last task's number (0: its first report)
        self.lost: dict[int, str] = {}  # rank -> why it no longer answers (died, or stopped: dropped for good)
        self.dropped: set[int] = set()  # of which: alive but hung, given up on (drop)

    def assign(self, tasks: dict[int, dict]) -> None:
        for rank, task in tasks.items():
            self.seq[rank] = self.seq.get(rank, 0) + 1
            self.server.put(_task(rank, self.seq[rank]), json.dumps(task).encode())

    def collect(self, ranks, limit: float | None = None) -> dict[int, dict]:
        """Each rank's result of its last task (its first report if it has had none), or
        ``{"error": why, "lost": True}`` for a rank that died or stopped answering before it reported,
        or (``limit``) has not reported within ``limit`` s: hung in its task (e.g. inside an MPI call
        to a peer that died), its heartbeat still coming. Such a rank is dropped for good.

        Results are taken as they arrive (the store's ``arrivals``: what came, not a scan of what is
        awaited) and the ranks' liveness looked at every LOOK_S s, so a round costs rank 0 in
        proportion to its ranks however their results trickle in."""
        deadline = None if limit is None else time.monotonic() + limit
        waiting = {r: _result(r, self.seq.get(r, 0)) for r in ranks if r not in self.lost}
        rank_of = {key: r for r, key in waiting.items()}
        got = {r: {"error": self.lost[r], "lost": True} for r in ranks if r in self.lost}
        stale_after = self.world.timeout + STALE_GRACE
        self.server.watch(rank_of)
        look, deaths = time.monotonic(), -1
        while waiting:
            for key, blob in self.server.arrivals(LOOK_S):
                r = rank_of.get(key)
                if r is not None and waiting.pop(r, None) is not None:
                    got[r] = json.loads(blob)
            if not waiting or (time.monotonic() < look and len(self.server.dead) == deaths):
                continue  # a death is looked at once (its connection ended), silence every LOOK_S s
            look, deaths = time.monotonic() + LOOK_S, len(self.server.dead)
            for r, why in self.server.departed(stale_after).items():
                if r in waiting:
                    blob = self.server.take(waiting.pop(r))  # reported, then died: the report stands
                    self.lost[r] = why
                    got[r] = json.loads(blob) if blob is not None else {"error": why, "lost": True}
            if waiting and deadline is not None and time.monotonic() > deadline:
                for r in list(waiting):
                    del waiting[r]
                    self.drop(r, f"{self.world.describe(r)} did not finish its task within {limit:.0f} s (hung; "
                                 "its heartbeat still came)")
                    got[r] = {"error": self.lost[r], "lost": True}
        self.server.unwatch(rank_of)
        return got

    def drop(self, rank: int, why: str) -> None:
        """A rank that is alive but hung is lost like a dead one: no more work, and the run's last barrier
        does not wait for it (the rendezvous counts it dead)."""
        self.lost[rank] = why
        self.dropped.add(rank)
        self.server.declare_dead(rank, why)

    def refresh(self) -> None:
        """Note the ranks that died or stopped since the last look: they are given no more work."""
        for r, why in self.server.departed(self.world.timeout + STALE_GRACE).items():
            self.lost.setdefault(r, why)

    def died(self) -> set[int]:
        """The ranks lost whose process ended (their rendezvous connection closed): not hung, not silent."""
        with self.server.cond:
            dead = set(self.server.dead)
        return {r for r in self.lost if r in dead and r not in self.dropped}

    def end(self, ranks) -> None:
        """Every rank's last task: the loop ends (ranks lost get it too, should they come back)."""
        self.assign({r: END for r in ranks})

