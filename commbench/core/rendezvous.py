"""The run's rendezvous: a small key-value store served by rank 0 over TCP.

Every rank (rank 0 included) connects as a client and proves it belongs to the run with the
per-run token. Collectives (all-gather, broadcast, barrier) are built on blocking ``get``.
The server notices a rank that disconnects without saying goodbye and fails every pending and
later ``get`` at once, naming that rank and its host, so no rank waits for a dead peer. A tolerant
store (a cluster evaluation, where a dead node is a finding) records the rank as dead instead and
answers ``status`` with it; the ranks that wait on it ask (core/group.py).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time

from commbench.core.errors import PeerError, PeerTimeout, RunAborted
from commbench.core.framing import FrameError, read_frame, send_frame
from commbench.core.gate import BUSY, Gate
from commbench.core.gate import HELLO as GATE_HELLO

HELLO, OK, ERR, SET, GET, VALUE, ABORT, BYE, STATUS, BEAT = range(1, 11)
assert (HELLO, ERR) == (GATE_HELLO, BUSY)  # the gate reads the store's hello and says 'busy' in its ERR frame


class StoreServer:
    """Serves the store on an already listening socket: one thread reads every unproven connection
    (core/gate.py), and each proven rank's connection gets a thread of its own (at most two per rank)."""

    def __init__(self, listener: socket.socket, token: str, size: int, tolerant: bool = False) -> None:
        self.listener = listener
        self.size = size
        self.tolerant = tolerant
        self.dead: dict[int, str] = {}  # tolerant: rank -> why it left
        self.data: dict[str, bytes] = {}
        self.cond = threading.Condition()
        self.members: dict[int, str] = {}  # rank -> host, while connected
        self.beats: dict[int, tuple[float, str]] = {}  # rank -> (last heartbeat, host), from watchdogs
        self.watching: set[int] = set()  # ranks whose watchdog is connected
        self.failed: str | None = None
        self.aborted: tuple[str, int] | None = None
        self._closing = False
        self.gate = Gate(listener, "rank 0", token)
        threading.Thread(target=self._accept_loop, name="rdv-accept", daemon=True).start()

    @property
    def port(self) -> int:
        return self.listener.getsockname()[1]

    @property
    def refused(self) -> int:
        return self.gate.refused

    def _accept_loop(self) -> None:
        try:
            while not self._closing:
                for conn, addr, hello in self.gate.wait(0.5):
                    self._admit(conn, addr, hello)
        except (OSError, ValueError):  # the listener was closed under the selector
            pass
        finally:
            self.gate.close()

    def _admit(self, conn: socket.socket, addr: tuple, hello: dict) -> None:
        """A hello with the run's token: a rank of this run gets a thread; anything else is refused."""
        rank = hello.get("rank")
        if not isinstance(rank, int) or not 0 <= rank < self.size or hello.get("size") != self.size:
            return self.gate.refuse(conn, addr, f"rank {rank!r} / size {hello.get('size')!r} "
                                                f"do not fit this run of {self.size}")
        host = str(hello.get("host", addr[0]))[:200]
        watchdog = hello.get("role") == "watchdog"
        with self.cond:
            taken = self.watching if watchdog else self.members
            if rank in taken:
                return self.gate.refuse(conn, addr, f"rank {rank} is already connected")
            if watchdog:
                self.watching.add(rank)
            else:
                self.members[rank] = host
        target = self._serve_watchdog if watchdog else self._serve
        try:
            threading.Thread(target=target, args=(conn, rank, host), daemon=True).start()
        except RuntimeError:  # no thread to be had: this rank is told so, and the run fails cleanly
            with self.cond:
                if watchdog:
                    self.watching.discard(rank)
                else:
                    self.members.pop(rank, None)
            self.gate.refuse(conn, addr, "no thread to serve it")

    def _serve(self, conn: socket.socket, rank: int, host: str) -> None:
        conn.settimeout(None)
        clean = False
        try:
            send_frame(conn, OK, {"size": self.size})
            while True:
                kind, obj, blob = read_frame(conn)
                if kind == SET:
                    with self.cond:
                        self.data[str(obj["key"])] = blob
                        self.cond.notify_all()
                elif kind == GET:
                    self._get(conn, str(obj["key"]), float(obj.get("timeout", 60)))
                elif kind == ABORT:
                    with self.cond:
                        if self.aborted is None:
                            self.aborted = (str(obj.get("message", "aborted")), int(obj.get("code", 1)))
                        self.cond.notify_all()
                elif kind == STATUS:
                    stale = obj.get("stale_after")
                    send_frame(conn, OK, self._status(float(stale) if isinstance(stale, (int, float)) else None))
                elif kind == BYE:
                    clean = True
                    return
        except (FrameError, OSError, ConnectionError, KeyError, ValueError, TypeError):
            pass
        finally:
            with self.cond:
                del self.members[rank]
                if not clean and not self._closing:
                    why = f"rank {rank} on host {host} left the run (process died or lost its connection)"
                    if self.tolerant:
                        self.dead.setdefault(rank, why)
                    elif self.failed is None:
                        self.failed = why
                self.cond.notify_all()
            conn.close()

    def _status(self, stale_after: float | None = None) -> dict:
        with self.cond:
            now = time.monotonic()
            stale = [[r, h, round(now - t, 1)] for r, (t, h) in sorted(self.beats.items())
                     if stale_after is not None and now - t > stale_after]
            return {"failed": self.failed, "aborted": self.aborted, "stale": stale,
                    "dead": [[r, why] for r, why in sorted(self.dead.items())]}

    def _serve_watchdog(self, conn: socket.socket, rank: int, host: str) -> None:
        """A rank's watchdog: heartbeats in, run status out. Its connection is not a member's."""
        conn.settimeout(None)
        try:
            send_frame(conn, OK, {"size": self.size})
            while True:
                kind, obj, _ = read_frame(conn)
                if kind == BEAT:
                    with self.cond:
                        self.beats[rank] = (time.monotonic(), host)
                    send_frame(conn, OK, self._status(float(obj.get("stale_after", 60))))
                elif kind == BYE:
                    with self.cond:
                        self.beats.pop(rank, None)
                    return
        except (FrameError, OSError, ConnectionError, ValueError, TypeError):
            pass
        finally:
            with self.cond:
                self.watching.discard(rank)
            conn.close()

    def _get(self, conn: socket.socket, key: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with self.cond:
            while key not in self.data:
                if self.aborted or self.failed:
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.cond.wait(left)
            value = self.data.get(key)
            aborted, failed = self.aborted, self.failed
        if value is not None:
            send_frame(conn, VALUE, {}, value)
        elif aborted:
            send_frame(conn, ERR, {"kind": "aborted", "message": aborted[0], "code": aborted[1]})
        elif failed:
            send_frame(conn, ERR, {"kind": "failed", "message": failed})
        else:
            send_frame(conn, ERR, {"kind": "timeout", "message": f"no answer for {key!r} within {timeout:g} s"})

    def wait_for_others(self, own_rank: int, timeout: float) -> None:
        """Rank 0 keeps serving until every other rank has said goodbye (or died)."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while any(r != own_rank for r in self.members) and time.monotonic() < deadline:
                self.cond.wait(0.1)

    def close(self) -> None:
        """Stop accepting: the accept thread closes the listener and every unproven connection."""
        self._closing = True
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the selector at once


def _connect_any(hosts: list[str], port: int, timeout: float) -> socket.socket:
    error: OSError = OSError("no address")
    for h in hosts:
        try:
            return socket.create_connection((h, port), timeout=timeout if len(hosts) == 1 else 1.0)
        except OSError as exc:
            error = exc
    raise error


class StoreClient:
    """One rank's connection to the store. A request and its answer hold ``lock``: threads of a rank
    (an emulator serving several peers, each transport waiting asks whether a rank died) share it."""

    def __init__(self, host: str, port: int, token: str, rank: int, size: int, my_host: str, timeout: float,
                 role: str = "rank") -> None:
        self.timeout = timeout
        self.root = f"{host}:{port}"
        deadline = time.monotonic() + timeout
        delay = 0.01
        candidates = host.split(",")  # the MPI bootstrap sends every address rank 0 has
        hello = {"token": token, "rank": rank, "size": size, "host": my_host, "role": role}
        while True:
            try:
                self.sock = _connect_any(candidates, port, min(5.0, timeout))
            except OSError as exc:  # not listening yet: try again until the timeout
                why: object = exc
            else:
                self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self.sock.settimeout(timeout + 5)
                try:
                    send_frame(self.sock, HELLO, hello)
                    kind, obj, _ = read_frame(self.sock)
                except (OSError, ConnectionError, FrameError):
                    kind, obj = None, {}
                if kind == OK:
                    break
                self.sock.close()
                if obj.get("kind") != "busy":
                    raise PeerError(f"rank {rank} on host {my_host}: the rendezvous at {self.root} refused this "
                                    "rank (another run on that port, or a different run token)")
                why = "busy with connections that have not shown the run token"  # a flood: try again
            if time.monotonic() + delay > deadline:
                raise PeerError(f"rank {rank} on host {my_host}: cannot reach the rendezvous at {self.root} "
                                f"(rank 0) within {timeout:g} s: {why}") from None
            time.sleep(delay)
            delay = min(delay * 2, 0.5)
        self.local_address = self.sock.getsockname()[0]
        self.lock = threading.Lock()

    def set(self, key: str, value: bytes) -> None:
        with self.lock:
            self._send(SET, {"key": key}, value)

    def get(self, key: str, timeout: float | None = None) -> bytes:
        """The value of key once some rank sets it; waits ``timeout`` (default the run's) at most."""
        with self.lock:
            return self._get(key, self.timeout if timeout is None else timeout)

    def _get(self, key: str, wait: float) -> bytes:
        self._send(GET, {"key": key, "timeout": wait})
        try:
            self.sock.settimeout(wait + 5)
            kind, obj, blob = read_frame(self.sock)
        except (OSError, ConnectionError, FrameError) as exc:
            raise PeerError(f"lost the rendezvous at {self.root} (rank 0): {exc}") from None
        finally:
            self.sock.settimeout(self.timeout + 5)
        if kind == VALUE:
            return blob
        if obj.get("kind") == "aborted":
            raise RunAborted(str(obj.get("message")), int(obj.get("code", 1)))
        if obj.get("kind") == "timeout":
            raise PeerTimeout(str(obj.get("message")))
        raise PeerError(str(obj.get("message")))

    def check(self) -> None:
        """Raise if a rank died or aborted the run (cheap; for ranks waiting on a peer)."""
        obj = self.status()
        if obj.get("aborted"):
            raise RunAborted(str(obj["aborted"][0]), int(obj["aborted"][1]))
        if obj.get("failed"):
            raise PeerError(str(obj["failed"]))

    def status(self, stale_after: float | None = None) -> dict:
        """The run's status: failed, aborted, dead ranks (tolerant store) and, with ``stale_after``, the
        ranks whose heartbeat is older than that many seconds."""
        return self._ask(STATUS, {} if stale_after is None else {"stale_after": stale_after})

    def beat(self, stale_after: float) -> dict:
        """Watchdog connection: report this rank alive; get the run's status back."""
        return self._ask(BEAT, {"stale_after": stale_after})

    def _ask(self, kind: int, obj: dict) -> dict:
        with self.lock:
            self._send(kind, obj)
            try:
                return read_frame(self.sock)[1]
            except (OSError, ConnectionError, FrameError) as exc:
                raise PeerError(f"lost the rendezvous at {self.root} (rank 0): {exc}") from None

    def abort(self, message: str, code: int) -> None:
        with contextlib.suppress(PeerError), self.lock:
            self._send(ABORT, {"message": message, "code": code})

    def close(self) -> None:
        with contextlib.suppress(OSError):
            send_frame(self.sock, BYE, {})
        self.sock.close()

    def _send(self, kind: int, obj: dict, blob: bytes = b"") -> None:
        try:
            send_frame(self.sock, kind, obj, blob)
        except OSError as exc:
            raise PeerError(f"lost the rendezvous at {self.root} (rank 0): {exc}") from None
