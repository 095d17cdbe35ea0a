"""One run on one rank, from start to end, the same for benchmarks and training.

A ``Session`` opens the world (rendezvous) and its watchdog, checks that every rank was started
with the same options, writes the metadata and rows on rank 0, and ends the run one way whatever
happens: bad input stops every rank with status 2; a peer's fault is re-raised naming this rank
and host; a bug stops the other ranks with 1 (its traceback kept). Resources registered with
``on_close`` are released in reverse order.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
from collections.abc import Callable, Sequence
from types import TracebackType

from commbench.core.errors import CommbenchError, PeerError, RunAborted, UsageError, say
from commbench.core.output.results import ResultsWriter, run_metadata
from commbench.core.run.placement import Placement, end_stuck_step
from commbench.core.run.watchdog import Watchdog
from commbench.core.run.world import World


def options_digest(options: dict) -> str:
    """A digest of the plain options but the output file."""
    plain = {k: v for k, v in sorted(options.items()) if isinstance(v, (str, int, float, bool, type(None)))
             and k != "output"}
    return hashlib.sha256(json.dumps(plain, sort_keys=True).encode()).hexdigest()


def check_same_command(world: World, digest: str) -> None:
    """Every rank must measure the same thing: compare a digest of what it decided once, at start."""
    digests = world.allgather_json("options", digest)
    if len(set(digests)) > 1:
        odd = [r for r, d in enumerate(digests) if d != digests[0]]
        raise UsageError(f"ranks {odd} were started with options different from rank 0's; "
                         "start every rank with the same command")


def end_run(world: World, exc: Exception) -> None:
    """A rank failed with exc: bad input stops every rank with status 2; a peer's fault is re-raised
    naming this rank; a bug stops the others with 1 (the caller re-raises it, keeping the traceback)."""
    if isinstance(exc, UsageError):
        world.abort(str(exc), 2)
    elif isinstance(exc, PeerError):
        if not world.tolerant:  # a peer died, stopped or hung: under srun it must not hold the step
            end_stuck_step()
        raise PeerError(f"rank {world.rank} on host {world.host}: {exc}") from None
    elif isinstance(exc, CommbenchError) and not isinstance(exc, RunAborted):  # e.g. a full disk
        say(str(exc))  # said before the others end (the launcher
        world.abort(str(exc), exc.exit_code)  # may stop this rank once they have)
        raise RunAborted(str(exc), exc.exit_code) from None
    elif not isinstance(exc, RunAborted):
        world.abort(f"rank {world.rank} on host {world.host} failed: {exc!r}", 1)


class Session:
    """``with Session(placement, timeout, bind, options, packages) as run:`` ... ``run.finish()``; ``plan``:
    the digest ranks compare (default: of the options)."""

    def __init__(self, placement: Placement, timeout: float, bind: str | None, options: dict,
                 packages: Sequence[str], tolerant: bool = False, plan: str | None = None) -> None:
        self.world = World(placement, timeout, bind, tolerant)
        self.watchdog = Watchdog(self.world)
        self.options = options
        self.plan = plan or options_digest(options)  # what every rank must have decided alike
        self.packages = tuple(packages)
        self.writer: ResultsWriter | None = None
        self._closers: list[Callable[[], object]] = []
        self._finished = False

    @property
    def rank(self) -> int:
        return self.world.rank

    def __enter__(self) -> Session:
        try:
            check_same_command(self.world, self.plan)
        except BaseException as exc:
            self.__exit__(type(exc), exc, exc.__traceback__)
            raise
        return self

    def pids_here(self) -> list[int] | None:
        """Rank 0: the process ids of the run's ranks on its host (what ``machine`` leaves out of the
        machine's other work); None on the other ranks. Every rank calls it."""
        ranks = self.world.allgather_json("cpu-pids", [socket.gethostname(), os.getpid()])
        return [pid for host, pid in ranks if host == ranks[0][0]] if self.world.rank == 0 else None

    def metadata(self, bench: str, extra: dict) -> dict:
        """The run's metadata: options (with ``extra``), hosts, versions, command line, run id."""
        return run_metadata(bench, {**self.options, **extra}, self.world.hosts, self.packages,
                            self.world.wireup_record)

    def open_results(self, path: str | None, meta: dict, keys: Sequence[str]) -> ResultsWriter | None:
        """Rank 0: the results file, metadata first, rows appended as they are measured."""
        if self.world.rank == 0 and path:
            self.writer = ResultsWriter(path, meta, list(keys))
        return self.writer

    def on_close(self, close: Callable[[], object]) -> None:
        self._closers.append(close)

    def finish(self, name: str = "done") -> None:
        """Every rank got here (waiting as long as the others live: the last point may be long on one
        rank); stop the watchdog; the world closes in an orderly way on exit. A tolerant run waits for
        the ranks still alive."""
        self.world.barrier(name, patient=True, survivors=self.world.tolerant)
        self.watchdog.stop()
        self._finished = True

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            if isinstance(exc, Exception):
                end_run(self.world, exc)
        finally:
            self.watchdog.stopped.set()  # the main thread reports its own error
            for close in reversed(self._closers):
                close()
            if self.writer:
                self.writer.close()
            if self._finished:
                self.world.close()
