"""A rank's watchdog: the guarantee that no rank outlives a dead or stopped peer by more than its timeout.

Transports notice most failures themselves (a closed socket, a failed RPC) and say so. A rank
blocked inside a C call (MPI_Recv, a gRPC stream) cannot; this thread, on its own rendezvous
connection, heartbeats every half second and learns the run's status. If a rank has died (and
the main thread has not reported it within GRACE s) or a rank's heartbeat is older than the
timeout plus GRACE (a stopped or hung process), it prints one line naming that rank and host and ends this
process with exit status 1 (``os._exit``: a thread blocked in MPI cannot be unwound). In a tolerant run
(cluster evaluation) a dead or stopped peer is left to the waits that need it (core/run/collectives.py);
losing rank 0, which serves the rendezvous, still ends every rank.

While a point's timed loop runs (``quiet``), the thread sleeps: it beats once every timeout / 2 s
instead of every INTERVAL, so the timing rank has no background wake-ups or rendezvous traffic
(the server marks a rank stale only after timeout + GRACE), and it wakes the moment the loop ends.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from commbench.core.errors import CommbenchError, say
from commbench.core.run.rendezvous import StoreClient

INTERVAL = 0.5
GRACE = 2.0  # for the main thread to report a failure itself
ABORT_GRACE = 0.5  # after another rank aborted the run (rank 0 waits up to 3 s for the others to go)


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
        self.client.beat(self.timeout)  # registered before any data moves, so a rank stopped early is seen too
        self.thread = threading.Thread(target=self._run, name="commbench-watchdog", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        me = f"rank {self.world.rank} on host {self.world.host}"
        failed_since = None
        while not self._sleep():
            try:
                status = self.client.beat(self.timeout + GRACE)  # a transport's own timeout speaks first
            except CommbenchError as exc:
                return self._die(f"{me}: {exc}")
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

    def _sleep(self) -> bool:
        """Wait for the next beat: INTERVAL, and while a timed loop runs, until it ends (at most
        quiet_interval). True once stopped."""
        if self.stopped.wait(INTERVAL):
            return True
        if not self.loud.is_set():
            self.loud.wait(self.quiet_interval)
        return self.stopped.is_set()

    @contextmanager
    def quiet(self) -> Iterator[None]:
        """No beats (but one every timeout / 2 s) while the block runs: a timed loop."""
        self.loud.clear()
        try:
            yield
        finally:
            self.loud.set()

    def _die(self, message: str) -> None:
        if self.stopped.is_set():
            return
        say(message)
        os._exit(1)

    def stop(self) -> None:
        self.stopped.set()
        self.loud.set()
        self.thread.join(2 * INTERVAL + 1)
        self.client.close()
