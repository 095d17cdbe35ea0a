"""What crosses the wire between a run's processes: a packet capture of their TCP connections,
reassembled, with HTTP/2 (gRPC) decoded far enough to count RPCs and name their methods.

``python -m commbench.core.capture.packets OUT [EXCLUDED_PORT,...]`` (root: a raw AF_PACKET socket) captures
every TCP segment on every interface of its network namespace but those to or from the excluded
ports (the run's rendezvous), outgoing copies left out so that a segment counts once (loopback hands
a packet socket each segment twice; a bridge port sees a frame once as it enters). It prints ``ready`` once
capturing, and on SIGTERM or SIGINT reads what the kernel queued before the signal, writes OUT (JSON)
and exits: per connection its endpoints, which side opened it, and per direction every segment's
(kernel timestamp ns, payload bytes); per RPC its
start time, connection and method (the client's ``:path``, decoded with ``hpack``) for connections
that speak HTTP/2 (gRPC; a client's first bytes are HTTP/2's preface), bytes only for the others.

Reading: ``Capture`` starts the process and stops it; ``Traffic`` loads OUT and sums it over
a time window by the roles of the endpoints. Nothing here parses more than frame headers and the
client's header blocks; no payload is kept.
"""

from __future__ import annotations

import json
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from commbench.core.errors import CommbenchError, UsageError

ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4
SO_TIMESTAMPNS = 35
SO_RCVBUFFORCE = 33
SOL_PACKET, PACKET_STATISTICS = 263, 6
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, CONTINUATION = 0x0, 0x1, 0x3, 0x9
END_STREAM, END_HEADERS, PADDED, PRIORITY = 0x1, 0x4, 0x8, 0x20
SYN = 0x02
NOT_HTTP2 = "not HTTP/2"
Endpoint = tuple[str, int]
NO_PEER: Endpoint = ("", 0)  # a listening socket's peer
Conn = tuple[Endpoint, Endpoint]  # one end of a TCP connection: (this end, the peer's end)


class Http2Reader:
    """One direction of an HTTP/2 connection, fed its bytes in order: calls ``on_rpc(stream, method)``
    for each stream a client opens (the client's side decodes its header blocks: its HPACK state),
    ``on_end(stream)`` where the server's side ends a stream (END_STREAM: gRPC's trailers; or a reset),
    and counts each stream's DATA bytes (``data``: the RPC's request or response, gRPC-framed)."""

    def __init__(self, client: bool, on_rpc, on_end=None) -> None:
        self.client, self.on_rpc, self.on_end = client, on_rpc, on_end
        self.need_preface = len(PREFACE) if client else 0
        self.head = bytearray()  # a frame header being collected
        self.skip = 0  # payload bytes of the current frame still to pass over
        self.keep: bytearray | None = None  # the current HEADERS/CONTINUATION payload, when decoding
        self.block = bytearray()  # a header block across CONTINUATION frames
        self.frame: tuple[int, int, int] = (0, 0, 0)  # type, flags, stream of the current frame
        self.seen: set[int] = set()
        self.data: dict[int, int] = {}
        self.decoder = None
        self.broken: str | None = None
        if client:
            import hpack

            self.decoder = hpack.Decoder()
            self.decoder.max_allowed_table_size = 1 << 20  # whatever the server allowed the client
            self.decoder.max_header_list_size = 1 << 24

    def feed(self, data: memoryview) -> None:
        i, n = 0, len(data)
        while i < n and not self.broken:
            if self.need_preface:
                take = min(self.need_preface, n - i)
                at = len(PREFACE) - self.need_preface
                if data[i:i + take] != PREFACE[at:at + take]:
                    self.broken = NOT_HTTP2
                    return
                i += take
                self.need_preface -= take
            elif self.skip:
                take = min(self.skip, n - i)
                if self.keep is not None:
                    self.keep += data[i:i + take]
                i += take
                self.skip -= take
                if not self.skip:
                    self._frame_done()
            else:
                take = min(9 - len(self.head), n - i)
                self.head += data[i:i + take]
                i += take
                if len(self.head) == 9:
                    length = int.from_bytes(self.head[:3], "big")
                    ftype, flags = self.head[3], self.head[4]
                    stream = int.from_bytes(self.head[5:9], "big") & 0x7FFFFFFF
                    self.head.clear()
                    self.frame = (ftype, flags, stream)
                    if ftype == DATA:
                        self.data[stream] = self.data.get(stream, 0) + length
                    if not self.client and self.on_end and stream and (
                            ftype == RST_STREAM or ftype in (DATA, HEADERS) and flags & END_STREAM):
                        self.on_end(stream)
                    decode = self.client and ftype in (HEADERS, CONTINUATION)
                    self.keep = bytearray() if decode else None
                    self.skip = length
                    if not length:
                        self._frame_done()

    def _frame_done(self) -> None:
        ftype, flags, stream = self.frame
        if self.keep is None:
            return
        payload, self.keep = self.keep, None
        if ftype == HEADERS:
            start, end = 0, len(payload)
            if flags & PADDED:
                start, end = 1, end - payload[0]
            if flags & PRIORITY:
                start += 5
            self.block = bytearray(payload[start:end])
        else:
            self.block += payload
        if flags & END_HEADERS:
            try:
                headers = dict(self.decoder.decode(bytes(self.block), raw=False))
            except Exception as exc:  # hpack raises its own errors; a desync ends decoding here
                self.broken = f"HPACK: {exc}"
                return
            if stream not in self.seen and ":path" in headers:
                self.seen.add(stream)
                self.on_rpc(stream, headers[":path"])


@dataclass
class Flow:
    """One direction of one TCP connection, as captured."""
    src: Endpoint
    dst: Endpoint
    client: bool | None  # sent the SYN (None: the connection was open before the capture)
    next_seq: int | None = None
    segments: list[tuple[int, int]] = field(default_factory=list)  # (t_ns, payload bytes)
    reader: Http2Reader | None = None
    # segments ahead of the next byte: a packet socket may get a flow's segments out of order (loopback and
    # veth deliver through per-CPU queues); what is still here when the capture ends was never captured
    early: dict[int, tuple[int, bytes]] = field(default_factory=dict)


class Capturer:
    """The capture loop's state: every flow seen, and RPCs as they start."""

    def __init__(self, excluded: Iterable[int]) -> None:
        self.excluded = set(excluded)
        self.flows: list[Flow] = []
        self.current: dict[tuple[Endpoint, Endpoint], int] = {}  # (src, dst) -> its latest flow
        self.rpcs: list[tuple[int, int, str, int]] = []  # (t_ns, flow index, method, stream)
        self.ends: dict[tuple[int, int], int] = {}  # (server -> client flow index, stream) -> t_ns it ended
        self.truncated = 0  # frames larger than the capture's buffer (then a gap in their flow)
        self.now = 0

    def _flow(self, src: Endpoint, dst: Endpoint, syn: bool, ack: bool) -> Flow:
        i = self.current.get((src, dst))
        if i is not None and not (syn and self.flows[i].segments):  # a SYN after data: the ports' next connection
            return self.flows[i]
        i = self.current[(src, dst)] = len(self.flows)
        f = Flow(src, dst, (not ack) if syn else None)
        if f.client is not None:  # seen from its start: frames can be followed (the client's side names methods)
            f.reader = Http2Reader(f.client, lambda stream, path: self.rpcs.append((self.now, i, path, stream)),
                                   lambda stream: self.ends.setdefault((i, stream), self.now))
        self.flows.append(f)
        return f

    def segment(self, t_ns: int, src: Endpoint, dst: Endpoint, seq: int, flags: int, payload: memoryview) -> None:
        if src[1] in self.excluded or dst[1] in self.excluded:
            return
        syn = bool(flags & SYN)
        f = self._flow(src, dst, syn, bool(flags & 0x10))
        if syn:
            f.next_seq = (seq + 1) & 0xFFFFFFFF
            return
        if not payload:
            return
        if f.next_seq is None:  # joined mid-connection: bytes only
            f.next_seq = seq
        ahead = (seq - f.next_seq) & 0xFFFFFFFF
        if ahead and ahead < 1 << 31:  # ahead of what was seen: kept until the hole fills (see Flow.early)
            f.early.setdefault(seq, (t_ns, bytes(payload)))
            return
        self._take(f, t_ns, seq, payload)
        while f.early and f.next_seq in f.early:
            t, data = f.early.pop(f.next_seq)
            self._take(f, t, f.next_seq, memoryview(data))

    def _take(self, f: Flow, t_ns: int, seq: int, payload: memoryview) -> None:
        """A segment at or before the flow's next byte: what is new in it counts and is read."""
        behind = (f.next_seq - seq) & 0xFFFFFFFF
        if behind:  # a retransmission (or overlap): keep only what is new
            if behind >= len(payload):
                return
            payload = payload[behind:]
        f.next_seq = (f.next_seq + len(payload)) & 0xFFFFFFFF
        f.segments.append((t_ns, len(payload)))
        if f.reader and not f.reader.broken:
            self.now = t_ns
            f.reader.feed(payload)

    def result(self, drops: int, passed: int = 0) -> dict:
        """What the capture saw; each RPC as [t_ns, flow, method, request bytes, response bytes (DATA),
        t_ns it ended (None: not seen to end)]."""
        back = {}
        for i, f in enumerate(self.flows):
            back[(f.src, f.dst)] = i
        rpcs = []
        for t, i, path, stream in self.rpcs:
            f = self.flows[i]
            r = back.get((f.dst, f.src))
            resp = self.flows[r].reader.data.get(stream, 0) if r is not None and self.flows[r].reader else 0
            rpcs.append((t, i, path, f.reader.data.get(stream, 0), resp, self.ends.get((r, stream))))
        return {"drops": drops, "passed": passed, "truncated": self.truncated,
                "flows": [{"src": list(f.src), "dst": list(f.dst), "client": f.client, "segments": f.segments,
                           "gaps": len(f.early), "http2": None if f.reader is None else (f.reader.broken or "ok")}
                          for f in self.flows],
                "rpcs": rpcs}


def parse_frame(buf: memoryview, n: int):
    """(src, dst, seq, flags, payload) of an Ethernet/IPv4-or-IPv6/TCP frame, or None."""
    if n < 14:
        return None
    ethertype = int.from_bytes(buf[12:14], "big")
    off = 14
    if ethertype == 0x0800:
        ihl = (buf[off] & 0x0F) * 4
        total = int.from_bytes(buf[off + 2:off + 4], "big")
        if buf[off + 9] != 6:
            return None
        src_ip, dst_ip = socket.inet_ntop(socket.AF_INET, buf[off + 12:off + 16]), \
            socket.inet_ntop(socket.AF_INET, buf[off + 16:off + 20])
        end, off = off + total, off + ihl
    elif ethertype == 0x86DD:
        if buf[off + 6] != 6:  # extension headers: not from these peers
            return None
        plen = int.from_bytes(buf[off + 4:off + 6], "big")
        src_ip, dst_ip = socket.inet_ntop(socket.AF_INET6, buf[off + 8:off + 24]), \
            socket.inet_ntop(socket.AF_INET6, buf[off + 24:off + 40])
        end, off = off + 40 + plen, off + 40
    else:
        return None
    sport, dport = int.from_bytes(buf[off:off + 2], "big"), int.from_bytes(buf[off + 2:off + 4], "big")
    seq = int.from_bytes(buf[off + 4:off + 8], "big")
    doff, flags = (buf[off + 12] >> 4) * 4, buf[off + 13]
    return (src_ip, sport), (dst_ip, dport), seq, flags, buf[off + doff:min(end, n)]


def _take_packet(cap: Capturer, sock: socket.socket, view: memoryview, anc: int) -> int:
    """Read one packet into ``cap`` (outgoing copies left out); its kernel timestamp (ns)."""
    n, ancdata, _, addr = sock.recvmsg_into([view], anc, socket.MSG_TRUNC)  # n: the whole frame
    t_ns = time.time_ns()
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
            sec, nsec = struct.unpack("qq", data[:16])
            t_ns = sec * 1_000_000_000 + nsec
    if addr[2] == PACKET_OUTGOING:
        return t_ns
    if n > len(view):
        cap.truncated += 1
    else:
        got = parse_frame(view, n)
        if got is not None:
            cap.segment(t_ns, *got)
    return t_ns


# A classic BPF program for the packet socket: the kernel passes on only what the capture reads
# (incoming TCP over IPv4 or IPv6), so other traffic and loopback's outgoing copies cost the capture
# nothing and cannot fill its buffer. (code, jump if true, jump if false, k), as in linux/filter.h.
LD_W, LDH, LDB, JEQ, RET = 0x20, 0x28, 0x30, 0x15, 0x06
SKF_AD_PKTTYPE = 0xFFFFF000 + 4  # SKF_AD_OFF + SKF_AD_PKTTYPE: the packet's direction
SO_ATTACH_FILTER = 26
TCP_IN_ONLY = [  # a jump goes to the next instruction + its offset
    (LD_W, 0, 0, SKF_AD_PKTTYPE),  # 0
    (JEQ, 8, 0, PACKET_OUTGOING),  # 1: outgoing -> 10
    (LDH, 0, 0, 12),  # 2: ethertype
    (JEQ, 0, 2, 0x0800),  # 3: IPv4 -> 4, else -> 6
    (LDB, 0, 0, 14 + 9),  # 4: IPv4's protocol
    (JEQ, 3, 4, 6),  # 5: TCP -> 9, else -> 10
    (JEQ, 0, 3, 0x86DD),  # 6: IPv6 -> 7, else -> 10
    (LDB, 0, 0, 14 + 6),  # 7: IPv6's next header
    (JEQ, 0, 1, 6),  # 8: TCP -> 9, else -> 10
    (RET, 0, 0, 0xFFFFFFFF),  # 9: keep the whole frame
    (RET, 0, 0, 0),  # 10: drop
]


def attach_filter(sock: socket.socket, program: list[tuple[int, int, int, int]]) -> None:
    """Attach a classic BPF program to a socket (SO_ATTACH_FILTER)."""
    import ctypes

    code = b"".join(struct.pack("HBBI", *ins) for ins in program)
    buf = ctypes.create_string_buffer(code, len(code))
    prog = struct.pack("HP", len(program), ctypes.addressof(buf))
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, prog)


def capture_main(out: str, excluded: str = "") -> int:
    """The capture process: see the module's docstring."""
    try:
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    except PermissionError:
        print("capture: a packet capture needs root (CAP_NET_RAW)", file=sys.stderr)
        return 2
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 256 << 20)
    except OSError:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 256 << 20)
    sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    attach_filter(sock, TCP_IN_ONLY)
    while True:  # what was queued before the filter came: read and dropped
        try:
            sock.recv(1, socket.MSG_DONTWAIT)
        except BlockingIOError:
            break
    sock.settimeout(0.2)
    cap = Capturer(int(p) for p in excluded.split(",") if p)
    stop: list[int] = []  # when the signal came (wall clock ns)
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, lambda *_: stop.append(time.time_ns()))
    buf = bytearray(1 << 20)  # loopback hands over GSO segments of up to 64 KiB (BIG TCP: more)
    view = memoryview(buf)
    anc = socket.CMSG_SPACE(16)
    print("ready", flush=True)
    while not stop:  # checked after every packet: on a busy interface the 0.2 s timeout may never come
        try:
            _take_packet(cap, sock, view, anc)
        except (TimeoutError, InterruptedError):
            continue
    # what the kernel queued before the signal is the run's: a capture that lags (one Python process
    # behind a loopback flood) reads it all, and stops at the first packet that came after the signal
    sock.setblocking(False)
    try:
        while _take_packet(cap, sock, view, anc) < stop[0]:
            pass
    except (BlockingIOError, InterruptedError):
        pass
    stats = sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8)
    passed, drops = struct.unpack("II", stats)  # passed: what the kernel's filter let through
    Path(out).write_text(json.dumps(cap.result(drops, passed)))
    return 0


class Capture:
    """A capture process of this run's connections (see the module docstring), started and stopped."""

    def __init__(self, out: Path, excluded: Iterable[int], netns: str | None = None) -> None:
        cmd = [sys.executable, "-m", "commbench.core.capture.packets", str(out),
               ",".join(map(str, sorted(set(excluded))))]
        if netns:  # emulated hosts: capture where their links meet, in the root namespace (named netns)
            cmd = ["ip", "netns", "exec", netns, *cmd]
        self.out = out
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline().strip()
        if line != "ready":
            err = self.proc.stderr.read().strip().splitlines()
            self.proc.wait()
            also = f" and emulated hosts made by `commbench hosts up` (which names the root namespace {netns})" \
                if netns else ""
            raise UsageError(f"--traffic: the packet capture did not start ({err[-1] if err else 'no output'}); "
                             f"it needs root{also}")

    def kill(self) -> None:
        """End the capture if it still runs (the run failed before stop)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self, timeout: float = 60.0) -> Traffic:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise CommbenchError(f"--traffic: the packet capture did not stop within {timeout:g} s") from None
        if self.proc.returncode:
            raise CommbenchError(f"--traffic: the packet capture failed: {self.proc.stderr.read().strip()}")
        return Traffic(json.loads(self.out.read_text()))


class Traffic:
    """A capture's result, summed over a time window by the roles of its endpoints."""

    def __init__(self, data: Mapping) -> None:
        self.data = data

    def by_roles(self, roles: Mapping[Conn, str], t0: int, t1: int) -> dict[tuple[str, str], dict]:
        """{(from role, to role): {"bytes", "segments", "rpcs", "methods"}} over [t0, t1), for the
        connections whose both ends have a role (``roles``: {(end, peer): role}, see ``role_of``):
        bytes by the direction they flow, RPCs by client -> server (the client's role first). A capture
        that missed something there is a CommbenchError."""
        problems = [f"the kernel dropped {self.data['drops']} packets before the capture read them"] \
            if self.data["drops"] else []
        out: dict[tuple[str, str], dict] = {}
        keys: list[tuple[str, str] | None] = []
        for f in self.data["flows"]:
            src, dst = tuple(f["src"]), tuple(f["dst"])
            a, b = role_of(roles, src, dst), role_of(roles, dst, src)
            keys.append((a, b) if a and b else None)
            if not (a and b):
                continue
            if f["gaps"]:
                problems.append(f"{a} {f['src']} -> {b} {f['dst']}: bytes never captured "
                                f"({f['gaps']} segments after them)")
            elif f["http2"] not in (None, "ok", NOT_HTTP2):
                problems.append(f"{a} {f['src']} -> {b} {f['dst']}: HTTP/2 not followed ({f['http2']})")
            inside = [n for t, n in f["segments"] if t0 <= t < t1]
            if inside:
                c = out.setdefault((a, b), _cell())
                c["bytes"] += sum(inside)
                c["segments"] += len(inside)
        if problems:
            raise CommbenchError("--traffic: the capture is incomplete: " + "; ".join(problems))
        spans: dict[int, list[tuple[int, int | None]]] = {}
        for t, fid, method, req, resp, *end in self.data["rpcs"]:
            if t0 <= t < t1 and keys[fid]:
                c = out.setdefault(keys[fid], _cell())
                c["rpcs"] += 1
                m = c["methods"].setdefault(method.rsplit("/", 1)[-1], [0, 0, 0])
                m[0] += 1
                m[1] += req
                m[2] += resp
                spans.setdefault(fid, []).append((t, end[0] if end else None))
        for fid, s in spans.items():  # a role pair's most calls open at once on one of its connections
            c = out[keys[fid]]
            c["in_flight_max"] = max(c["in_flight_max"], in_flight_max(s))
        return out


def in_flight_max(spans: Sequence[tuple[int, int | None]]) -> int:
    """The most calls open at once among (start, end) spans (end None: open to the end); a call ending
    when another starts is not counted with it."""
    events = sorted([(t, 1) for t, _ in spans] + [(e, -1) for _, e in spans if e is not None])
    most = now = 0
    for _, d in events:  # at one instant ends (-1) sort before starts
        now += d
        most = max(most, now)
    return most


def _cell() -> dict:
    return {"bytes": 0, "segments": 0, "rpcs": 0, "methods": {}, "in_flight_max": 0}


def role_of(roles: Mapping[Conn, str], end: Endpoint, peer: Endpoint) -> str | None:
    """The role holding ``end`` of the connection to ``peer``: by the socket with both ends (the
    kernel gives one ephemeral port to connections to different peers, from different processes too,
    so a port alone can name the wrong rank), else by the socket listening on ``end`` (a connection
    its server accepted and has closed since)."""
    return roles.get((end, peer)) or roles.get((end, NO_PEER)) or roles.get((("0.0.0.0", end[1]), NO_PEER)) \
        or roles.get((("::", end[1]), NO_PEER))


def own_endpoints() -> list[tuple[str, int, str, int]]:
    """(address, port, peer's address, peer's port) of every TCP socket this process holds (psutil;
    ``NO_PEER`` for a listening socket): which connections are whose."""
    import psutil

    def ip(a: str) -> str:
        return a[7:] if a.startswith("::ffff:") else a

    return [(ip(c.laddr.ip), c.laddr.port, *((ip(c.raddr.ip), c.raddr.port) if c.raddr else NO_PEER))
            for c in psutil.Process().net_connections(kind="tcp") if c.laddr]


if __name__ == "__main__":
    sys.exit(capture_main(*sys.argv[1:3]))
