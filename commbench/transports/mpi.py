"""MPI through mpi4py: buffer mode (Send/Recv, Isend/Irecv/Waitall on the message's own buffers, no
serialization) and pickle mode (mpi4py's lower-case API, the serialized variant OMB-Py runs with
--pickle; here with commbench's framed codec in place of pickle, see core/run/mpi_env.py).

The hot paths (call, serve) do not re-check each message's size: the runner checked at start
that every rank runs the same options, MPI fails a receive that is too long (MPI_ERR_TRUNCATE),
and ``--validate`` catches one that is short. recv_into still checks.
A multi-buffer message is one MPI message: an hindexed datatype over the buffers' addresses
(committed once per message), sent from MPI_BOTTOM. Waiting is MPI's own progress engine, which
spins (Open MPI and MPICH default), so this transport reports busy polling.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial

from commbench.core.config.options import Options, opt
from commbench.core.config.run import RunConfig
from commbench.core.errors import PeerError
from commbench.core.measure.message import Message
from commbench.core.run.mpi_env import base_comm, bounded, check_world_size, mpi
from commbench.transports.base import BASIC, Link, Transport

TAG = 77


class MpiLink(Link):
    def __init__(self, comm, peer: int, name: str, objects: bool) -> None:
        super().__init__(peer, name)
        self.MPI = mpi()
        self.comm = comm
        self.objects = objects
        self.status = self.MPI.Status()

    def spec(self, msg: Message) -> list:
        c = msg.cache.get("mpi")
        if c is None:
            MPI = self.MPI
            if len(msg.arrays) == 1:
                c = [msg.arrays[0], MPI.BYTE]
            else:
                dtype = MPI.BYTE.Create_hindexed(list(msg.sizes), [MPI.Get_address(a) for a in msg.arrays]).Commit()
                c = [MPI.BOTTOM, 1, dtype]
            msg.cache["mpi"] = c
        return c

    def send(self, msg: Message) -> None:
        try:
            if self.objects:
                self.comm.send(msg.views, self.peer, TAG)
            else:
                self.comm.Send(self.spec(msg), self.peer, TAG)
        except self.MPI.Exception as exc:
            raise PeerError(f"MPI error sending to {self.name}: {exc}") from None

    def recv_into(self, msg: Message) -> None:
        try:
            if self.objects:
                self.unpack(self.comm.recv(source=self.peer, tag=TAG), msg)
                return
            self.comm.Recv(self.spec(msg), self.peer, TAG, self.status)
        except self.MPI.Exception as exc:
            raise PeerError(f"MPI error receiving from {self.name}: {exc}") from None
        self.recv_into_check(msg)

    def caller(self, request: Message, reply: Message):
        if self.objects:
            return super().caller(request, reply)
        # Send then Recv, each bound in C: the timed loop runs the pair with no Python frame between
        # (MPI_Sendrecv measured slower)
        return (partial(self.comm.Send, self.spec(request), self.peer, TAG),
                partial(self.comm.Recv, self.spec(reply), self.peer, TAG))

    def call(self, request: Message, reply: Message) -> None:
        if self.objects:
            return super().call(request, reply)
        out = request.cache.get("mpi") or self.spec(request)
        into = reply.cache.get("mpi") or self.spec(reply)
        status = self.status
        try:
            self.comm.Send(out, self.peer, TAG)
            self.comm.Recv(into, self.peer, TAG, status)
        except self.MPI.Exception as exc:
            raise PeerError(f"MPI error exchanging with {self.name}: {exc}") from None

    def serve(self, n: int, request: Message, respond) -> None:
        if self.objects:
            return super().serve(n, request, respond)
        into = self.spec(request)
        send, recv, peer = self.comm.Send, self.comm.Recv, self.peer
        try:
            if isinstance(respond, Message):  # echo or ack: no Python call between receive and send
                out = self.spec(respond)
                for _ in range(n):
                    recv(into, peer, TAG)
                    send(out, peer, TAG)
                return
            for _ in range(n):
                recv(into, peer, TAG)
                reply = respond()
                send(reply.cache.get("mpi") or self.spec(reply), peer, TAG)
        except self.MPI.Exception as exc:
            raise PeerError(f"MPI error exchanging with {self.name}: {exc}") from None

    def post_send(self, msg: Message):
        if self.objects:
            return super().post_send(msg)
        return self.comm.Isend(msg.cache.get("mpi") or self.spec(msg), self.peer, TAG)

    def post_recv(self, msg: Message):
        if self.objects:
            return super().post_recv(msg)
        return self.comm.Irecv(msg.cache.get("mpi") or self.spec(msg), self.peer, TAG)

    def send_poster(self, msg: Message):
        if self.objects:
            return super().send_poster(msg)
        return partial(self.comm.Isend, self.spec(msg), self.peer, TAG)

    def recv_poster(self, msg: Message):
        if self.objects:
            return super().recv_poster(msg)
        return partial(self.comm.Irecv, self.spec(msg), self.peer, TAG)

    def recv_into_check(self, msg: Message) -> None:
        got = self.status.Get_count(self.MPI.BYTE)
        if got != msg.nbytes:
            raise PeerError(f"{self.name} sent {got} B where {msg.nbytes} B were expected; "
                            "do all ranks run the same command?")

    def unpack(self, bufs: list, msg: Message) -> None:
        if not msg.assign(bufs):
            raise PeerError(f"{self.name} sent buffers that do not fit the {msg.nbytes} B expected")


@dataclass(frozen=True)
class MpiOptions(Options):
    title = "mpi transport"
    mpi_mode: str = opt("buffer", choices=("buffer", "pickle"),
                        help="buffer: Send/Recv on the buffers (default); pickle: the lower-case object API "
                             "(serialized, as OMB-Py --pickle; framed codec, never unpickles)")


class MpiTransport(Transport[MpiOptions]):
    name = "mpi"
    help = "MPI via mpi4py (--mpi-mode buffer|pickle); install with pip install 'commbench[mpi]'"
    poll_modes = ("busy",)
    capabilities = BASIC | {f"native:{op}" for op in ("allreduce", "allgather", "alltoall", "broadcast")}

    Options = MpiOptions
    presets = (("--mpi-mode", "buffer"), ("--mpi-mode", "pickle"))

    @classmethod
    def label(cls, opts: MpiOptions, poll: str) -> str:
        return f"{cls.name} {opts.mpi_mode}"

    @classmethod
    def able(cls, opts: MpiOptions) -> frozenset[str]:
        return super().able(opts) | {"own-launcher"}

    @classmethod
    def before_rendezvous(cls, opts: MpiOptions) -> None:
        """MPI_Init now, in every rank at once. mpi4py runs it holding the GIL, so a rank 0 inside it
        serves nothing (its store's thread waits for the GIL) until every rank has called it; started
        later, under srun, rank 0 could enter it while rank 1 still waited for rank 0's store to answer:
        each waited for the other until rank 1's store timeout (one start-up in six hung 180 s)."""
        mpi()

    @classmethod
    def check_usable(cls, opts: MpiOptions) -> None:
        import importlib.util

        if importlib.util.find_spec("mpi4py") is None:  # look, do not import: that would start MPI here
            mpi()  # raises the one-line UsageError naming pip install 'commbench[mpi]'


    def __init__(self, world, config: RunConfig) -> None:
        super().__init__(world, config)
        self.MPI = check_world_size(world.placement.size, world.placement.launcher)
        MPI = self.MPI
        comm = base_comm(MPI)  # COMM_WORLD, or what a rank's death left of it (ULFM)
        if MPI.COMM_WORLD.Get_rank() != world.members[world.rank]:
            raise PeerError(f"MPI rank {MPI.COMM_WORLD.Get_rank()} differs from the launcher's rank "
                            f"{world.members[world.rank]}")
        self.own_comm = None
        if comm is not MPI.COMM_WORLD or tuple(world.members) != tuple(range(comm.Get_size())):
            # a group of the run's ranks (a pair, a ring in some order): its own communicator, by its members
            ranks = MPI.Group.Translate_ranks(MPI.COMM_WORLD.Get_group(), list(world.members), comm.Get_group())
            group = comm.Get_group().Incl(ranks)
            with bounded(f"MPI_Comm_create_group of ranks {', '.join(map(str, world.members))}"):
                self.own_comm = comm = comm.Create_group(group)
            group.Free()
        self.comm = comm
        self.objects = self.opts.mpi_mode == "pickle"
        self.peer_faults = (self.MPI.Exception,)  # Waitall in a timed loop; ULFM (mpiexec --with-ft ulfm)

    def mode(self) -> str:
        return f"{'pickle' if self.objects else 'buffer'}, MPI progress (busy-poll)"

    def connect(self, peers: Iterable[int]) -> dict[int, Link]:
        self.links = {p: MpiLink(self.comm, p, self.world.describe(p), self.objects)
                      for p in sorted(set(peers) - {self.world.rank})}
        return dict(self.links)

    def complete(self, requests: Sequence) -> None:
        if self.objects:
            return super().complete(requests)
        try:
            self.MPI.Request.Waitall(requests)
        except self.MPI.Exception as exc:
            raise PeerError(f"MPI error exchanging with peers: {exc}") from None

    def completer(self) -> Callable[[Sequence], None]:
        return super().completer() if self.objects else self.MPI.Request.Waitall

    def barrier(self) -> None:
        self.comm.Barrier()

    def native(self, op: str, send, recv, root: int = 0) -> Callable[[], None]:
        """MPI's own collectives on the arrays (datatype from numpy's): Allreduce (sum), Allgather,
        Alltoall, Bcast (``recv`` on every rank but the root, which sends ``send``). Each array goes as
        ``[array, datatype]``, the datatype found once: given bare, mpi4py reads the array's format on
        every call (about 120 ns more a call, measured on COMM_SELF)."""
        MPI, comm = self.MPI, self.comm
        send, recv = ([a, MPI.Datatype.fromcode(a.dtype.char)] for a in (send, recv))
        if op == "allreduce":
            return partial(comm.Allreduce, send, recv, MPI.SUM)
        if op == "allgather":
            return partial(comm.Allgather, send, recv)
        if op == "alltoall":
            return partial(comm.Alltoall, send, recv)
        if op == "broadcast":
            return partial(comm.Bcast, send if comm.Get_rank() == root else recv, root)
        return super().native(op, send, recv, root)

    def progress(self, sends: Sequence[tuple[Link, Message]], recvs: Sequence[tuple[Link, Message]]) -> None:
        MPI = self.MPI
        try:
            if self.objects:
                reqs = [self.comm.isend(m.views, link.peer, TAG) for link, m in sends]
                for link, m in recvs:
                    link.unpack(self.comm.recv(source=link.peer, tag=TAG), m)  # type: ignore[attr-defined]
                MPI.Request.Waitall(reqs)
                return
            reqs = [self.comm.Irecv(link.spec(m), link.peer, TAG) for link, m in recvs]  # type: ignore[attr-defined]
            reqs += [self.comm.Isend(link.spec(m), link.peer, TAG) for link, m in sends]  # type: ignore[attr-defined]
            MPI.Request.Waitall(reqs)
        except MPI.Exception as exc:
            raise PeerError(f"MPI error exchanging with peers: {exc}") from None

    def close(self) -> None:
        if self.own_comm is not None:
            self.own_comm.Free()
            self.own_comm = None
