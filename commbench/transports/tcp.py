"""Raw TCP: length-prefixed framing, TCP_NODELAY, vectored sendmsg, recvmsg_into preallocated buffers.

Frame: a 12-byte header (payload bytes, buffer count) then the buffers back to back. The
receiver knows the layout it expects and checks the header against it.
Messages up to EAGER bytes are copied into one staging buffer and sent with a single send()
(as MPI's eager path does): on these machines that is about 1 us cheaper per round trip than
building an iovec. Larger messages go vectored, straight from and into the caller's buffers.
Blocking mode uses plain blocking syscalls (SO_RCVTIMEO/SO_SNDTIMEO bound the wait); busy
mode spins on MSG_DONTWAIT, as perftest does, trading a core for no wake-up latency.
"""

from __future__ import annotations

import contextlib
import select
import socket
import struct
import time
from abc import abstractmethod
from collections import deque
from collections.abc import Callable, Iterable, Sequence

from commbench.core.errors import PeerError
from commbench.core.measure.message import Message
from commbench.core.run.framing import send_frame
from commbench.core.run.gate import WELCOME, Gate, dial
from commbench.core.run.sockets import bind_listener
from commbench.transports._net import SocketOptions, check_socket_options, data_port, local_endpoint
from commbench.transports.base import LOSS_KEYS, Link, OptionsT, Transport, queues

HDR = struct.Struct("<QI")
IOV_MAX = 1024
unpack_hdr = HDR.unpack_from
EAGER = 4096  # messages up to this size travel through one contiguous staging buffer (one syscall, tiny copy)
OK = WELCOME  # the acceptor's answer to a dialer's hello
SPIN_CHECK = 0xFFF  # look at the clock every 4096 empty polls
Address = list | str  # a listener's address as peers are told it (JSON): tcp's [host, port], unix's name


def _advance(iov: Sequence[memoryview], n: int) -> list[memoryview]:
    """The part of an iovec list left after n bytes went through."""
    out = []
    for v in iov:
        if n >= len(v):
            n -= len(v)
        else:
            out.append(v[n:])
            n = 0
    return out


class TcpLink(Link):
    def __init__(self, sock: socket.socket, peer: int, name: str, timeout: float, busy: bool) -> None:
        super().__init__(peer, name)
        self.sock = sock
        self.timeout = timeout
        self.busy = busy
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(None)
        tv = struct.pack("ll", int(timeout), int((timeout % 1) * 1e6))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, tv)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, tv)
        self.send_flags = socket.MSG_DONTWAIT if busy else 0
        self.recv_flags = socket.MSG_DONTWAIT if busy else socket.MSG_WAITALL

    # -- per-message framing, computed once per Message ------------------------------------
    @staticmethod
    def send_iov(msg: Message) -> tuple[list[memoryview], int]:
        c = msg.cache.get("tcp.send")
        if c is None:
            hdr = memoryview(HDR.pack(msg.nbytes, len(msg.sizes)))
            c = msg.cache["tcp.send"] = ([hdr, *(v for v in msg.views if len(v))], HDR.size + msg.nbytes)
        return c

    @staticmethod
    def recv_iov(msg: Message) -> tuple[list[memoryview], int, bytearray]:
        c = msg.cache.get("tcp.recv")
        if c is None:
            hdr = bytearray(HDR.size)
            c = msg.cache["tcp.recv"] = ([memoryview(hdr), *(v for v in msg.views if len(v))],
                                         HDR.size + msg.nbytes, hdr)
        return c

    @staticmethod
    def staged(msg: Message, key: str) -> tuple[bytearray, memoryview, list[tuple[memoryview, memoryview]], tuple]:
        """A staging buffer (header + payload), its per-buffer slices and the expected header, for eager messages."""
        c = msg.cache.get(key)
        if c is None:
            buf = bytearray(HDR.size + msg.nbytes)
            HDR.pack_into(buf, 0, msg.nbytes, len(msg.sizes))
            mv = memoryview(buf)
            slots, off = [], HDR.size
            for v in msg.views:
                if len(v):
                    slots.append((mv[off:off + len(v)], v))
                off += len(v)
            c = msg.cache[key] = (buf, mv, slots, (msg.nbytes, len(msg.sizes)))
        return c

    def check_header(self, hdr: bytearray, msg: Message) -> None:
        nbytes, nbufs = HDR.unpack_from(hdr)
        if nbytes != msg.nbytes or nbufs != len(msg.sizes):
            raise PeerError(f"{self.name} sent a message of {nbytes} B in {nbufs} buffers where "
                            f"{msg.nbytes} B in {len(msg.sizes)} were expected; do all ranks run the same command?")

    # -- errors --------------------------------------------------------------------------
    def timed_out(self, doing: str) -> PeerError:
        return PeerError(f"timed out after {self.timeout:g} s {doing} {self.name} (hung or too slow; see --timeout)")

    def lost(self, exc: OSError | None = None) -> PeerError:
        why = f": {exc.strerror or exc}" if exc else ""
        return PeerError(f"{self.name} closed the connection{why} (the process died or aborted)")

    def would_block(self, spin: list, doing: str) -> None:
        """EAGAIN: in blocking mode SO_RCVTIMEO/SO_SNDTIMEO ran out; busy mode spins, checking the
        clock every SPIN_CHECK tries. ``spin`` is [tries, deadline] for one operation."""
        if not self.busy:
            raise self.timed_out(doing)
        spin[0] += 1
        if spin[0] & SPIN_CHECK == 0:
            now = time.monotonic()
            spin[1] = spin[1] or now + self.timeout
            if now > spin[1]:
                raise self.timed_out(doing)

    # -- blocking and busy-polling send / receive ------------------------------------------
    def send(self, msg: Message) -> None:
        if msg.nbytes <= EAGER:
            buf, mv, slots, _ = msg.cache.get("tcp.eager-out") or self.staged(msg, "tcp.eager-out")
            for dst, src in slots:
                dst[:] = src
            try:
                n = self.sock.send(buf, self.send_flags)
            except BlockingIOError:
                if not self.busy:
                    raise self.timed_out("sending to") from None
                n = 0
            except OSError as exc:
                raise self.lost(exc) from None
            if n == len(buf):
                return
            rest, total = [mv[n:]], len(buf) - n
        else:
            rest, total = self.send_iov(msg)
        sent = 0
        spin = [0, 0.0]
        while True:
            try:
                n = self.sock.sendmsg(rest if len(rest) <= IOV_MAX else rest[:IOV_MAX], (), self.send_flags)
            except BlockingIOError:
                self.would_block(spin, "sending to")
                continue
            except OSError as exc:
                raise self.lost(exc) from None
            sent += n
            if sent == total:
                return
            rest = _advance(rest, n)

    def recv_into(self, msg: Message) -> None:
        if msg.nbytes <= EAGER:
            buf, mv, slots, _ = msg.cache.get("tcp.eager-in") or self.staged(msg, "tcp.eager-in")
            try:
                n = self.sock.recv_into(buf, len(buf), self.recv_flags)
            except BlockingIOError:
                if not self.busy:
                    raise self.timed_out("waiting for") from None
                n = -1
            except OSError as exc:
                raise self.lost(exc) from None
            if n < len(buf):
                if n == 0:
                    raise self.lost()
                n = max(n, 0)
                self._recv_rest([mv[n:]], len(buf) - n)
            self.check_header(buf, msg)
            for src, dst in slots:
                dst[:] = src
            return
        rest, total, hdr = self.recv_iov(msg)
        self._recv_rest(rest, total)
        self.check_header(hdr, msg)

    def call(self, request: Message, reply: Message) -> None:
        if self.busy or request.nbytes > EAGER or reply.nbytes > EAGER:
            self.send(request)
            self.recv_into(reply)
            return
        # blocking eager round trip in one frame: the common case of a latency test
        out, _, oslots, _ = request.cache.get("tcp.eager-out") or self.staged(request, "tcp.eager-out")
        inb, _, islots, expect = reply.cache.get("tcp.eager-in") or self.staged(reply, "tcp.eager-in")
        for dst, src in oslots:
            dst[:] = src
        sock = self.sock
        try:
            sent = sock.send(out)
            got = sock.recv_into(inb, len(inb), socket.MSG_WAITALL)
        except BlockingIOError:
            raise self.timed_out("waiting for") from None
        except OSError as exc:
            raise self.lost(exc) from None
        if sent != len(out) or got != len(inb):
            raise self.lost() if got == 0 else self.timed_out("waiting for")
        if unpack_hdr(inb) != expect:
            self.check_header(inb, reply)
        for src, dst in islots:
            dst[:] = src

    def serve(self, n: int, request: Message, respond: Message | Callable[[], Message]) -> None:
        if self.busy or request.nbytes > EAGER:
            return super().serve(n, request, respond)
        inb, _, islots, expect = request.cache.get("tcp.eager-in") or self.staged(request, "tcp.eager-in")
        size = len(inb)
        recv_into, send, flags = self.sock.recv_into, self.send, socket.MSG_WAITALL
        for _ in range(n):
            try:
                got = recv_into(inb, size, flags)
            except BlockingIOError:
                raise self.timed_out("waiting for") from None
            except OSError as exc:
                raise self.lost(exc) from None
            if got != size:
                raise self.lost() if got == 0 else self.timed_out("waiting for")
            if unpack_hdr(inb) != expect:
                self.check_header(inb, request)
            for src, dst in islots:
                dst[:] = src
            send(respond if isinstance(respond, Message) else respond())

    def _recv_rest(self, rest: list[memoryview], total: int) -> None:
        got = 0
        spin = [0, 0.0]
        while True:
            try:
                n = self.sock.recvmsg_into(rest if len(rest) <= IOV_MAX else rest[:IOV_MAX], 0, self.recv_flags)[0]
            except BlockingIOError:
                self.would_block(spin, "waiting for")
                continue
            except OSError as exc:
                raise self.lost(exc) from None
            if n == 0:
                raise self.lost()
            got += n
            if got == total:
                return
            rest = _advance(rest, n)

    def close(self) -> None:
        self.sock.close()


class StreamTransport(Transport[OptionsT]):
    """Stream sockets between ranks, each pair one connection (tcp, unix): where a rank listens and how
    it opens a peer's address are the subclass's; the handshake, framing and progress are these."""

    def mode(self) -> str:
        return "busy-poll" if self.busy else "blocking"

    def connect(self, peers: Iterable[int]) -> dict[int, Link]:
        world, rank = self.world, self.world.rank
        peers = sorted(set(peers) - {rank})
        listener, mine = self.listen()
        addrs = world.exchange_json(f"{self.name}-addr", mine, peers)
        gate = Gate(listener, f"rank {rank}", world.placement.token)  # strangers ahead of a peer cost it nothing
        links: dict[int, Link] = {}
        try:
            deadline = time.monotonic() + self.timeout
            for p in (p for p in peers if p > rank):  # connect up, accept from below
                links[p] = TcpLink(self._dial(self.address(addrs[p], p), p, deadline), p, world.describe(p),
                                   self.timeout, self.busy)
            expected = {p for p in peers if p < rank}
            while expected:
                left = deadline - time.monotonic()
                if left <= 0:
                    names = ", ".join(world.describe(p) for p in sorted(expected))
                    raise PeerError(f"timed out after {self.timeout:g} s waiting for {names} to connect")
                for conn, addr, hello, seal in gate.wait(left):
                    who = hello.get("rank")
                    if not isinstance(who, int) or who not in expected:
                        gate.refuse(conn, addr, f"unexpected rank {who!r}")
                    else:
                        send_frame(conn, OK, {}, seal=seal)
                        expected.discard(who)
                        links[who] = TcpLink(conn, who, world.describe(who), self.timeout, self.busy)
        finally:
            gate.close()
        self.links = links
        return links

    def address(self, told: object, peer: int) -> Address:
        """A peer's address as it told it: the shape its ``listen`` gives (``[host, port]`` or a name)."""
        if isinstance(told, str) or (isinstance(told, list) and len(told) == 2 and isinstance(told[0], str)
                                     and type(told[1]) is int):
            return told
        raise PeerError(f"{self.world.describe(peer)} told its {self.name} address as {type(told).__name__} "
                        f"{str(told)[:40]!r}: do all ranks run the same commbench?")

    @abstractmethod
    def listen(self) -> tuple[socket.socket, Address]:
        """This rank's listening socket, and its address as peers are told it (JSON)."""

    @abstractmethod
    def open(self, addr: Address, timeout: float) -> socket.socket:
        """A connection to a peer's address as ``listen`` gave it."""

    def _dial(self, addr: Address, peer: int, deadline: float) -> socket.socket:
        """Connect to a peer's data port, each side proving the run token; again while it is busy or not
        listening yet (core/run/gate.dial). The handshake's frames are sealed, the data after them is
        not: its bytes are what is timed, and nothing in them is interpreted beyond their sizes."""
        return dial(lambda timeout: self.open(addr, timeout), addr, self.world.placement.token,
                    {"rank": self.world.rank}, deadline, self.world.describe(peer))[0]

    def progress(self, sends: Sequence[tuple[Link, Message]], recvs: Sequence[tuple[Link, Message]]) -> None:
        """Sends and receives on several sockets at once, driven by poll() (or spinning when busy)."""
        ex = _Exchange(sends, recvs)
        deadline = time.monotonic() + self.timeout
        while ex.pending():
            if ex.push() | ex.pull():
                deadline = time.monotonic() + self.timeout
                continue
            if time.monotonic() > deadline:
                raise PeerError(f"timed out after {self.timeout:g} s exchanging with {', '.join(ex.waiting())}")
            if not self.busy:
                ex.poll(min(1000, int(self.timeout * 1000)))

    def close(self) -> None:
        for link in getattr(self, "links", {}).values():
            link.close()


# struct tcp_info (include/uapi/linux/tcp.h): the fields read, by offset, and the length asked for
TCP_INFO_LEN, RETRANS_AT, DATA_SEGS_OUT_AT = 232, 100, 156  # tcpi_total_retrans, tcpi_data_segs_out


class TcpTransport(StreamTransport[SocketOptions]):
    name = "tcp"
    help = "raw TCP sockets (vectored sendmsg / recvmsg_into)"

    Options = SocketOptions
    presets = (("--poll", "blocking"), ("--poll", "busy"))
    baseline = True  # the sockperf-like floor every other configuration is compared with
    counter_keys = LOSS_KEYS

    def counters(self) -> dict[str, int]:
        """The kernel's retransmitted and data segments over this rank's connections (Linux' TCP_INFO;
        none elsewhere)."""
        retrans = segs = 0
        for link in getattr(self, "links", {}).values():
            try:
                info = link.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, TCP_INFO_LEN)
            except (OSError, AttributeError):  # closed, or no TCP_INFO on this system
                return {}
            if len(info) < DATA_SEGS_OUT_AT + 4:
                return {}
            retrans += struct.unpack_from("I", info, RETRANS_AT)[0]
            segs += struct.unpack_from("I", info, DATA_SEGS_OUT_AT)[0]
        return {"tcp_retrans": retrans, "tcp_data_segs": segs}

    @classmethod
    def label(cls, opts: SocketOptions, poll: str) -> str:
        return f"{cls.name} {'busy-poll' if poll == 'busy' else 'blocking'}"

    @classmethod
    def check_usable(cls, opts: SocketOptions) -> None:
        check_socket_options(opts)

    def listen(self) -> tuple[socket.socket, Address]:
        """This rank's listening socket, and its address as peers are told it (JSON)."""
        host = local_endpoint(self.opts, self.world)
        listener = bind_listener(host, data_port(self.config.common.port, self.world),
                                 f"{self.name} transport of rank {self.world.rank}")
        return listener, [host, listener.getsockname()[1]]

    def open(self, addr: Address, timeout: float) -> socket.socket:
        """A connection to a peer's address as ``listen`` gave it."""
        return socket.create_connection((addr[0], addr[1]), timeout=timeout)


class _Exchange:
    """One ``progress`` call: per link a FIFO of messages to send and one to receive, each moved with
    non-blocking sendmsg / recvmsg_into as far as the socket allows."""

    def __init__(self, sends: Sequence[tuple[Link, Message]], recvs: Sequence[tuple[Link, Message]]) -> None:
        self.outq: dict[TcpLink, deque[Message]] = queues(sends)
        self.inq: dict[TcpLink, deque[Message]] = queues(recvs)
        self.cur_out: dict[TcpLink, list] = {}  # link -> [rest iov, bytes left]
        self.cur_in: dict[TcpLink, list] = {}  # link -> [rest iov, bytes left, header, msg]
        self.fds = {link.sock.fileno(): link for link in set(self.outq) | set(self.inq)}
        self.poller = select.poll()

    def pending(self) -> bool:
        return bool(self.outq or self.inq or self.cur_out or self.cur_in)

    def push(self) -> bool:
        """Send what each socket takes now; True if any byte moved."""
        moved = False
        for link in list(self.outq.keys() | self.cur_out.keys()):
            if link not in self.cur_out:
                self.cur_out[link] = list(link.send_iov(_next(self.outq, link)))
            st = self.cur_out[link]
            try:
                n = link.sock.sendmsg(st[0][:IOV_MAX], (), socket.MSG_DONTWAIT)
            except BlockingIOError:
                continue
            except OSError as exc:
                raise link.lost(exc) from None
            moved = True
            st[1] -= n
            if st[1] == 0:
                del self.cur_out[link]
            else:
                st[0] = _advance(st[0], n)
        return moved

    def pull(self) -> bool:
        """Receive what each socket holds now; True if any byte moved."""
        moved = False
        for link in list(self.inq.keys() | self.cur_in.keys()):
            if link not in self.cur_in:
                msg = _next(self.inq, link)
                self.cur_in[link] = [*link.recv_iov(msg), msg]
            st = self.cur_in[link]
            try:
                n = link.sock.recvmsg_into(st[0][:IOV_MAX], 0, socket.MSG_DONTWAIT)[0]
            except BlockingIOError:
                continue
            except OSError as exc:
                raise link.lost(exc) from None
            if n == 0:
                raise link.lost()
            moved = True
            st[1] -= n
            if st[1] == 0:
                del self.cur_in[link]
                link.check_header(st[2], st[3])
            else:
                st[0] = _advance(st[0], n)
        return moved

    def waiting(self) -> list[str]:
        return sorted({link.name for link in (*self.cur_in, *self.inq, *self.cur_out, *self.outq)})

    def poll(self, timeout_ms: int) -> None:
        """Sleep in poll() until a socket with work left is ready."""
        for fd, link in self.fds.items():
            ev = (select.POLLIN if (link in self.inq or link in self.cur_in) else 0) | \
                 (select.POLLOUT if (link in self.outq or link in self.cur_out) else 0)
            if ev:
                self.poller.register(fd, ev)
            else:
                with contextlib.suppress(KeyError):
                    self.poller.unregister(fd)
        self.poller.poll(timeout_ms)


def _next(fifo: dict, link: TcpLink) -> Message:
    """The next message of link's FIFO (the FIFO goes when empty)."""
    msg = fifo[link].popleft()
    if not fifo[link]:
        del fifo[link]
    return msg
