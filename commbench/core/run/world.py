"""The world: this rank, all ranks, their hosts, and collectives over the rendezvous store.

The wire-up (rank 0's address and token, every rank's host) rides on the launcher where it can:
PMIx under srun --mpi=pmix and mpirun (core/run/pmix.py), MPI under an mpirun without it; rank 0's
store carries it only for the local launcher and srun without PMIx (``wireup_of``).

Transports use the world to exchange their connection details (addresses, queue-pair info)
and benchmarks use it to agree on iteration counts and gather results; none of this is on a
timed path. Collective calls must be made by every rank in the same order.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import socket
import time
from collections.abc import Mapping
from pathlib import Path

from commbench.core.errors import PeerError, UsageError
from commbench.core.run import mpi_env
from commbench.core.run import token as run_token
from commbench.core.run.collectives import Collectives
from commbench.core.run.guard import guarded
from commbench.core.run.placement import ENV_WIREUP, WIREUPS, Placement
from commbench.core.run.pmix import launched as pmix_launched
from commbench.core.run.rendezvous import StoreClient, StoreServer
from commbench.core.run.sockets import bind_listener, root_listener

ABORT_GRACE = 3.0
ROOT_KEY, WORLD_KEY = "commbench.root", "commbench.world"  # PMIx keys
WORLD_GATHER = "world"  # the store's all-gather of hosts and addresses, where it carries the wire-up


def _own_address(host: str) -> str:
    """The local address ``host`` names, to listen on; every interface where it names none here
    (e.g. behind NAT, where the name resolves to an address this machine does not hold)."""
    try:
        addr = str(socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)[0][4][0])
        with socket.socket() as probe:
            probe.bind((addr, 0))
        return addr
    except (OSError, IndexError, UnicodeError):
        return "0.0.0.0"


def _first_node_listener(placement: Placement, bind: str | None) -> socket.socket:
    """Rank 0's rendezvous on the address the other ranks are given (srun: the step's first node),
    not on every interface."""
    return bind_listener(bind or _own_address(placement.root_host), placement.root_port, "rendezvous")


def _guarded(rank: int, timeout: float) -> contextlib.AbstractContextManager[None]:
    """The wire-up's bound: MPI_Init and a launcher's fence cannot be interrupted, and no watchdog exists yet."""
    return guarded(f"commbench: rank {rank} on host {socket.gethostname()}: the launcher's wire-up did not finish "
                   f"within {timeout:g} s (a rank hung or died before the run started; see --timeout)", timeout)


def wireup_of(placement: Placement, env: Mapping[str, str] | None = None) -> str:
    """How the ranks learn rank 0's address and each other's hosts: "pmix" (the launcher's own
    exchange, srun --mpi=pmix and Open MPI's mpirun), "mpi" (MPI's broadcast and all-gather, under an
    mpirun without PMIx) or "store" (rank 0's, the local launcher's and srun's without PMIx).
    COMMBENCH_WIREUP=store|mpi chooses a fallback (to compare them)."""
    env = os.environ if env is None else env
    forced = env.get(ENV_WIREUP, "")  # its spelling checked with the launcher's variables (placement.detect)
    usable = [w for w in WIREUPS if (w == "pmix" and placement.launcher != "local" and pmix_launched(env))
              or (w == "mpi" and placement.mpi_bootstrap) or w == "store"]
    if forced and forced not in usable:
        raise UsageError(f"{ENV_WIREUP}={forced}: this launch offers {', '.join(usable)}; unset it or choose one")
    return forced or usable[0]


def _fields(text: str | object, spec: Mapping[str, type], what: str) -> dict:
    """A peer's JSON object (as text, or parsed) with the fields and types ``spec`` names, or a
    PeerError saying whose."""
    obj = text
    if isinstance(text, str):
        try:
            obj = json.loads(text)
        except ValueError:
            obj = None
    if not isinstance(obj, dict) or any(not isinstance(obj.get(k), t) for k, t in spec.items()):
        raise PeerError(f"{what} from the launcher's exchange is malformed")
    return obj


class World(Collectives):
    """Every rank of the run (collectives: core/run/collectives.py). ``tolerant``: a rank that dies is recorded,
    not the end of the run (cluster evaluations); the waits that need it say so."""

    def __init__(self, placement: Placement, timeout: float, bind: str | None = None, tolerant: bool = False) -> None:
        started = time.monotonic()
        self.pmix = None
        self.wireup = wireup_of(placement)
        if self.wireup == "pmix":
            from commbench.core.run.pmix import Client

            with _guarded(placement.rank, timeout):  # a fence waits for every rank and may outlast its timeout
                self.pmix = Client(timeout)
                placement = self._pmix_root(placement, bind)
        elif placement.mpi_bootstrap:  # mpirun without PMIx (or told to use the store): rank 0's address by MPI
            # MPI_Init (which holds the GIL) and MPI_Bcast cannot time out and no watchdog exists yet
            with _guarded(placement.rank, timeout):
                hosts, port, token, fd = mpi_env.bootstrap(placement.rank, placement.size, placement.launcher,
                                                   placement.root_port, bind)
            placement = dataclasses.replace(placement, root_host=hosts, root_port=port, token=token, listen_fd=fd)
        token_file = Path(placement.token_file) if placement.token_file and self.wireup == "store" else None
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
        mpi_env.bound_finalize(f"rank {self.rank} on host {self.host}", timeout)
        self._server: StoreServer | None = None
        self._seq = 0
        if self.rank == 0:
            self._server = StoreServer(self._listener(), placement.token, self.size, tolerant)
            self._server.count(WORLD_GATHER)  # what the wire-up costs the store (none through the launcher)
            if token_file:
                run_token.publish(token_file, placement.token, self._server.port)
        port = self._server.port if self._server else placement.root_port
        host = placement.root_host  # rank 0 too: the local end of this connection is the address peers get
        self.root_address = (host, port)
        self.store = self._join(host, port, token_file)
        info = self._gather({"host": self.host, "addr": self.store.local_address})
        self.hosts = [i["host"] for i in info]
        self.addresses = [i["addr"] for i in info]
        self.store.rank0 = f"rank 0 on host {self.hosts[0]}"  # so a rank that loses it says where it ran
        self.wireup_record = {"via": self.wireup, "seconds": round(time.monotonic() - started, 3)}
        if self._server:  # the requests for the start-up all-gather's keys (none when the launcher carried it)
            self.wireup_record["store_requests"] = self._server.uncount(WORLD_GATHER)

    def _pmix_root(self, placement: Placement, bind: str | None) -> Placement:
        """Rank 0 listens and puts where and with which token; every rank gets it after one fence."""
        assert self.pmix is not None
        fd = None
        if placement.rank == 0:
            if placement.launcher == "srun":  # the step's first node, as without PMIx
                listener, hosts = _first_node_listener(placement, bind), [placement.root_host]
            else:  # mpirun names no hosts: rank 0's addresses, loopback alone when the job has one node
                listener, hosts = root_listener(bind or ("127.0.0.1" if self.pmix.nodes() == 1 else None),
                                                placement.root_port)
            root = {"hosts": hosts, "port": listener.getsockname()[1],
                    "token": placement.token or run_token.new()}
            self.pmix.put(ROOT_KEY, json.dumps(root))
            fd = listener.detach()
        self.pmix.fence()
        root = _fields(self.pmix.get(0, ROOT_KEY), {"hosts": list, "port": int, "token": str}, "rank 0's address")
        return dataclasses.replace(placement, root_host=",".join(map(str, root["hosts"])), root_port=root["port"],
                                   token=root["token"], listen_fd=fd, token_file="")

    def _gather(self, mine: dict) -> list[dict]:
        """Every rank's host and address: through the launcher (PMIx), MPI, or rank 0's store."""
        spec = {"host": str, "addr": str}
        if self.pmix is not None:
            self.pmix.put(WORLD_KEY, json.dumps(mine))
            with _guarded(self.rank, self.timeout):
                self.pmix.fence()
            return [_fields(self.pmix.get(r, WORLD_KEY), spec, f"rank {r}'s host") for r in range(self.size)]
        if self.wireup == "mpi":
            return [_fields(b.decode(errors="replace"), spec, f"rank {r}'s host")
                    for r, b in enumerate(mpi_env.allgather(json.dumps(mine).encode()))]
        return [_fields(i, spec, f"rank {r}'s host") for r, i in enumerate(self.allgather_json(WORLD_GATHER, mine))]

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
        return _first_node_listener(p, self.bind)

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
        if self.pmix is not None:  # a PMIx client that exits without finalizing is an abnormal end to mpirun
            self.pmix.close()
