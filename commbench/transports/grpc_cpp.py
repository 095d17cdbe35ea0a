"""gRPC through its C++ API, as TensorFlow's runtime uses it: a small C++ extension (``_grpc_cpp``).

Every rank runs a gRPC C++ server with a generic (raw-bytes) service and holds a channel to each
peer; ``--grpc-call`` picks unary calls or long-lived bidi/client streams, as for the grpc transport.
Each link operation is one ctypes call into the extension (ctypes releases the GIL), which drives
gRPC's completion queue in the calling thread until the operation completes: the per-call Python cost
is that one foreign call. Messages go out from the buffers themselves (static slices, no copy) and
arrive by one copy into the receiving buffers. Method paths carry a name derived from the run token, as
with grpc (the token itself never crosses the wire).
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable, Iterable, Sequence
from functools import partial

from commbench.core.config.run import RunConfig
from commbench.core.errors import PeerError, UsageError
from commbench.core.measure.message import Message
from commbench.core.run import auth
from commbench.transports import _grpc_cpp
from commbench.transports._net import (
    GrpcCallOptions,
    check_socket_options,
    data_port,
    grpc_receive_limit,
    local_endpoint,
)
from commbench.transports.base import Batch, Link, Transport, stamp

OK, TICK = 0, 1
CHECK_EVERY = 0.5  # s: a rank waiting this long asks the rendezvous whether a rank died
P, INT, D = ctypes.c_void_p, ctypes.c_int, ctypes.c_double
SIGNATURES = {
    "cbg_new": (P, [ctypes.c_char_p, INT, ctypes.c_char_p, INT, ctypes.POINTER(INT), INT, D, INT, ctypes.c_char_p,
                    INT]),
    "cbg_port": (INT, [P]), "cbg_error": (ctypes.c_char_p, [P]), "cbg_connect": (INT, [P, INT, ctypes.c_char_p, INT]),
    "cbg_msg": (P, [INT, ctypes.POINTER(P), ctypes.POINTER(ctypes.c_uint64)]), "cbg_msg_free": (None, [P]),
    "cbg_send": (INT, [P, INT, P]), "cbg_flush": (INT, [P, INT]), "cbg_recv": (INT, [P, INT, P, D]),
    "cbg_call": (INT, [P, INT, P, P]), "cbg_serve_next": (INT, [P, INT, P, D]), "cbg_serve_reply": (INT, [P, INT, P]),
    "cbg_serve_fixed": (INT, [P, INT, INT, P, P, ctypes.POINTER(INT), D]), "cbg_close": (None, [P]),
    "cbg_call_many": (INT, [P, INT, ctypes.POINTER(INT), ctypes.POINTER(P), ctypes.POINTER(P), ctypes.POINTER(INT)]),
}


class Api:
    """The extension's functions, typed (``new``, ``send``, ``call``, ...). ``send``, ``call``, ``flush`` and
    ``serve_reply`` raise PeerError on failure (ctypes' errcheck), so they sit in timed loops as they are."""

    def __init__(self, lib: ctypes.CDLL, describe: Callable[[int], str]) -> None:
        for name, (res, args) in SIGNATURES.items():
            setattr(self, name.removeprefix("cbg_"), ctypes.CFUNCTYPE(res, *args)((name, lib)))  # our own objects
        self.describe = describe
        for name in ("send", "call", "serve_reply", "flush"):
            getattr(self, name).errcheck = self._check

    def failure(self, engine: int, peer: int) -> PeerError:
        """The engine's last error (what the peer did) as a PeerError naming the peer and its host."""
        return PeerError(f"{self.describe(peer)} {(self.error(engine) or b'').decode(errors='replace')}")

    def _check(self, result: int, func, args) -> int:
        if result != OK:
            raise self.failure(*args[:2])  # every checked function takes (engine, peer, ...)
        return result


class Handle:
    """The extension's view of a Message (an iovec over its buffers), passed to its functions as the
    pointer (``_as_parameter_``). It keeps the buffers alive, so a C-level callable holding it (a timed
    loop's caller) never points at freed memory; freed when the last holder goes."""

    __slots__ = ("api", "arrays", "_as_parameter_")

    def __init__(self, api: Api, msg: Message) -> None:
        n = len(msg.arrays)
        ptrs = (P * n)(*(a.ctypes.data for a in msg.arrays))
        lens = (ctypes.c_uint64 * n)(*msg.sizes)
        self.api, self.arrays, self._as_parameter_ = api, msg.arrays, P(api.msg(n, ptrs, lens))

    def __del__(self) -> None:
        self.api.msg_free(self._as_parameter_)


class CppLink(Link):
    def __init__(self, transport: GrpcCppTransport, peer: int, name: str) -> None:
        super().__init__(peer, name)
        self.t = transport
        self.api = transport.api
        self.engine = transport.engine

    def handle(self, msg: Message) -> Handle:
        """The extension's view of msg, made once and kept with it."""
        h = msg.cache.get("grpc-cpp")
        if h is None:
            h = msg.cache["grpc-cpp"] = Handle(self.api, msg)
        return h  # type: ignore[return-value]

    def send(self, msg: Message) -> None:
        self.api.send(self.engine, self.peer, self.handle(msg))

    def recv_into(self, msg: Message) -> None:
        self.t.wait_for(self.peer, partial(self.api.recv, self.engine, self.peer, self.handle(msg)), "sent nothing")

    def call(self, request: Message, reply: Message) -> None:
        self.api.call(self.engine, self.peer, self.handle(request), self.handle(reply))

    def caller(self, request: Message, reply: Message):
        return partial(self.api.call, self.engine, self.peer, self.handle(request), self.handle(reply))

    def serve(self, n: int, request: Message, respond: Message | Callable[[], Message]) -> None:
        req = self.handle(request)
        if isinstance(respond, Message):  # echo/ack: all n answered inside the extension
            done = INT(0)
            rep = self.handle(respond)
            self.t.wait_for(self.peer, partial(self.api.serve_fixed, self.engine, self.peer, n, req, rep,
                                               ctypes.byref(done)), "stopped calling", progress=lambda: done.value)
            return
        for _ in range(n):
            self.t.wait_for(self.peer, partial(self.api.serve_next, self.engine, self.peer, req), "stopped calling")
            self.api.serve_reply(self.engine, self.peer, self.handle(respond()))

    def close(self) -> None:
        self.api.flush(self.engine, self.peer)


class GrpcCppTransport(Transport[GrpcCallOptions]):
    name = "grpc-cpp"
    help = "gRPC through its C++ API (a small extension; GIL released per call): --grpc-call unary|stream"
    poll_modes = ("blocking",)

    Options = GrpcCallOptions
    presets = (("--grpc-call", "unary"), ("--grpc-call", "stream"))

    @classmethod
    def label(cls, opts: GrpcCallOptions, poll: str) -> str:
        return f"{cls.name} raw/{opts.grpc_call}"

    @classmethod
    def check_usable(cls, opts: GrpcCallOptions) -> None:
        check_socket_options(opts)
        _grpc_cpp.load()

    def __init__(self, world, config: RunConfig) -> None:
        super().__init__(world, config)
        self.api = Api(_grpc_cpp.load(), world.describe)
        self.call = self.opts.grpc_call
        self.engine: int | None = None
        self.links: dict[int, CppLink] = {}

    def mode(self) -> str:
        return f"raw/{self.call}"

    def calls(self, batches: Sequence[Batch]) -> None:
        """Unary: every call started at once in the extension (a context each), then all finished; a
        stream carries one call at a time (gRPC has one write outstanding per stream)."""
        peers, reqs, reps = [], [], []
        for link, requests, replies in batches:
            stamp(requests)
            for q, r in zip(requests, replies, strict=True):
                if self.call == "stream":
                    link.call(q, r)
                else:
                    peers.append(link.peer)
                    reqs.append(link.handle(q)._as_parameter_)
                    reps.append(link.handle(r)._as_parameter_)
        n = len(peers)
        if n:
            failed = INT(-1)
            if self.api.call_many(self.engine, n, (INT * n)(*peers), (P * n)(*reqs), (P * n)(*reps),
                                  ctypes.byref(failed)) != OK:
                raise self.api.failure(self.engine, failed.value)

    def versions(self) -> dict[str, str]:
        return {"grpc++": _grpc_cpp.runtime_version() or _grpc_cpp.find().name}

    def wait_for(self, peer: int, step: Callable[[float], int], what: str,
                 progress: Callable[[], int] | None = None) -> None:
        """Run a budgeted extension call until it completes, checking between budgets that every rank
        lives and that the peer made progress within --timeout."""
        deadline = time.monotonic() + self.timeout
        seen = progress() if progress else 0
        while True:
            rc = step(CHECK_EVERY)
            if rc == OK:
                return
            if rc != TICK:
                raise self.api.failure(self.engine, peer)
            self.world.check_alive()
            if progress and progress() != seen:
                seen, deadline = progress(), time.monotonic() + self.timeout
            elif time.monotonic() > deadline:
                raise PeerError(f"{self.world.describe(peer)} {what} within {self.timeout:g} s "
                                "(died, hung, or slower than --timeout)")

    def connect(self, peers: Iterable[int]) -> dict[int, Link]:
        world = self.world
        peers = sorted(set(peers) - {world.rank})
        host = local_endpoint(self.opts, world)
        want = data_port(self.config.common.port, world)
        err = ctypes.create_string_buffer(512)
        arr = (INT * len(peers))(*peers)
        service = auth.derived(world.placement.token, "grpc").encode()  # the path's name, not the token
        limit = grpc_receive_limit(self.config.largest_message)
        self.engine = self.api.new(host.encode(), want, service, world.rank, arr, len(peers), self.timeout, limit,
                                   err, len(err))
        if not self.engine:
            raise UsageError(f"grpc-cpp transport of rank {world.rank}: {err.value.decode()}; "
                             "choose a free port with --port (or leave it out to pick one)")
        addrs = world.exchange_json("grpc-cpp-addr", [host, self.api.port(self.engine)], peers)
        for p in peers:
            target = f"{addrs[p][0]}:{addrs[p][1]}"
            if self.api.connect(self.engine, p, target.encode(), int(self.call == "stream")) != OK:
                raise self.api.failure(self.engine, p)
            self.links[p] = CppLink(self, p, world.describe(p))
        world.barrier("grpc-cpp-links")
        return dict(self.links)

    progress = Transport.progress_in_turn  # a send returns once written; waiting, the engine files arrivals

    def close(self) -> None:
        if self.engine:
            engine, self.engine = self.engine, None
            self.api.close(engine)
