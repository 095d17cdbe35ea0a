"""A rank's watchdog: the guarantee that no rank outlives a dead or stopped peer by more than its timeout.

Transports notice most failures themselves (a closed socket, a failed RPC) and say so. A rank
blocked inside a C call (MPI_Recv, a gRPC stream) cannot; this thread, on its own rendezvous
connection, heartbeats and learns the run's status. A beat is a long poll: the store answers it at
once when there is news (a rank died, aborted, or has not beaten for timeout + STALE_GRACE s: stopped
or hung), else after INTERVAL s, and the thread sleeps in it; its answer is the next beat's cue. So
whatever the launcher (local, mpirun, srun), every rank hears of a stopped peer within the store's
0.5 s tick of its heartbeat going stale, at most timeout + STALE_GRACE + 0.5 s after the stop, and
of a stopped rank 0 (no answer) as soon. It prints one line naming that rank and host and ends this
process with exit status 1 (``os._exit``: a thread blocked in MPI cannot be unwound); a death is
left GRACE s for the main thread to report itself. In a tolerant run (cluster evaluation) a dead or
stopped peer is left to the waits that need it (core/run/collectives.py); losing rank 0, which
serves the rendezvous, still ends every rank.

Loading TensorFlow's libraries holds the GIL for seconds on a loaded machine, so this thread cannot
beat: the import runs ``excused`` (core/imports.py), and the store counts this rank's silence from the
import's end (at most IMPORT_EXCUSE s), not as a stop.

While a point's timed loop runs (``quiet``), and always in a tolerant run (whose ranks act on
nothing but an abort, which comes at once), a beat waits up to timeout / 2 s instead of INTERVAL:
the timing rank has no background wake-ups or rendezvous traffic, and still hears news at once; at
10,000 ranks and a 60 s timeout, the heartbeats cost rank 0 about 330 requests a second.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from commbench.core import imports
from commbench.core.errors import CommbenchError, say
from commbench.core.run.placement import end_stuck_step
from commbench.core.run.rendezvous import StoreClient

INTERVAL = 0.5
GRACE = 2.0  # for the main thread to report a failure itself
STALE_GRACE = 1.0  # a heartbeat older than timeout + this is a stopped or hung rank (beats come every timeout / 2)
ABORT_GRACE = 0.5  # after another rank aborted the run (rank 0 waits up to 3 s for the others to go)
IMPORT_EXCUSE = 120.0  # s a rank may go without beating while it imports TensorFlow (a loaded machine's worst)


class Watchdog:
    def __init__(self, world) -> None:
        p = world.placement
        self.world = world
        self.timeout = world.timeout
        self.stopped = threading.Event()
        self.loud = threading.Event()  # cleared while a timed loop runs
        self.loud.set()
        self.quiet_interval = max(INTERVAL, self.timeout / 2)
        self.client = StoreClient(world.root_address[0], world.root_address[1], p.token, world.rank, world.size,
                                  world.host, world.timeout, role="watchdog")
        self.client.rank0 = world.store.rank0
        self.client.beat(self.timeout)  # registered before any data moves, so a rank stopped early is seen too
        self.thread = threading.Thread(target=self._run, name="commbench-watchdog", daemon=True)
        self.thread.start()
        imports.holding_gil = lambda: self.excused(IMPORT_EXCUSE)

    def _run(self) -> None:
        me = f"rank {self.world.rank} on host {self.world.host}"
        failed_since = None
        while not self.stopped.is_set():
            wait = INTERVAL if self.loud.is_set() and not self.world.tolerant else self.quiet_interval
            try:
                status = self.client.beat(self.timeout + STALE_GRACE, wait)
            except CommbenchError as exc:
                return self._die(f"{me}: {exc}")
            news = status.get("aborted") or status.get("failed") or status.get("stale")
            if news and self.stopped.wait(0.1):  # answered at once while there is news: no spinning
                return
            if status.get("aborted"):  # the rank that aborted said why; this one ends quietly, soon
                failed_since = failed_since or time.monotonic()
                if time.monotonic() - failed_since > ABORT_GRACE:
                    os._exit(int(status["aborted"][1]))
            elif self.world.tolerant:  # a dead or stopped rank is the run's finding, not its end
                continue
            elif status.get("failed"):
                failed_since = failed_since or time.monotonic()
                if time.monotonic() - failed_since > GRACE:
                    return self._die(f"{me}: {status['failed']}")
            for rank, host, age in status.get("stale", []):
                if rank != self.world.rank:
                    return self._die(f"{me}: rank {rank} on host {host} stopped responding "
                                     f"(no heartbeat for {age:g} s; hung or stopped; see --timeout)")

    @contextmanager
    def quiet(self) -> Iterator[None]:
        """Beats held up to timeout / 2 s (news still comes at once) while the block runs: a timed loop."""
        self.loud.clear()
        try:
            yield
        finally:
            self.loud.set()

    @contextmanager
    def excused(self, seconds: float) -> Iterator[None]:
        """A step that may hold this process's GIL for seconds (loading TensorFlow's libraries), so this
        thread cannot beat: the other ranks take its silence for no stop until the step ends, for at
        most ``seconds``. Said one way on the main connection: waiting for an answer could deadlock (rank
        0's GIL held by TensorFlow waiting for this rank, and its store, in the same process, unable to
        answer), and this thread's connection may be held by a beat waiting for the same store. A
        stopped watchdog (the run ended, however) excuses nothing: nobody counts its beats."""
        if self.stopped.is_set():
            yield
            return
        self.world.store.excuse(seconds)
        try:
            yield
        finally:
            self.world.store.excuse(0)

    def _die(self, message: str) -> None:
        if self.stopped.is_set():
            return
        say(message)
        if not self.world.tolerant:  # a cluster evaluation's other ranks go on (it lost rank 0: they end too)
            end_stuck_step()
        os._exit(1)

    def stop(self) -> None:
        imports.holding_gil = contextlib.nullcontext
        self.stopped.set()
        self.loud.set()
        self.client.bye()  # the store closes the connection: a beat being waited in ends now
        self.thread.join(2 * INTERVAL + 1)
        self.client.close()
