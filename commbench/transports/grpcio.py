"""gRPC (grpcio): serialized (protobuf) and non-serialized (raw bytes) modes, unary or streaming calls.

Every rank runs a gRPC server and holds a channel to each peer, so links are symmetric:
- ``send`` is a one-way ``Deliver`` call (a non-blocking unary future, or a write on a client
  stream); the peer's server files it in the link's inbox, ordered by a sequence number.
- ``call`` is an ``Exchange`` call whose response carries the reply; the answering rank's
  ``serve`` runs its respond function in the handler thread, as TF-gRPC-Bench's echo server does.
Method paths carry a name derived from the run token (``/cb<HMAC(token, "grpc")>/Exchange<rank>``,
core/run/auth.py: the token itself never crosses the wire): a client without it gets UNIMPLEMENTED
and the run goes on. Calls are plain gRPC (no per-message seal: it would be timed), so someone who sees
a run's traffic learns its method names; what such a caller can do is bounded: a message larger than
the run's largest (plus ``SLACK``) is refused by gRPC itself, and a one-way message numbered out of the
link's sequence (one already received, a second with the same number, or more than ``AHEAD`` past the
ones received in order) ends the run naming the tampering, not the peer. gRPC waits inside its C core,
so there is no busy-poll mode.
"""

from __future__ import annotations

import os
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence

os.environ.setdefault("GRPC_VERBOSITY", "NONE")  # our own one-line errors; GRPC_VERBOSITY=debug to see gRPC's

import contextlib
from concurrent import futures  # noqa: E402

import grpc  # noqa: E402

from commbench.core.config.run import RunConfig  # noqa: E402
from commbench.core.errors import PeerError, UsageError  # noqa: E402
from commbench.core.measure.message import Message  # noqa: E402
from commbench.core.run import auth  # noqa: E402
from commbench.transports._net import GrpcOptions, check_socket_options, data_port, grpc_receive_limit, local_endpoint  # noqa: E402
from commbench.transports.base import Batch, Link, Transport, stamp  # noqa: E402

SEQ = struct.Struct("<Q")
STOP = object()
MAX_IN_FLIGHT = 1024
AHEAD = MAX_IN_FLIGHT + 2  # a sender has at most MAX_IN_FLIGHT + 1 unary calls outstanding: no message of
# its arrives further past the ones received in order (a stream's arrive in order)
CALLS_AT_ONCE = 512  # handler threads kept for calls made at once (Transport.calls) beyond the usual
CHECK_EVERY = 0.5  # s: a rank waiting this long asks the rendezvous whether a rank died


def tampering(peer: str, what: str) -> str:
    return (f"{peer} is named as the sender of {what}; it never sends that, so a caller who "
            "learnt this run's gRPC method names sent it (tampering: the run's gRPC traffic is plain, so run it on "
            "a network only the job reaches)")


def options(largest: int) -> list[tuple[str, int]]:
    """Channel and server options for a run whose largest message is ``largest`` bytes."""
    return [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", grpc_receive_limit(largest)),
            ("grpc.so_reuseport", 0)]


class RawCodec:
    """Non-serialized: the buffers joined into one byte string, scattered back on arrival."""

    name = "raw"

    @staticmethod
    def encode(msg: Message, seq: int | None = None) -> bytes:
        if seq is None:
            return b"".join(msg.views)
        return b"".join((SEQ.pack(seq), *msg.views))

    @staticmethod
    def seq_of(data: bytes) -> int | None:
        return SEQ.unpack_from(data)[0] if len(data) >= SEQ.size else None

    @staticmethod
    def decode_into(data: bytes, msg: Message, with_seq: bool) -> bool:
        offset = SEQ.size if with_seq else 0
        if len(data) - offset != msg.nbytes:
            return False
        msg.copy_from(data, offset)
        return True


class ProtoCodec:
    """Serialized: a protobuf ``Buffers`` message (repeated bytes), as TensorFlow's tensors travel."""

    name = "proto"

    def __init__(self) -> None:
        from commbench.transports._proto import commbench_pb2

        self.pb = commbench_pb2.Buffers

    def encode(self, msg: Message, seq: int | None = None) -> bytes:
        return self.pb(seq=seq or 0, buffers=[bytes(v) for v in msg.views]).SerializeToString()

    def seq_of(self, data: bytes) -> int | None:
        from google.protobuf.message import DecodeError

        try:
            return self.pb.FromString(data).seq
        except DecodeError:
            return None

    def decode_into(self, data: bytes, msg: Message, with_seq: bool) -> bool:
        return msg.assign(self.pb.FromString(data).buffers)


class Inbox:
    """A link's one-way messages by sequence number, taken in order. ``file`` refuses a number its peer
    never sends: one taken or filed already, or ``AHEAD`` or more past those that arrived in order."""

    __slots__ = ("held", "next_in", "in_order")

    def __init__(self) -> None:
        self.held: dict[int, bytes] = {}
        self.next_in = 0  # the number taken next
        self.in_order = 0  # every message numbered below this has arrived

    def file(self, seq: int | None, data: bytes) -> str:
        """File the message numbered ``seq``; "" if it was filed, else why it cannot be the peer's."""
        if seq is None:
            return "without a sequence number"
        if seq < self.next_in or seq in self.held:
            return f"numbered {seq}, a number already received"
        if seq >= self.in_order + AHEAD:
            return f"numbered {seq}, more than {AHEAD} past the {self.in_order} received in order"
        self.held[seq] = data
        while self.in_order in self.held:
            self.in_order += 1
        return ""

    def ready(self) -> bool:
        return self.next_in in self.held

    def take(self) -> bytes:
        self.next_in += 1
        return self.held.pop(self.next_in - 1)


class _Serving:
    """serve(n, ...) in progress: the handler threads answer; ``fixed`` is a fixed reply encoded once."""

    __slots__ = ("n", "done", "request", "respond", "error", "fixed")

    def __init__(self, n: int, request: Message, respond: Message | Callable[[], Message], fixed: bytes | None) -> None:
        self.n, self.done, self.request, self.respond, self.error, self.fixed = n, 0, request, respond, None, fixed


class GrpcLink(Link):
    def __init__(self, transport: GrpcTransport, peer: int, name: str, channel: grpc.Channel) -> None:
        super().__init__(peer, name)
        self.t = transport
        self.codec = transport.codec
        self.timeout = transport.timeout
        self.channel = channel
        self.cond = threading.Condition()
        self.inbox = Inbox()
        self.tampered = ""  # why this link's sequence cannot be trusted any more
        self.streams: set[str] = set()  # the stream calls the peer opened: one of each kind
        self.next_out = 0
        self.pending: deque[grpc.Future] = deque()
        self.serving: _Serving | None = None
        self.answering = threading.Lock()
        me = transport.world.rank
        path = f"/{transport.service}"
        enc = self.codec.encode
        self._deliver = channel.unary_unary(f"{path}/Deliver{me}")
        self._exchange = channel.unary_unary(f"{path}/Exchange{me}", request_serializer=enc)
        self.stream = transport.call == "stream"
        if self.stream:
            self._dq: deque = deque()
            self._dsem = threading.Semaphore(0)
            self._dfuture = channel.stream_unary(f"{path}/DeliverStream{me}").future(self._drain(self._dq, self._dsem))
            self._xq: deque = deque()
            self._xsem = threading.Semaphore(0)
            self._xresp = channel.stream_stream(f"{path}/ExchangeStream{me}", request_serializer=enc)(
                self._drain(self._xq, self._xsem))

    @staticmethod
    def _drain(q: deque, sem: threading.Semaphore):
        while True:
            sem.acquire()
            item = q.popleft()
            if item is STOP:
                return
            yield item

    def _error(self, exc: grpc.RpcError, doing: str) -> PeerError:
        code = exc.code() if hasattr(exc, "code") else None
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            return PeerError(f"timed out after {self.timeout:g} s {doing} {self.name} "
                             "(hung or too slow; see --timeout)")
        if code == grpc.StatusCode.UNAVAILABLE:
            return PeerError(f"{self.name} is unreachable (the process died or aborted) while {doing} it")
        return PeerError(f"gRPC error {code} {doing} {self.name}: {exc.details() if hasattr(exc, 'details') else exc}")

    # -- one-way messages -----------------------------------------------------------------------
    def send(self, msg: Message) -> None:
        if self.tampered:
            raise PeerError(self.tampered)
        data = self.codec.encode(msg, self.next_out)
        self.next_out += 1
        if self.stream:
            self._dq.append(data)
            self._dsem.release()
            return
        pending = self.pending
        pending.append(self._deliver.future(data, timeout=self.timeout))
        while pending and (pending[0].done() or len(pending) > MAX_IN_FLIGHT):
            self._reap(pending.popleft())

    def _reap(self, fut: grpc.Future) -> None:
        try:
            fut.result()
        except grpc.RpcError as exc:
            raise self._error(exc, "sending to") from None

    def flush(self) -> None:
        while self.pending:
            self._reap(self.pending.popleft())

    def deliver(self, data: bytes, ctx: grpc.ServicerContext) -> None:
        """Server side of Deliver: file the message by its sequence number, or refuse the call and mark
        the link tampered with (what the rank's next receive or serve on it raises)."""
        seq = self.codec.seq_of(data)
        with self.cond:
            why = self.inbox.file(seq, data)
            if why and not self.tampered:
                self.tampered = tampering(self.name, f"a one-way message {why}")
            self.cond.notify_all()
        if why:
            ctx.abort(grpc.StatusCode.INVALID_ARGUMENT, "out of this link's sequence")

    def opened(self, kind: str, ctx: grpc.ServicerContext) -> None:
        """A stream call arrived: the peer opens one of each kind, so a second is refused as tampering."""
        with self.cond:
            if kind not in self.streams:
                self.streams.add(kind)
                return
            if not self.tampered:
                self.tampered = tampering(self.name, f"a second {kind} call")
            self.cond.notify_all()
        ctx.abort(grpc.StatusCode.INVALID_ARGUMENT, "out of this link's sequence")

    def _check_sequence(self) -> None:
        if self.tampered:
            raise PeerError(self.tampered)

    def recv_into(self, msg: Message) -> None:
        deadline = time.monotonic() + self.timeout
        with self.cond:
            while not self.inbox.ready():
                self._check_sequence()
                left = deadline - time.monotonic()
                if left <= 0 or self.t.peer_lost(self.peer):
                    self.flush()
                    what = "is unreachable (the process died or aborted)" if left > 0 else \
                        f"sent nothing within {self.timeout:g} s (hung or too slow; see --timeout)"
                    raise PeerError(f"{self.name} {what}")
                if not self.cond.wait(min(left, CHECK_EVERY)):
                    self.t.world.check_alive()
            data = self.inbox.take()
        if not self.codec.decode_into(data, msg, True):
            raise PeerError(f"the link from {self.name} took a message that does not fit the {msg.nbytes} B "
                            "expected: do all ranks run the same command? (else a caller that is not "
                            f"{self.name} sent it: tampering)")

    # -- calls ----------------------------------------------------------------------------------
    def call(self, request: Message, reply: Message) -> None:
        if self.tampered:
            raise PeerError(self.tampered)
        try:
            if self.stream:
                self._xq.append(request)
                self._xsem.release()
                data = next(self._xresp)
            else:
                data = self._exchange(request, timeout=self.timeout)
        except grpc.RpcError as exc:
            raise self._error(exc, "calling") from None
        self._replied(data, reply)

    def _replied(self, data: bytes, reply: Message) -> None:
        if not self.codec.decode_into(data, reply, False):
            raise PeerError(f"{self.name} replied with a message that does not fit the {reply.nbytes} B expected")

    def start_calls(self, requests: Sequence[Message]) -> list:
        """Calls in flight at once (``Transport.calls``): unary, a future each; on a stream, the requests
        written back to back (the server answers a stream in order). What ``finish_calls`` takes."""
        if self.stream:
            for q in requests:
                self._xq.append(q)
                self._xsem.release()
            return [None] * len(requests)
        try:
            return [self._exchange.future(q, timeout=self.timeout) for q in requests]
        except grpc.RpcError as exc:
            raise self._error(exc, "calling") from None

    def finish_calls(self, started: list, replies: Sequence[Message]) -> None:
        try:
            for fut, reply in zip(started, replies, strict=True):
                self._replied(next(self._xresp) if fut is None else fut.result(), reply)
        except grpc.RpcError as exc:
            raise self._error(exc, "calling") from None

    def serve(self, n: int, request: Message, respond: Message | Callable[[], Message]) -> None:
        fixed = self.codec.encode(respond) if isinstance(respond, Message) else None  # echo/ack: encoded once
        st = _Serving(n, request, respond, fixed)
        deadline = time.monotonic() + self.timeout
        with self.cond:
            self.serving = st
            self.cond.notify_all()
            seen = 0
            while st.done < n and st.error is None:
                self._check_sequence()
                if time.monotonic() > deadline or self.t.peer_lost(self.peer):
                    self.serving = None
                    raise PeerError(f"{self.name} stopped calling after {st.done} of {n} calls "
                                    f"(died, hung, or slower than --timeout {self.timeout:g} s)")
                if not self.cond.wait(CHECK_EVERY):
                    self.t.world.check_alive()
                if st.done != seen:
                    seen, deadline = st.done, time.monotonic() + self.timeout
        if st.error:
            raise st.error

    def answer(self, data: bytes) -> bytes:
        """Server side of Exchange: put the request into the served message, reply with respond()."""
        deadline = time.monotonic() + self.timeout
        with self.cond:
            while self.serving is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise PeerError(f"{self.name} called, but this rank did not serve within {self.timeout:g} s")
                self.cond.wait(left)
            st = self.serving
        try:
            with self.answering:  # calls made at once arrive on several handler threads: one request at a time
                if not self.codec.decode_into(data, st.request, False):
                    raise PeerError(f"the link from {self.name} took a request that does not fit the "
                                    f"{st.request.nbytes} B expected: do all ranks run the same command? (else a "
                                    f"caller that is not {self.name} sent it: tampering)")
                reply = st.fixed if st.fixed is not None else self.codec.encode(st.respond())
        except Exception as exc:
            with self.cond:
                st.error = exc
                self.serving = None
                self.cond.notify_all()
            raise
        with self.cond:
            st.done += 1
            if st.done == st.n:  # only the last call wakes serve(); it checks progress every CHECK_EVERY
                self.serving = None
                self.cond.notify_all()
        return reply

    def close(self) -> None:
        if self.stream:
            self._dq.append(STOP)
            self._dsem.release()
            self._xq.append(STOP)
            self._xsem.release()
        with contextlib.suppress(PeerError):
            self.flush()
        self.channel.close()


class GrpcTransport(Transport[GrpcOptions]):
    name = "grpc"
    help = "gRPC via grpcio: --grpc-mode raw|proto, --grpc-call unary|stream"
    poll_modes = ("blocking",)

    Options = GrpcOptions
    presets = tuple(("--grpc-mode", m, "--grpc-call", c) for m in ("raw", "proto") for c in ("unary", "stream"))

    @classmethod
    def label(cls, opts: GrpcOptions, poll: str) -> str:
        return f"{cls.name} {opts.grpc_mode}/{opts.grpc_call}"

    def __init__(self, world, config: RunConfig) -> None:
        super().__init__(world, config)
        self.codec = ProtoCodec() if self.opts.grpc_mode == "proto" else RawCodec()
        self.call = self.opts.grpc_call
        self.service = f"cb{auth.derived(world.placement.token, 'grpc')}"
        self.links: dict[int, GrpcLink] = {}
        self.server: grpc.Server | None = None
        self._lost: set[int] = set()
        self.closing = False
        _hush_grpc_threads(self)

    @classmethod
    def check_usable(cls, opts: GrpcOptions) -> None:
        check_socket_options(opts)

    def mode(self) -> str:
        return f"{self.codec.name}/{self.call}"

    def peer_lost(self, peer: int) -> bool:
        return peer in self._lost

    def calls(self, batches: Sequence[Batch]) -> None:
        """Every batch's calls at once over Exchange (unary: a future each; stream: written back to back),
        then their replies."""
        started = []
        for link, requests, _ in batches:
            stamp(requests)
            started.append(link.start_calls(requests))
        for (link, _, replies), s in zip(batches, started, strict=True):
            link.finish_calls(s, replies)

    def connect(self, peers: Iterable[int]) -> dict[int, Link]:
        world = self.world
        peers = sorted(set(peers) - {world.rank})
        host = local_endpoint(self.opts, world)
        # a handler thread per call in flight: calls made at once (Transport.calls) wait in theirs until
        # this rank serves them
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4 * len(peers) + 4 + CALLS_AT_ONCE),
                                  options=options(self.config.largest_message))
        self.server.add_generic_rpc_handlers((self._handlers(peers),))
        want = data_port(self.config.common.port, world)
        try:
            port = self.server.add_insecure_port(f"{host}:{want}")
        except RuntimeError:
            port = 0
        if not port:
            raise UsageError(f"grpc transport of rank {world.rank} cannot listen on {host}:{want} (address in use?); "
                             "choose a free port with --port (or leave it out to pick one)")
        self.server.start()
        addrs = world.exchange_json("grpc-addr", [host, port], peers)
        for p in peers:
            ch = grpc.insecure_channel(f"{addrs[p][0]}:{addrs[p][1]}", options=options(self.config.largest_message))
            try:
                grpc.channel_ready_future(ch).result(timeout=self.timeout)
            except grpc.FutureTimeoutError:
                raise PeerError(f"cannot reach the gRPC server of {world.describe(p)} at "
                                f"{addrs[p][0]}:{addrs[p][1]} within {self.timeout:g} s") from None
            ch.subscribe(self._watch(p), try_to_connect=False)
            self.links[p] = GrpcLink(self, p, world.describe(p), ch)
        world.barrier("grpc-links")  # no peer calls before every rank has its links
        return dict(self.links)

    def _watch(self, peer: int) -> Callable[[grpc.ChannelConnectivity], None]:
        def changed(state: grpc.ChannelConnectivity) -> None:
            if state in (grpc.ChannelConnectivity.TRANSIENT_FAILURE, grpc.ChannelConnectivity.SHUTDOWN):
                self._lost.add(peer)
                link = self.links.get(peer)
                if link:
                    with link.cond:
                        link.cond.notify_all()
        return changed

    def _handlers(self, peers: list[int]) -> grpc.GenericRpcHandler:
        def link(p: int) -> GrpcLink:
            return self.links[p]

        def deliver(p):
            return lambda data, ctx: (link(p).deliver(data, ctx), b"")[1]

        def deliver_stream(p):
            def run(it, ctx):
                for k, data in enumerate(it):
                    if k == 0:  # the peer opens its stream before this rank's links are made: looked up now
                        link(p).opened("DeliverStream", ctx)
                    link(p).deliver(data, ctx)
                return b""
            return run

        def exchange(p):
            return lambda data, ctx: link(p).answer(data)

        def exchange_stream(p):
            def run(it, ctx):
                for k, data in enumerate(it):
                    if k == 0:
                        link(p).opened("ExchangeStream", ctx)
                    yield link(p).answer(data)
            return run

        methods = {}
        for p in peers:
            methods[f"Deliver{p}"] = grpc.unary_unary_rpc_method_handler(deliver(p))
            methods[f"Exchange{p}"] = grpc.unary_unary_rpc_method_handler(exchange(p))
            methods[f"DeliverStream{p}"] = grpc.stream_unary_rpc_method_handler(deliver_stream(p))
            methods[f"ExchangeStream{p}"] = grpc.stream_stream_rpc_method_handler(exchange_stream(p))
        return grpc.method_handlers_generic_handler(self.service, methods)

    progress = Transport.progress_in_turn  # sends never block here (futures, or writes queued on a stream)

    def close(self) -> None:
        self.closing = True  # from here grpcio's own threads may fail with the channels: see _hush_grpc_threads
        for link in self.links.values():
            link.close()
        if self.server:
            self.server.stop(grace=1.0).wait(5)


def _hush_grpc_threads(transport: GrpcTransport) -> None:
    """grpcio consumes a stream's requests in threads of its own; when a peer has died or the run is
    closing, they fail with the channel (a closed channel, a cancelled call) and Python would print
    their tracebacks after the main thread's one-line report. Only those are silenced."""
    previous = threading.excepthook

    def hook(args: threading.ExceptHookArgs) -> None:
        if transport.closing or transport._lost:
            return
        previous(args)

    threading.excepthook = hook
