"""The run's rendezvous: a small key-value store served by rank 0 over TCP.

Every rank (rank 0 included) connects as a client and proves it belongs to the run with the
per-run token. Collectives (all-gather, broadcast, barrier) are built on blocking ``get``.
The server notices a rank that disconnects without saying goodbye and fails every pending and
later ``get`` at once, naming that rank and its host, so no rank waits for a dead peer.
"""

from __future__ import annotations

import contextlib
import hmac
import socket
import sys
import threading
import time

from commbench.core.errors import PeerError, PeerTimeout, RunAborted
from commbench.core.framing import FrameError, encode, read_frame, send_frame

HELLO, OK, ERR, SET, GET, VALUE, ABORT, BYE, STATUS, BEAT = range(1, 11)
HELLO_TIMEOUT = 5.0  # s for a whole hello, however its bytes trickle in
HELLO_MAX_JSON = 4096  # before the token is shown nothing larger is read (or allocated)
MAX_UNPROVEN = 64  # connections that have not shown the token yet, at once; more are closed at once


class StoreServer:
    """Serves the store on an already listening socket, in daemon threads."""

    def __init__(self, listener: socket.socket, token: str, size: int) -> None:
        self.listener = listener
        self.token = token
        self.size = size
        self.data: dict[str, bytes] = {}
        self.cond = threading.Condition()
        self.members: dict[int, str] = {}  # rank -> host, while connected
        self.beats: dict[int, tuple[float, str]] = {}  # rank -> (last heartbeat, host), from watchdogs
        self.failed: str | None = None
        self.aborted: tuple[str, int] | None = None
        self.refused = 0
        self._closing = False
        self._unproven = threading.BoundedSemaphore(MAX_UNPROVEN)
        threading.Thread(target=self._accept_loop, name="rdv-accept", daemon=True).start()

    @property
    def port(self) -> int:
        return self.listener.getsockname()[1]

    def _accept_loop(self) -> None:
        while not self._closing:
            try:
                conn, addr = self.listener.accept()
            except OSError:
                return
            if not self._unproven.acquire(blocking=False):  # a flood: no thread, no memory for it
                with contextlib.suppress(OSError):  # a rank of this run that meets the flood tries again
                    conn.setblocking(False)
                    conn.send(encode(ERR, {"kind": "busy"}))
                self._refuse(conn, addr, f"more than {MAX_UNPROVEN} connections without the run token", quiet=True)
                continue
            try:
                threading.Thread(target=self._serve, args=(conn, addr), daemon=True).start()
            except RuntimeError:  # no thread to be had: refuse this one, keep serving the run
                self._unproven.release()
                self._refuse(conn, addr, "no thread to serve it", quiet=True)

    def _refuse(self, conn: socket.socket, addr: tuple, why: str, quiet: bool = False) -> None:
        """Close a stranger's connection; said on stderr (a flood: the first 10 and every 100th)."""
        with self.cond:
            self.refused += 1
            n = self.refused
        if not quiet or n <= 10 or n % 100 == 0:
            print(f"commbench: rank 0: refused a connection from {addr[0]}:{addr[1]} ({why}; {n} refused so far)",
                  file=sys.stderr)
        conn.close()

    def _serve(self, conn: socket.socket, addr: tuple) -> None:
        try:
            kind, hello, _ = read_frame(conn, HELLO_MAX_JSON, 0, time.monotonic() + HELLO_TIMEOUT)
        except (FrameError, OSError, ConnectionError) as exc:
            return self._refuse(conn, addr, f"not a commbench peer: {exc}")
        finally:
            self._unproven.release()
        token = hello.get("token")
        rank = hello.get("rank")
        if kind != HELLO or not isinstance(token, str) \
                or not hmac.compare_digest(token.encode(), self.token.encode()):
            return self._refuse(conn, addr, "wrong run token")
        if not isinstance(rank, int) or not 0 <= rank < self.size or hello.get("size") != self.size:
            return self._refuse(conn, addr, f"rank {rank!r} / size {hello.get('size')!r} "
                                            f"do not fit this run of {self.size}")
        host = str(hello.get("host", addr[0]))[:200]
        if hello.get("role") == "watchdog":
            return self._serve_watchdog(conn, rank, host)
        with self.cond:
            if rank in self.members:
                return self._refuse(conn, addr, f"rank {rank} is already connected")
            self.members[rank] = host
        conn.settimeout(None)
        send_frame(conn, OK, {"size": self.size})
        clean = False
        try:
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
                    send_frame(conn, OK, self._status())
                elif kind == BYE:
                    clean = True
                    return
        except (FrameError, OSError, ConnectionError, KeyError, ValueError, TypeError):
            pass
        finally:
            with self.cond:
                del self.members[rank]
                if not clean and self.failed is None and not self._closing:
                    self.failed = f"rank {rank} on host {host} left the run (process died or lost its connection)"
                self.cond.notify_all()
            conn.close()

    def _status(self, stale_after: float | None = None) -> dict:
        with self.cond:
            now = time.monotonic()
            stale = [[r, h, round(now - t, 1)] for r, (t, h) in sorted(self.beats.items())
                     if stale_after is not None and now - t > stale_after]
            return {"failed": self.failed, "aborted": self.aborted, "stale": stale}

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
        self._closing = True
        with contextlib.suppress(OSError):
            self.listener.close()


def _connect_any(hosts: list[str], port: int, timeout: float) -> socket.socket:
    error: OSError = OSError("no address")
    for h in hosts:
        try:
            return socket.create_connection((h, port), timeout=timeout if len(hosts) == 1 else 1.0)
        except OSError as exc:
            error = exc
    raise error


class StoreClient:
    """One rank's connection to the store. Used only from the rank's main thread."""

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

    def set(self, key: str, value: bytes) -> None:
        self._send(SET, {"key": key}, value)

    def get(self, key: str, timeout: float | None = None) -> bytes:
        """The value of key once some rank sets it; waits ``timeout`` (default the run's) at most."""
        wait = self.timeout if timeout is None else timeout
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
        self._send(STATUS, {})
        try:
            kind, obj, _ = read_frame(self.sock)
        except (OSError, ConnectionError, FrameError) as exc:
            raise PeerError(f"lost the rendezvous at {self.root} (rank 0): {exc}") from None
        if obj.get("aborted"):
            raise RunAborted(str(obj["aborted"][0]), int(obj["aborted"][1]))
        if obj.get("failed"):
            raise PeerError(str(obj["failed"]))

    def beat(self, stale_after: float) -> dict:
        """Watchdog connection: report this rank alive; get the run's status back."""
        self._send(BEAT, {"stale_after": stale_after})
        try:
            return read_frame(self.sock)[1]
        except (OSError, ConnectionError, FrameError) as exc:
            raise PeerError(f"lost the rendezvous at {self.root} (rank 0): {exc}") from None

    def abort(self, message: str, code: int) -> None:
        with contextlib.suppress(PeerError):
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
