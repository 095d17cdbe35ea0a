"""The world: this rank, all ranks, their hosts, and collectives over the rendezvous store.

Transports use the world to exchange their connection details (addresses, queue-pair info)
and benchmarks use it to agree on iteration counts and gather results; none of this is on a
timed path. Collective calls must be made by every rank in the same order.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import signal
import socket
import subprocess
import time
from pathlib import Path

from commbench.core.errors import PeerError, UsageError
from commbench.core.run import token as run_token
from commbench.core.run.collectives import Collectives
from commbench.core.run.placement import Placement
from commbench.core.run.rendezvous import StoreClient, StoreServer
from commbench.core.run.sockets import bind_listener

ABORT_GRACE = 3.0


def _own_address(host: str) -> str:
    """The local address ``host`` names, to listen on; every interface where it names none here
    (e.g. behind NAT, where the name resolves to an address this machine does not hold)."""
    try:
        addr = socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]
        with socket.socket() as probe:
            probe.bind((addr, 0))
        return addr
    except (OSError, IndexError, UnicodeError):
        return "0.0.0.0"


def _bootstrap_guard(rank: int, timeout: float) -> subprocess.Popen:
    """A process that, after ``timeout`` s, says why and kills this rank (unless killed first)."""
    msg = (f"commbench: rank {rank} on host {socket.gethostname()}: the MPI bootstrap did not finish within "
           f"{timeout:g} s (a rank hung or died before the run started; see --timeout)")
    return subprocess.Popen(["sh", "-c", f"sleep {timeout:g} && echo {shlex.quote(msg)} >&2 && kill -9 {os.getpid()}"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True)


class World(Collectives):
    """Every rank of the run (collectives: core/run/collectives.py). ``tolerant``: a rank that dies is recorded,
    not the end of the run (cluster evaluations); the waits that need it say so."""

    def __init__(self, placement: Placement, timeout: float, bind: str | None = None, tolerant: bool = False) -> None:
        if placement.mpi_bootstrap:
            from commbench.core.run.mpi_env import bootstrap

            # MPI_Init (which holds the GIL) and MPI_Bcast cannot time out and no watchdog exists yet:
            # a guard process ends this rank if a peer hangs or dies before the run has started
            guard = _bootstrap_guard(placement.rank, timeout)
            try:
                hosts, port, token, fd = bootstrap(placement.rank, placement.size, placement.launcher,
                                                   placement.root_port, bind)
            finally:  # the whole group: a surviving `sleep` would hold the launcher's stderr pipe open
                os.killpg(guard.pid, signal.SIGKILL)
                guard.wait()
            placement = dataclasses.replace(placement, root_host=hosts, root_port=port, token=token, listen_fd=fd)
        token_file = Path(placement.token_file) if placement.token_file else None
        if token_file and placement.rank == 0:
            placement = dataclasses.replace(placement, token=run_token.new())  # published once it listens
        self.token_file = token_file if placement.rank == 0 else None  # withdrawn at close
        self.placement = placement
        self.rank = placement.rank
        self.size = placement.size
        self.timeout = timeout
        self.bind = bind
        self.tolerant = tolerant
        self.members = tuple(range(self.size))
        self.host = placement.host_name
        self._server: StoreServer | None = None
        self._seq = 0
        if self.rank == 0:
            self._server = StoreServer(self._listener(), placement.token, self.size, tolerant)
            if token_file:
                run_token.publish(token_file, placement.token, self._server.port)
        port = self._server.port if self._server else placement.root_port
        host = placement.root_host  # rank 0 too: the local end of this connection is the address peers get
        self.root_address = (host, port)
        self.store = self._join(host, port, token_file)
        info = self.allgather_json("world", {"host": self.host, "addr": self.store.local_address})
        self.hosts = [i["host"] for i in info]
        self.addresses = [i["addr"] for i in info]

    def _join(self, host: str, port: int, token_file: Path | None) -> StoreClient:
        """Connect to the store; a rank reading the token from rank 0's file tries again while the file
        changes (it may first have read one left by an earlier step with the same ids)."""
        if not token_file or self.rank == 0:
            return StoreClient(host, port, self.placement.token, self.rank, self.size, self.host, self.timeout)
        deadline = time.monotonic() + self.timeout
        while True:
            token, published = run_token.fetch(token_file, max(0.0, deadline - time.monotonic()), self.rank,
                                               self.host)
            try:  # --port given: the same on every rank; else the one rank 0 chose and published
                store = StoreClient(host, port or published, token, self.rank, self.size, self.host,
                                    max(1.0, deadline - time.monotonic()))
            except PeerError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
                continue
            self.placement = dataclasses.replace(self.placement, token=token)
            self.root_address = (host, port or published)  # where the watchdog connects too
            return store

    def _listener(self) -> socket.socket:
        p = self.placement
        if p.listen_fd is not None:
            try:
                sock = socket.socket(fileno=p.listen_fd)
                if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
                    return sock
                sock.detach()  # not ours to close
            except OSError:
                pass
            raise UsageError(f"COMMBENCH_RDV_FD={p.listen_fd} is not a listening socket of this process: only "
                             "commbench's launcher sets it; unset the COMMBENCH_* variables and start again")
        # the address the other ranks are given (srun: the step's first node), not every interface
        return bind_listener(self.bind or _own_address(p.root_host), p.root_port, "rendezvous")

    @property
    def server(self) -> StoreServer | None:
        """Rank 0: the rendezvous it serves, read and written in its own process (None on the others)."""
        return self._server

    @property
    def store_requests(self) -> tuple[int, int] | None:
        """Rank 0: the requests its rendezvous has answered so far, and how many of them were heartbeats
        (None on the other ranks)."""
        return (self._server.requests, self._server.heartbeats) if self._server else None

    def describe(self, rank: int) -> str:
        """'rank 1 on host node7 (10.0.0.7)': how error messages name a peer."""
        if rank < len(getattr(self, "hosts", ())):
            return f"rank {rank} on host {self.hosts[rank]} ({self.addresses[rank]})"
        return f"rank {rank}"

    def abort(self, message: str, code: int) -> None:
        """Tell every other rank that this run is over; they exit with ``code`` without repeating it.

        Rank 0 serves the store, so it lingers (a few seconds at most) until the others have heard.
        """
        self.store.abort(message, code)
        if self._server:
            self._server.wait_for_others(self.rank, min(self.timeout, ABORT_GRACE))

    def close(self) -> None:
        if self._server:
            self._server.wait_for_others(self.rank, self.timeout)
        self.store.close()
        if self._server:
            self._server.close()
        if self.token_file:
            run_token.withdraw(self.token_file)
