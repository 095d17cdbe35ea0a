"""Before the token: a listener's unproven connections, all read by one selector, each bounded.

A connection to the rendezvous or to a data port is greeted with a challenge and must send one hello
frame (a small JSON object proving it knows the run token, core/run/auth.py: the token itself never
crosses the wire) within ``HELLO_TIMEOUT``, however its bytes trickle; the gate checks the proof,
proves itself in turn, and hands over only connections that proved themselves. Until it has, nothing
larger than ``HELLO_MAX_JSON`` is read for it, no thread is started for it, and at most
``MAX_UNPROVEN`` such connections are held at once. A new one over the cap evicts the oldest (told
'busy' and closed): a peer of the run proves itself within a round trip, so the slot held longest
without a proof is the likeliest stranger's, and a flood that keeps re-opening connections cannot keep
a rank out (it would have to open ``MAX_UNPROVEN`` of them within the rank's round trip). Hellos that
have arrived are read before more connections are accepted, and at most ``ACCEPT_BATCH`` are accepted
between two reads. Only the hello's own bytes are read, so whatever a proven peer sends after it stays
in the socket for its link. A proven connection comes with its seal (core/run/framing.py): every frame
either side sends after PROVEN carries its MAC.
"""

from __future__ import annotations

import contextlib
import errno
import json
import selectors
import socket
import time
from typing import NamedTuple

from commbench.core.errors import PeerError, say
from commbench.core.run import auth
from commbench.core.run.framing import HEADER, FrameError, Seal, Tampered, decode_header, encode, read_frame

HELLO_TIMEOUT = 5.0  # s for a whole hello
HELLO_MAX_JSON = 4096  # bytes of JSON read before the token is shown
MAX_UNPROVEN = 128  # connections held at once without the token
SAY_EVERY = 10.0  # s: after the first 10 refusals, one line this often at most (and every 100th)
ACCEPT_BATCH = MAX_UNPROVEN // 4  # accepted between two reads of the hellos that have arrived
HELLO, BUSY = 1, 3  # frame kinds shared with the rendezvous (its HELLO and ERR): {"kind": "busy"} over the cap


class Proven(NamedTuple):
    """A connection that proved the run token: its peer's address and hello, and the seal of its frames."""

    conn: socket.socket
    addr: tuple
    hello: dict
    seal: Seal


class _Unproven:
    __slots__ = ("conn", "addr", "buf", "need", "deadline", "challenge")

    def __init__(self, conn: socket.socket, addr: tuple, deadline: float) -> None:
        self.conn, self.addr, self.deadline = conn, addr, deadline
        self.challenge = auth.nonce()
        self.buf = bytearray()
        self.need = HEADER.size  # bytes still to read: the header first, then its JSON


def where(addr: object) -> str:
    """A peer's address for messages: host:port, or a Unix socket's name (abstract: @name)."""
    if isinstance(addr, (tuple, list)) and len(addr) >= 2:
        return f"{addr[0]}:{addr[1]}"
    text = addr.decode(errors="replace") if isinstance(addr, bytes) else str(addr)
    return "@" + text[1:] if text.startswith("\0") else (text or "a local socket")


class Gate:
    """Accepts on ``listener`` and reads hellos until a connection has shown one whole frame."""

    def __init__(self, listener: socket.socket, who: str, token: str) -> None:
        self.listener = listener
        self.who = who  # "rank 0", in messages about refused connections
        self.token = token
        listener.setblocking(False)
        self.selector = selectors.DefaultSelector()
        self.selector.register(listener, selectors.EVENT_READ)
        self.unproven: dict[socket.socket, _Unproven] = {}
        self.refused = 0
        self._said = 0.0  # when the last refusal was said (refuse)

    def wait(self, timeout: float) -> list[Proven]:
        """(connection, address, hello, seal) for every hello with the run's token completed within
        ``timeout`` s; strangers that send garbage, too much, too slowly or the wrong token are refused
        meanwhile. Handed-over connections are blocking again and no longer the gate's: the caller
        adopts them or ``refuse``s them (a rank this listener does not expect)."""
        now = time.monotonic()
        soonest = min((u.deadline for u in self.unproven.values()), default=now + timeout)
        done, ready = [], self.selector.select(max(0.0, min(timeout, soonest - now)))
        for key, _ in ready:  # the hellos first: accepting may evict the oldest unproven connections
            if key.fileobj is not self.listener and key.fileobj in self.unproven:
                hello = self._read(self.unproven[key.fileobj])
                if hello:
                    done.append(hello)
        if any(key.fileobj is self.listener for key, _ in ready):
            self._accept()
        now = time.monotonic()
        for u in [u for u in self.unproven.values() if u.deadline <= now]:
            self._drop(u)
            self.refuse(u.conn, u.addr, f"not a commbench peer: no whole hello within {HELLO_TIMEOUT:g} s")
        return done

    def _accept(self) -> None:
        for _ in range(ACCEPT_BATCH):
            try:
                conn, addr = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in (errno.ECONNABORTED, errno.EPROTO):  # gone before it was accepted
                    continue
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    time.sleep(0.05)  # out of descriptors: the queued ones wait for the next round
                    return
                raise  # the listener itself is closed or shut down
            conn.setblocking(False)
            if conn.family != socket.AF_UNIX:  # PROVEN then the store's OK: two small writes, the second
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # not held for the first's ACK (40 ms)
            if len(self.unproven) >= MAX_UNPROVEN:  # dicts keep insertion order: the first is the oldest
                oldest = next(iter(self.unproven.values()))
                self._drop(oldest)
                with contextlib.suppress(OSError):
                    oldest.conn.send(encode(BUSY, {"kind": "busy"}))
                self.refuse(oldest.conn, oldest.addr, f"more than {MAX_UNPROVEN} connections without the run token; "
                            "the oldest goes")
            u = _Unproven(conn, addr, time.monotonic() + HELLO_TIMEOUT)
            try:
                conn.send(encode(auth.CHALLENGE, {"nonce": u.challenge}))  # small: the socket buffer takes it
            except OSError:
                conn.close()
                continue
            self.unproven[conn] = u
            self.selector.register(conn, selectors.EVENT_READ)

    def _read(self, u: _Unproven) -> Proven | None:
        try:
            chunk = u.conn.recv(u.need - len(u.buf))
            if not chunk:
                raise ConnectionError("connection closed")
            u.buf += chunk
            if len(u.buf) < u.need:
                return None
            kind, jlen, _ = decode_header(bytes(u.buf[:HEADER.size]), HELLO_MAX_JSON, 0)
            if u.need == HEADER.size and jlen:
                u.need += jlen
                return None
            obj = json.loads(bytes(u.buf[HEADER.size:])) if jlen else {}
            if not isinstance(obj, dict):
                raise FrameError("frame JSON is not an object")
        except BlockingIOError:
            return None
        except (FrameError, OSError, ConnectionError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            self._drop(u)
            self.refuse(u.conn, u.addr, f"not a commbench peer: {exc}")
            return None
        self._drop(u)
        if kind != HELLO or not auth.hello_proven(self.token, u.challenge, obj):
            self.refuse(u.conn, u.addr, "no proof of the run token")
            return None
        u.conn.setblocking(True)
        try:
            u.conn.sendall(encode(auth.PROVEN, auth.server_proof(self.token, u.challenge, obj)))
        except OSError:
            u.conn.close()
            return None
        return Proven(u.conn, u.addr, obj, auth.seal(self.token, u.challenge, obj["nonce"], dialer=False))

    def _drop(self, u: _Unproven) -> None:
        self.selector.unregister(u.conn)
        del self.unproven[u.conn]

    def refuse(self, conn: socket.socket, addr: tuple, why: str) -> None:
        """Close a stranger's connection and say so on stderr: the first 10, then every 100th or one
        every SAY_EVERY s, whichever comes first (a flood costs the run's log a line or so a second)."""
        self.refused += 1
        n, now = self.refused, time.monotonic()
        if n <= 10 or n % 100 == 0 or now - self._said >= SAY_EVERY:
            self._said = now
            say(f"{self.who}: refused a connection from {where(addr)} ({why}; {n} refused so far)")
        conn.close()

    def close(self) -> None:
        for u in list(self.unproven.values()):
            self._drop(u)
            u.conn.close()
        self.selector.close()
        with contextlib.suppress(OSError):
            self.listener.close()


WELCOME = 2  # the listener's answer to a hello it expected (after PROVEN): the connection is the peer's


def dial(open_, addr: object, token: str, hello: dict, deadline: float, who: str) -> tuple[socket.socket, Seal]:
    """The dialer's side of a peer's listener (a data port, a pair's control listener): ``open_(timeout)``
    connects, both sides prove the run token (core/run/auth.py) and the listener welcomes the hello
    (a sealed frame); again while it is busy or not listening yet, until ``deadline``. ``who``: the
    peer, as messages name it. The connection and its seal; raises PeerError."""
    while True:
        try:
            sock = open_(max(0.1, deadline - time.monotonic()))
            try:
                seal = auth.authenticate(sock, token, hello, deadline)
                if read_frame(sock, 4096, 0, deadline, seal)[0] == WELCOME:
                    return sock, seal
                why = "busy with strangers"
            except auth.Busy:
                why = "busy with strangers"
            except auth.Impostor:
                sock.close()
                raise PeerError(f"the process listening at {where(addr)}, where {who} should be, did not prove it "
                                "knows the run token: another program holds that port") from None
            except Tampered as exc:
                sock.close()
                raise PeerError(f"the connection to {who} at {where(addr)} was tampered with: {exc}") from None
            except (OSError, ConnectionError, FrameError) as exc:
                why = f"{exc.strerror if isinstance(exc, OSError) and exc.strerror else exc}"
            sock.close()
        except OSError as exc:
            why = exc.strerror or str(exc)
        if time.monotonic() > deadline:
            raise PeerError(f"cannot connect to {who} at {where(addr)}: {why}") from None
        time.sleep(0.05)

