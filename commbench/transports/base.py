"""The one small transport interface every benchmark and emulator drives.

A ``Transport`` is created on every rank with the world and the parsed options; ``connect``
(a collective) returns one ``Link`` per peer. A link moves ``Message``s: ``send``, ``recv_into``
preallocated buffers, ``call`` (request and reply) and ``serve`` (the answering side of calls).
A posted exchange: ``post_send`` / ``post_recv`` describe sends and receives (``Posted``) that
``Transport.complete`` then carries out together, in order per link and direction: OSU's window and
a collective's step. Nothing is promised to move before ``complete``: MPI starts them at once
(Isend / Irecv, then Waitall), the other transports run them in ``complete`` through their
``progress`` engine, which works on several links at once (tcp's poll loop, grpc's futures and
stream writes, verbs' work requests). It is not a non-blocking API with a test(): no benchmark or
emulator computes while a message is in flight, and a progress thread per transport would be a
second code path inside timed loops. ``barrier`` synchronises the ranks before each measured point.

A transport declares what it can do (``capabilities``: call, stream, exchange, many-ranks,
many-hosts, and ``native:OP`` for a library collective it runs with ``native``); the CLI matches them
against what a benchmark ``needs``. Benchmarks never know which transport they drive.

Calls at once: ``Transport.calls`` has many calls in flight together on one or more links (as
TensorFlow issues a step's RecvTensor calls), each request stamped with its index (``INDEX`` bytes
at its start), and the peer answers them with ``serve_calls``, each with the reply its index names
(a server may take concurrent calls in any order, as gRPC's handlers do).
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import ClassVar, Generic, TypeVar, cast

from commbench.core.config.options import NoOptions, Options
from commbench.core.config.run import RunConfig
from commbench.core.errors import PeerError, UsageError
from commbench.core.measure.message import Message
from commbench.core.output.table import Column, key
from commbench.core.run.world import World

BASIC = frozenset({"call", "stream", "exchange", "many-ranks", "many-hosts"})
INDEX = 4  # bytes at the start of a concurrent call's request: its index among the calls made at once
Batch = tuple["Link", Sequence[Message], Sequence[Message]]  # a link, its requests, their replies


# a stream transport's loss as its kernel saw it: counters() keys (tcp), which a cluster pair's row keeps
LOSS_KEYS = [key("tcp_retrans", "count", "segments the kernel's TCP sent again (tcpi_total_retrans over every "
                 "connection, all ranks, warm-up included): loss, or a timeout", optional=True),
             key("tcp_data_segs", "count", "data segments it sent (tcpi_data_segs_out, the same way): tcp_retrans "
                 "/ tcp_data_segs is the share it had to send again", optional=True)]


def stamp(requests: Sequence[Message]) -> None:
    """Write each request's index into its first INDEX bytes (the requests of one ``calls``)."""
    for i, q in enumerate(requests):
        if not q.sizes or q.sizes[0] < INDEX:
            raise ValueError(f"a concurrent call's request needs at least {INDEX} B in its first buffer")
        q.arrays[0][:INDEX] = memoryview(i.to_bytes(INDEX, "little"))


def index_of(request: Message, n: int, peer: str) -> int:
    """The index a received request carries; one beyond the calls being served is the peer's fault."""
    i = int.from_bytes(request.arrays[0][:INDEX].tobytes(), "little") if request.sizes and \
        request.sizes[0] >= INDEX else n
    if i >= n:
        raise PeerError(f"{peer} sent call {i} of {n} answered at once; do all ranks run the same command?")
    return i
CAPABILITIES = {"call": "request and reply, as latency and PS RPCs",
                "stream": "a window of one-way messages, as bandwidth",
                "exchange": "sending and receiving at once, as bibw and collectives",
                "many-ranks": "more than two ranks",
                "many-hosts": "ranks on more than one host, as with --hosts N",
                "validate": "checking every message's content (--validate)"}


class Link(ABC):
    """A connection to one peer rank. Messages between two ranks arrive in the order sent."""

    def __init__(self, peer: int, name: str) -> None:
        self.peer = peer
        self.name = name  # "rank 1 on host node7 (10.0.0.7)", for error messages

    @abstractmethod
    def send(self, msg: Message) -> None:
        """Send one message; may return before the peer has it (as a TCP write or an eager MPI send)."""

    @abstractmethod
    def recv_into(self, msg: Message) -> None:
        """Receive the next message from the peer into msg's buffers (sizes must agree)."""

    def call(self, request: Message, reply: Message) -> None:
        """Send a request and receive its reply: the peer's answer, sent after the request arrived (so a
        transport may take the reply as proof the request's buffers are free: verbs does)."""
        self.send(request)
        self.recv_into(reply)

    def caller(self, request: Message, reply: Message) -> Callable[[], object] | tuple:
        """The fastest zero-argument callable doing one ``call(request, reply)``: what timed loops run.
        Transports may return a C-level callable, or a pair of them (send, then receive), so that no
        Python frame of commbench's sits in the timed path."""
        return partial(self.call, request, reply)

    def calls_per_caller(self, request: Message) -> int:
        """How many calls one ``caller()`` step makes: 1, or more where a call alone is dominated by a
        per-step cost the transport's real users pay once for many (tf-grpc: one tf.function)."""
        return 1

    def serve(self, n: int, request: Message, respond: Message | Callable[[], Message]) -> None:
        """Answer n calls: receive each request into ``request`` and send back ``respond``, a fixed
        reply message (echo, ack) or a function returning one (checks, updates)."""
        for _ in range(n):
            self.recv_into(request)
            self.send(respond if isinstance(respond, Message) else respond())

    def post_send(self, msg: Message) -> Posted:
        """A send of msg for ``Transport.complete``; its buffers must stay untouched until that returns."""
        return Posted(self, msg, False)

    def post_recv(self, msg: Message) -> Posted:
        """A receive of the next message into msg for ``Transport.complete``; its content is there once
        that returns."""
        return Posted(self, msg, True)

    def send_poster(self, msg: Message) -> Callable[[], Posted]:
        """The fastest zero-argument callable doing ``post_send(msg)`` (a window's inner loop; MPI: C-level)."""
        return partial(self.post_send, msg)

    def recv_poster(self, msg: Message) -> Callable[[], Posted]:
        """The fastest zero-argument callable doing ``post_recv(msg)``."""
        return partial(self.post_recv, msg)

    def close(self) -> None:
        """Release the link; the transport's close() does the rest."""


class Posted:
    """A send or receive posted by post_send / post_recv, carried out by ``Transport.complete`` (MPI
    returns its own started requests instead)."""

    __slots__ = ("link", "msg", "recv")

    def __init__(self, link: Link, msg: Message, recv: bool) -> None:
        self.link, self.msg, self.recv = link, msg, recv


def queues(pairs: Sequence[tuple[Link, Message]]) -> dict:
    """(link, message) pairs as one FIFO of messages per link, in order: what progress() engines work from."""
    out: dict[Link, deque[Message]] = {}
    for link, msg in pairs:
        out.setdefault(link, deque()).append(msg)
    return out


OptionsT = TypeVar("OptionsT", bound=Options)  # a transport's own options: Transport[ItsOptions]


class Transport(ABC, Generic[OptionsT]):
    """One module per transport, each with one subclass of this naming itself in ``name``; its own
    flags are the fields of its ``Options`` (options classes may be shared: grpc-cpp takes grpc's)."""

    name: ClassVar[str]
    help: ClassVar[str]
    Options: ClassVar[type[Options]] = NoOptions
    poll_modes: ClassVar[tuple[str, ...]] = ("blocking", "busy")  # the first is the default
    capabilities: ClassVar[frozenset[str]] = BASIC  # what benchmarks may ask of it (see CAPABILITIES)
    counter_keys: ClassVar[list[Column]] = []  # the row keys its counters() add (summed over ranks, per point)
    presets: ClassVar[tuple[tuple[str, ...], ...]] = ()  # the flag sets `compare` runs, one configuration each
    baseline: ClassVar[bool] = False  # its first preset is what `compare` gives ratios against

    def __init__(self, world: World, config: RunConfig) -> None:
        self.world = world
        self.config = config
        self.opts: OptionsT = cast(OptionsT, config.net)  # this transport's own options (an instance of its Options)
        self.timeout: float = config.common.timeout
        self.busy: bool = config.poll == "busy"
        # what the transport's own library raises for a peer's fault on a path that is not wrapped (a timed
        # loop calls it bare): a cluster evaluation records it as that pair's failure (MPI: a peer that died)
        self.peer_faults: tuple[type[BaseException], ...] = ()

    @classmethod
    def able(cls, opts: OptionsT) -> frozenset[str]:
        """What the transport can do with these options: ``capabilities``, ``poll:MODE`` per poll mode,
        and ``validate`` (it can check message contents); ``own-launcher``: it starts its ranks with its
        library's launcher (mpiexec); ``open-server``: its ranks run a server without authentication
        (TensorFlow's), which the local launcher, as root, puts in a network namespace of the run's own."""
        return cls.capabilities | {f"poll:{m}" for m in cls.poll_modes} | {"validate"}

    @classmethod
    def default_poll(cls, opts: OptionsT) -> str:
        return cls.poll_modes[0]

    @classmethod
    def label(cls, opts: OptionsT, poll: str) -> str:
        """A configuration's short name in comparisons, e.g. 'grpc raw/stream', 'tcp busy-poll'."""
        return cls.name

    @classmethod
    def check_usable(cls, opts: OptionsT) -> None:
        """Raise UsageError naming what is missing (a module, a device) and the fix."""

    @classmethod
    def prepare_process(cls, opts: OptionsT) -> None:
        """Called once in every process of a run before it launches or joins one (may re-execute it)."""

    @classmethod
    def before_rendezvous(cls, opts: OptionsT) -> None:
        """Called in every rank before the run's rendezvous starts: where a library's start-up is
        collective (MPI_Init), every rank starts it here, where no rank waits on another's store."""

    def versions(self) -> dict[str, str]:
        """Versions of libraries this transport uses beyond the Python packages the results record."""
        return {}

    def counters(self) -> dict[str, int]:
        """Running totals of what this rank's transport did that a row should show (per point: the
        difference), e.g. verbs' messages placed without a copy; none by default."""
        return {}

    def mode(self) -> str:
        """Short description of the transport's mode for table headers and rows, e.g. 'raw/unary'."""
        return "-"

    @abstractmethod
    def connect(self, peers: Iterable[int]) -> dict[int, Link]:
        """Collective: connect to ``peers`` (every rank calls it; peer lists are symmetric)."""

    def native(self, op: str, send, recv, root: int = 0) -> Callable[[], None]:
        """The library's own collective ``op`` (a ``native:OP`` capability) over numpy arrays, as a
        zero-argument callable: allreduce (sum), allgather, alltoall, broadcast (from ``root``)."""
        raise UsageError(f"the {self.name} transport has no native {op}")

    def completer(self) -> Callable[[Sequence], None]:
        """The fastest callable doing ``complete`` (a window's; MPI: Request.Waitall itself)."""
        return self.complete

    def complete(self, requests: Sequence) -> None:
        """Carry out every posted send and receive (in order per link and direction). Only sends, or
        only receives, go one after another with the blocking calls; a mix goes through ``progress``."""
        kinds = {r.recv for r in requests}
        if kinds == {False}:
            for r in requests:
                r.link.send(r.msg)
        elif kinds == {True}:
            for r in requests:
                r.link.recv_into(r.msg)
        elif kinds:
            self.progress([(r.link, r.msg) for r in requests if not r.recv],
                          [(r.link, r.msg) for r in requests if r.recv])

    def calls(self, batches: Sequence[Batch]) -> None:
        """Make every batch's calls at once, all in flight together, on each batch's link: replies[i]
        answers requests[i]; the peer answers with ``serve_calls``. This default, for transports whose
        call is a send and a receive (``Link.call``'s own): all requests sent and all replies received
        at once through ``progress``."""
        for _, requests, _ in batches:
            stamp(requests)
        self.progress([(link, q) for link, qs, _ in batches for q in qs],
                      [(link, r) for link, _, rs in batches for r in rs])

    def serve_calls(self, link: Link, request: Message, replies: Sequence[Message | Callable[[], Message]]) -> None:
        """Answer len(replies) calls made at once (``calls``), in whatever order they come: each request
        into ``request``, answered with the reply its index names (a message, or a function making one)."""
        n = len(replies)

        def pick() -> Message:
            r = replies[index_of(request, n, link.name)]
            return r if isinstance(r, Message) else r()

        link.serve(n, request, pick)

    def barrier(self) -> None:
        """Every rank reaches this point before any leaves it (before each measured point); patient, as
        a rank may wait here while another still measures the previous point."""
        self.world.barrier("point", patient=True)

    def progress(self, sends: Sequence[tuple[Link, Message]], recvs: Sequence[tuple[Link, Message]]) -> None:
        """Complete all sends and receives, in order per link, at the same time.

        This default sends from a helper thread; transports with a better engine override it.
        """
        error: list[BaseException] = []

        def sender() -> None:
            try:
                for link, msg in sends:
                    link.send(msg)
            except BaseException as exc:  # re-raised in the caller's thread
                error.append(exc)

        t = threading.Thread(target=sender, daemon=True)
        t.start()
        for link, msg in recvs:
            link.recv_into(msg)
        t.join(self.timeout)
        if t.is_alive():
            raise PeerError(f"sending did not finish within {self.timeout:g} s")
        if error:
            raise error[0]

    def progress_in_turn(self, sends: Sequence[tuple[Link, Message]], recvs: Sequence[tuple[Link, Message]]) -> None:
        """``progress`` for transports whose sends never wait on the peer's receives (grpc, grpc-cpp):
        all sends, then all receives, in the caller's thread; no helper thread."""
        for link, msg in sends:
            link.send(msg)
        for link, msg in recvs:
            link.recv_into(msg)

    def close(self) -> None:
        """Tear down everything connect() built."""
