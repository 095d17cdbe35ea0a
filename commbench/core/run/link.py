"""A pair's own control connection: its collectives (barriers, warm-up decisions, the transport's
addresses, the pair's reports) go between the two ranks, not through rank 0.

Each rank of a cluster evaluation listens on a ``Control`` socket. The pair's first rank dials the
second's, both proving the run token (core/run/auth.py, as every commbench connection does); the
hello names the dialing rank and the pair's task, so a late or stray connection is refused; every
frame after the handshake is sealed (core/run/framing.py). A ``LinkStore`` then gives a ``Group`` of
the two the store's interface (``set``, ``get``, ``status``) over that connection: a key set on one
side is sent to the other, which reads it when asked.

A peer that dies ends the connection (``status`` says so at once); one that stops or loses its
network is silent: a wait that has heard nothing for timeout + grace s names it stopped.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import time

from commbench.core.errors import PeerError, PeerTimeout
from commbench.core.run.framing import FrameError, Seal, Tampered, encode, send_frame, take_frame
from commbench.core.run.gate import WELCOME, Gate, dial
from commbench.core.run.sockets import bind_listener

SET = 1  # this connection's frame: a key's value


class Control:
    """This rank's control listener, where the pairs it is the second rank of are dialed."""

    def __init__(self, world) -> None:
        self.world = world
        host = world.store.local_address  # the address rank 0 sees this rank by: reachable from the others
        self.listener = bind_listener(host, 0, f"pair control connections of rank {world.rank}")
        self.address = [host, self.listener.getsockname()[1]]
        self.gate = Gate(self.listener, f"rank {world.rank}", world.placement.token)

    def accept(self, rank: int, tag: str, timeout: float) -> tuple[socket.socket, Seal]:
        """The connection of world rank ``rank`` for the pair ``tag``, and its seal; PeerError after
        ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            for conn, addr, hello, seal in self.gate.wait(left):
                if hello.get("rank") != rank or hello.get("tag") != tag:
                    self.gate.refuse(conn, addr, f"not the pair expected (rank {hello.get('rank')!r}, "
                                                 f"pair {str(hello.get('tag'))[:60]!r})")
                    continue
                send_frame(conn, WELCOME, {}, seal=seal)
                return conn, seal
        raise PeerError(f"{self.world.describe(rank)} did not connect within {timeout:g} s")

    def dial(self, addr: list, rank: int, tag: str, timeout: float) -> tuple[socket.socket, Seal]:
        """Connect to world rank ``rank``'s control listener at ``addr`` for the pair ``tag``."""
        sock, seal = dial(lambda t: socket.create_connection((addr[0], addr[1]), timeout=t), addr,
                          self.world.placement.token, {"rank": self.world.rank, "tag": tag},
                          time.monotonic() + timeout, self.world.describe(rank))
        sock.settimeout(None)
        return sock, seal

    def close(self) -> None:
        self.gate.close()


class LinkStore:
    """The store's interface between two ranks over one connection (``Group(..., store=)``) and its
    seal. ``peer``: the other's world rank; ``timeout``: the run's, for waits given none."""

    def __init__(self, sock: socket.socket, seal: Seal, world, peer: int, timeout: float) -> None:
        self.sock, self.seal, self.world, self.peer, self.timeout = sock, seal, world, peer, timeout
        self.local_address = world.store.local_address
        sock.setblocking(False)
        with contextlib.suppress(OSError):  # TCP (a Unix socket has no Nagle to turn off)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.selector = selectors.DefaultSelector()
        self.selector.register(sock, selectors.EVENT_READ)
        self.inbuf = bytearray()
        self.values: dict[str, bytes] = {}
        self.broken: str | None = None  # why the connection ended
        self.silent_since: float | None = None  # a wait has heard nothing since

    def set(self, key: str, value: bytes) -> None:
        if self.broken:
            raise PeerError(self.broken)
        try:
            self.sock.setblocking(True)
            self.sock.sendall(encode(SET, {"key": key}, value, self.seal))
        except OSError as exc:
            self._break(f"lost the connection to {self.world.describe(self.peer)}: {exc}")
            raise PeerError(self.broken) from None
        finally:
            with contextlib.suppress(OSError):
                self.sock.setblocking(False)

    def get(self, key: str, timeout: float | None = None) -> bytes:
        """The value the peer set at key; PeerTimeout after ``timeout`` s (default the run's), PeerError
        if the connection ended."""
        wait = self.timeout if timeout is None else timeout
        started = time.monotonic()
        while key not in self.values:
            if self.broken:
                raise PeerError(self.broken)
            if self.selector.select(max(0.0, started + wait - time.monotonic())):
                self._read()
                continue
            if wait > 0 and self.silent_since is None:
                self.silent_since = started
            raise PeerTimeout(f"no answer from {self.world.describe(self.peer)} for {key!r} within {wait:g} s")
        self.silent_since = None
        return self.values.pop(key)

    def _read(self) -> None:
        try:
            chunk = self.sock.recv(1 << 16)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            return self._break(f"lost the connection to {self.world.describe(self.peer)}: {exc}")
        if not chunk:
            return self._break(f"{self.world.describe(self.peer)} left the pair (process died or lost its "
                               "connection)")
        self.silent_since = None
        self.inbuf += chunk
        try:
            while (frame := take_frame(self.inbuf, self.seal)) is not None:
                kind, obj, blob = frame
                if kind != SET or not isinstance(obj.get("key"), str):
                    raise FrameError("not a pair frame")
                self.values[obj["key"]] = blob
        except Tampered as exc:
            self._break(f"the connection to {self.world.describe(self.peer)} was tampered with: {exc}")
        except FrameError as exc:
            self._break(f"{self.world.describe(self.peer)} broke the pair's protocol: {exc}")

    def _break(self, why: str) -> None:
        if self.broken is None:
            self.broken = why

    def status(self, stale_after: float | None = None) -> dict:
        """As the rendezvous's: the peer as dead (the connection ended) or stale (a wait has heard
        nothing for ``stale_after`` s)."""
        if self.broken:
            return {"dead": [[self.peer, self.broken]]}
        if self.silent_since is not None and stale_after is not None:
            age = time.monotonic() - self.silent_since
            if age > stale_after:
                return {"stale": [[self.peer, self.world.hosts[self.peer], round(age, 1)]]}
        return {}

    def check(self) -> None:
        if self.broken:
            raise PeerError(self.broken)

    def close(self) -> None:
        self.selector.close()
        self.sock.close()
