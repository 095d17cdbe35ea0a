"""The run's rendezvous: a small key-value store served by rank 0 over TCP.

Every rank (rank 0 included) connects as a client and proves it belongs to the run with the
per-run token. Rank 0 serves every connection from one thread (a selector loop), so its cost in
threads does not grow with the ranks. Collectives (all-gather, broadcast, barrier) are built on blocking ``get``.
Rank 0 also reads and writes the store in its own process (``put``, ``take``, ``arrivals``), and a
GET may carry a SET (``StoreClient.swap``): a rank reports one task and waits for the next in one
request (core/run/tasks.py). The server notices a rank that disconnects without saying goodbye and
fails every pending and later ``get`` at once, naming that rank and its host, so no rank waits for
a dead peer. A tolerant store (a cluster evaluation, where a dead node is a finding) records the
rank as dead instead and answers ``status`` with it; the ranks that wait on it ask
(core/run/collectives.py), and so does rank 0 (``departed``).
"""

from __future__ import annotations

import contextlib
import heapq
import selectors
import socket
import threading
import time

from commbench.core.errors import PeerError, PeerTimeout, RunAborted
from commbench.core.run import auth
from commbench.core.run.framing import FrameError, Seal, Tampered, encode, read_frame, send_frame, take_frame
from commbench.core.run.gate import BUSY, Gate
from commbench.core.run.gate import HELLO as GATE_HELLO

HELLO, OK, ERR, SET, GET, VALUE, ABORT, BYE, STATUS, BEAT, EXCUSE = range(1, 12)
HELLO_WAIT = 10.0  # s for the rendezvous's challenge and proof, once connected
assert (HELLO, ERR) == (GATE_HELLO, BUSY)  # the gate reads the store's hello and says 'busy' in its ERR frame


class _Member:
    """A proven connection (a rank, or a rank's watchdog): bytes in and out, and its one pending GET."""

    __slots__ = ("sock", "seal", "rank", "host", "watchdog", "inbuf", "outbuf", "pending", "clean", "held")

    def __init__(self, sock: socket.socket, seal: Seal, rank: int, host: str, watchdog: bool) -> None:
        self.sock, self.seal, self.rank, self.host, self.watchdog = sock, seal, rank, host, watchdog
        self.inbuf, self.outbuf = bytearray(), bytearray()
        self.pending: tuple[str, float, float, bool] | None = None  # (key, deadline, timeout, take) of a GET waiting
        self.clean = False  # said goodbye
        self.held: tuple[float, float] | None = None  # a watchdog's beat held for news: (deadline, stale_after)


class StoreServer:
    """Serves the store on an already listening socket from ONE thread: a selector loop over the
    gate (unproven connections, core/run/gate.py) and every proven rank's connections, whatever the
    number of ranks. A GET whose key is not there yet waits in a table, not in a thread; the loop
    answers it when the key is set, the run fails or aborts, or its deadline passes."""

    def __init__(self, listener: socket.socket, token: str, size: int, tolerant: bool = False) -> None:
        self.listener = listener
        self.size = size
        self.tolerant = tolerant
        self.dead: dict[int, str] = {}  # tolerant: rank -> why it left
        self.data: dict[str, bytes] = {}
        self.cond = threading.Condition()  # members' comings and goings, for wait_for_others
        self.members: dict[int, str] = {}  # rank -> host, while connected
        self.beats: dict[int, tuple[float, str]] = {}  # rank -> (last heartbeat, host), from watchdogs
        self.watching: set[int] = set()  # ranks whose watchdog is connected
        self.failed: str | None = None
        self.aborted: tuple[str, int] | None = None
        self._closing = False
        self._conns: dict[socket.socket, _Member] = {}
        self._waiting: dict[str, set[_Member]] = {}  # key -> members whose GET waits for it
        self._deadlines: list[tuple[float, int, _Member]] = []  # heap of pending GETs' deadlines
        self._held: set[_Member] = set()  # watchdogs whose beat waits for news (a long poll)
        self._seq = 0
        self.requests = 0  # answered so far (the loop's load, for the record)
        self.heartbeats = 0  # of which watchdogs' beats
        self.counted: dict[str, int] = {}  # collective name -> the SETs and GETs of its keys (count)
        self._local: list[tuple[str, bytes]] = []  # rank 0's own SETs, for the loop to make (put)
        self._watched: set[str] = set()  # keys rank 0 waits for (watch), and those of them set since (arrivals)
        self._fresh: list[str] = []
        self._wake_r, self._wake_w = socket.socketpair()  # put wakes the loop
        self._wake_r.setblocking(False)
        self.gate = Gate(listener, "rank 0", token)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.gate.selector.fileno(), selectors.EVENT_READ, None)  # the gate's own epoll
        self.selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        threading.Thread(target=self._loop, name="rdv-loop", daemon=True).start()

    @property
    def port(self) -> int:
        return self.listener.getsockname()[1]

    @property
    def refused(self) -> int:
        return self.gate.refused

    # -- the loop ---------------------------------------------------------------------------
    def _loop(self) -> None:
        try:
            while not self._closing:
                for key, events in self.selector.select(self._next_timeout()):
                    if key.data is None:
                        continue  # the gate's own selector: read below
                    if key.data == "wake":
                        self._put_local()
                        continue
                    if events & selectors.EVENT_WRITE and not self._flush(key.data):
                        continue
                    if events & selectors.EVENT_READ:
                        self._read(key.data)
                for proven in self.gate.wait(0):  # also drops hellos that ran out of time
                    self._admit(*proven)
                self._expire()
                self._release()
        except (OSError, ValueError):  # the listener was closed under the gate's selector
            pass
        finally:
            for m in list(self._conns.values()):
                self._drop(m)
            self.gate.close()
            self.selector.close()
            self._wake_r.close()
            self._wake_w.close()

    def _next_timeout(self) -> float:
        soonest = self._deadlines[0][0] - time.monotonic() if self._deadlines else 0.5
        return max(0.0, min(0.5, soonest))

    def _admit(self, conn: socket.socket, addr: tuple, hello: dict, seal: Seal) -> None:
        """A hello with the run's token: a rank of this run is served by the loop; anything else is refused."""
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
        conn.setblocking(False)
        m = _Member(conn, seal, rank, host, watchdog)
        self._conns[conn] = m
        self.selector.register(conn, selectors.EVENT_READ, m)
        self._send(m, OK, {"size": self.size})

    def _read(self, m: _Member) -> None:
        try:
            chunk = m.sock.recv(1 << 16)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if not chunk:
            return self._drop(m)
        m.inbuf += chunk
        try:
            while m.sock in self._conns and (frame := take_frame(m.inbuf, m.seal)) is not None:
                self._handle(m, *frame)
        except Tampered as exc:  # the rank is not known to be gone, but its connection can no longer be trusted
            self._drop(m, f"the connection of rank {m.rank} on host {m.host} was tampered with: {exc}")
        except (FrameError, KeyError, ValueError, TypeError):
            self._drop(m)  # a member that breaks the protocol has left the run

    def _handle(self, m: _Member, kind: int, obj: dict, blob: bytes) -> None:
        self.requests += 1
        if kind == BYE:
            m.clean = True
            if m.watchdog:
                self.beats.pop(m.rank, None)
            return self._drop(m)
        if kind == EXCUSE:  # one way, never answered: the rank may be waiting on this very process
            if m.rank in self.beats:  # its watchdog beats (a stopped one is not brought back)
                now = time.monotonic()
                self.beats[m.rank] = (now + min(600.0, max(0.0, float(obj["seconds"]))), m.host)
            return
        if m.watchdog:
            self.heartbeats += kind == BEAT
            if kind == BEAT:  # answered when there is news (a rank stale, failed, aborted) or after ``wait``
                now = time.monotonic()  # an excused rank's beats do not end its excuse (EXCUSE 0 does)
                self.beats[m.rank] = (max(now, self.beats.get(m.rank, (now, ""))[0]), m.host)
                stale_after, wait = float(obj.get("stale_after", 60)), min(60.0, float(obj.get("wait", 0)))
                if wait > 0 and not self._news(stale_after):
                    m.held = (time.monotonic() + wait, stale_after)
                    self._held.add(m)
                else:
                    self._send(m, OK, self._status(stale_after))
            return
        if self.counted and kind in (SET, GET):
            name = str(obj["key"]).partition(":")[2].partition("/")[0]  # a collective's key: "7:name/rank"
            if name in self.counted:
                self.counted[name] += 1
        if kind == SET:
            self._set(str(obj["key"]), blob)
        elif kind == GET:
            if "set" in obj:  # a report and the wait for what follows it, in one request (swap)
                self._set(str(obj["set"]), blob)
            self._get(m, str(obj["key"]), float(obj.get("timeout", 60)), bool(obj.get("take")))
        elif kind == ABORT:
            if self.aborted is None:
                self.aborted = (str(obj.get("message", "aborted")), int(obj.get("code", 1)))
                self._answer_all()
        elif kind == STATUS:
            stale = obj.get("stale_after")
            self._send(m, OK, self._status(float(stale) if isinstance(stale, (int, float)) else None))

    def _set(self, key: str, blob: bytes) -> None:
        taken = False
        for w in self._waiting.pop(key, ()):
            taken |= bool(w.pending and w.pending[3])
            w.pending = None
            self._send(w, VALUE, {}, blob)
        if not taken:
            with self.cond:  # rank 0's main thread may be waiting for it (arrived, arrivals)
                self.data[key] = blob
                if key in self._watched:
                    self._watched.discard(key)
                    self._fresh.append(key)
                self.cond.notify_all()

    def _put_local(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while self._wake_r.recv(4096):
                pass
        with self.cond:
            local, self._local = self._local, []
        for key, blob in local:
            self._set(key, blob)

    def put(self, key: str, value: bytes) -> None:
        """Rank 0's own SET, made by the loop (which answers the GETs waiting for it): no request."""
        with self.cond:
            self._local.append((key, value))
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")

    def take(self, key: str) -> bytes | None:
        """Rank 0 reads key and the store forgets it; None while it is not there."""
        with self.cond:
            return self.data.pop(key, None)

    def count(self, name: str) -> None:
        """Count from now the requests for the keys of the collectives called ``name`` (``counted``)."""
        self.counted.setdefault(name, 0)

    def uncount(self, name: str) -> int:
        """Stop counting ``name``'s requests and return how many there were: with nothing counted, the
        loop no longer looks at each request's key."""
        return self.counted.pop(name, 0)

    def watch(self, keys) -> None:
        """Rank 0 will take these keys as they are set (``arrivals``); those already set count at once."""
        with self.cond:
            for k in keys:
                if k in self.data:
                    self._fresh.append(k)
                else:
                    self._watched.add(k)

    def unwatch(self, keys) -> None:
        with self.cond:
            self._watched.difference_update(keys)

    def arrivals(self, timeout: float) -> list[tuple[str, bytes]]:
        """Rank 0: the watched keys set since the last call, with their values, taken from the store;
        waits up to ``timeout`` s for one (or for a member to leave). Its cost is what arrived, not
        what is still awaited."""
        with self.cond:
            left = (len(self.members), len(self.dead), self.failed)
            self.cond.wait_for(lambda: self._fresh or (len(self.members), len(self.dead), self.failed) != left,
                               timeout)
            out = [(k, self.data.pop(k)) for k in self._fresh if k in self.data]
            self._fresh.clear()
            return out

    def _get(self, m: _Member, key: str, timeout: float, take: bool = False) -> None:
        blob = self.data.get(key)
        if blob is not None:
            if take:
                with self.cond:
                    self.data.pop(key, None)
            return self._send(m, VALUE, {}, blob)
        if self.aborted or self.failed or timeout <= 0:
            return self._answer(m, key, timeout)
        deadline = time.monotonic() + timeout
        m.pending = (key, deadline, timeout, take)
        self._waiting.setdefault(key, set()).add(m)
        self._seq += 1
        heapq.heappush(self._deadlines, (deadline, self._seq, m))

    def _answer(self, m: _Member, key: str, timeout: float) -> None:
        """A GET that ends without its key: the run aborted or failed, or its time ran out."""
        if m.pending:
            self._waiting.get(m.pending[0], set()).discard(m)
            m.pending = None
        if self.aborted:
            self._send(m, ERR, {"kind": "aborted", "message": self.aborted[0], "code": self.aborted[1]})
        elif self.failed:
            self._send(m, ERR, {"kind": "failed", "message": self.failed})
        else:
            self._send(m, ERR, {"kind": "timeout", "message": f"no answer for {key!r} within {timeout:g} s"})

    def _answer_all(self) -> None:
        """The run failed or aborted: every waiting GET hears it now."""
        for waiters in list(self._waiting.values()):
            for w in list(waiters):
                if w.pending:
                    self._answer(w, w.pending[0], 0)
        self._waiting.clear()

    def _expire(self) -> None:
        now = time.monotonic()
        while self._deadlines and self._deadlines[0][0] <= now:
            deadline, _, m = heapq.heappop(self._deadlines)
            if m.pending and m.pending[1] == deadline:
                self._answer(m, m.pending[0], m.pending[2])

    def _news(self, stale_after: float) -> bool:
        """Anything a watchdog acts on: the run aborted, or (unless tolerant) failed or has a stale rank."""
        if self.aborted:
            return True
        if self.tolerant:
            return False
        oldest = min((t for t, _ in self.beats.values()), default=time.monotonic())
        return bool(self.failed) or time.monotonic() - oldest > stale_after

    def _release(self) -> None:
        """Answer the held beats that have news or whose wait is over (the loop comes by every 0.5 s)."""
        if not self._held:
            return
        now = time.monotonic()
        news = {s: self._news(s) for s in {m.held[1] for m in self._held if m.held}}
        for m in list(self._held):
            held = m.held
            if held is None or not (held[0] <= now or news[held[1]]):
                continue
            self._held.discard(m)
            m.held = None
            self._send(m, OK, self._status(held[1]))

    def _send(self, m: _Member, kind: int, obj: dict, blob: bytes = b"") -> None:
        m.outbuf += encode(kind, obj, blob, m.seal)
        if self._flush(m) and m.outbuf:
            self.selector.modify(m.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, m)

    def _flush(self, m: _Member) -> bool:
        """Write what the socket takes; False if the member is gone."""
        try:
            n = m.sock.send(m.outbuf)
        except (BlockingIOError, InterruptedError):
            return True
        except OSError:
            self._drop(m)
            return False
        del m.outbuf[:n]
        if not m.outbuf and m.sock in self._conns:
            self.selector.modify(m.sock, selectors.EVENT_READ, m)
        return True

    def _drop(self, m: _Member, why: str = "") -> None:
        """A member's connection ends: cleanly (goodbye), or the rank died (failed, or dead if tolerant);
        ``why``, if not that it died."""
        if self._conns.pop(m.sock, None) is None:
            return
        with contextlib.suppress(KeyError, ValueError, OSError):
            self.selector.unregister(m.sock)
        m.sock.close()
        self._held.discard(m)
        if m.pending:
            self._waiting.get(m.pending[0], set()).discard(m)
            m.pending = None
        with self.cond:
            if m.watchdog:
                self.watching.discard(m.rank)
            else:
                self.members.pop(m.rank, None)
                if not m.clean and not self._closing:
                    why = why or f"rank {m.rank} on host {m.host} left the run (process died or lost its connection)"
                    if self.tolerant:
                        self.dead.setdefault(m.rank, why)
                    elif self.failed is None:
                        self.failed = why
            self.cond.notify_all()
        if self.failed:
            self._answer_all()

    def declare_dead(self, rank: int, why: str) -> None:
        """Rank 0 gives up on a rank that is alive but hung (tolerant runs): waits on it end as on a death."""
        with self.cond:
            self.dead.setdefault(rank, why)
            self.cond.notify_all()

    def departed(self, stale_after: float) -> dict[int, str]:
        """Rank 0's own view: every rank that died, or whose heartbeat is older than ``stale_after`` s."""
        now = time.monotonic()
        out = {r: f"rank {r} on host {h} stopped responding (no heartbeat for {now - t:.0f} s)"
               for r, (t, h) in dict(self.beats).items() if now - t > stale_after}
        with self.cond:
            out.update(self.dead)
        return out

    def _status(self, stale_after: float | None = None) -> dict:
        now = time.monotonic()
        stale = [[r, h, round(now - t, 1)] for r, (t, h) in sorted(self.beats.items())
                 if stale_after is not None and now - t > stale_after]
        return {"failed": self.failed, "aborted": self.aborted, "stale": stale,
                "dead": [[r, why] for r, why in sorted(self.dead.items())]}

    def wait_for_others(self, own_rank: int, timeout: float) -> None:
        """Rank 0 keeps serving until every other rank has said goodbye (or died)."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while any(r != own_rank for r in self.members) and time.monotonic() < deadline:
                self.cond.wait(0.1)

    def close(self) -> None:
        """Stop: the loop closes the listener, every unproven connection and every member's."""
        self._closing = True
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the gate's selector, and so the loop, at once
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")


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
        self.rank0 = "rank 0"  # "rank 0 on host H" once the world knows it: what messages call it
        deadline = time.monotonic() + timeout
        delay = 0.01
        candidates = host.split(",")  # the MPI bootstrap sends every address rank 0 has
        hello = {"rank": rank, "size": size, "host": my_host, "role": role}
        while True:
            try:
                self.sock = _connect_any(candidates, port, min(5.0, timeout))
            except OSError as exc:  # not listening yet: try again until the timeout
                why: object = exc
            else:
                self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self.sock.settimeout(timeout + 5)
                kind, obj = None, {}  # type: tuple[int | None, dict]
                broke: Exception | None = None
                try:
                    self.seal = auth.authenticate(self.sock, token, hello, min(deadline, time.monotonic() + HELLO_WAIT))
                    kind, obj, _ = read_frame(self.sock, seal=self.seal)
                except auth.Busy:
                    obj = {"kind": "busy"}
                except auth.Impostor:
                    self.sock.close()
                    raise PeerError(f"rank {rank} on host {my_host}: the process listening at {self.root} (where "
                                    "rank 0's rendezvous should be) did not prove it knows the run token: another "
                                    "program holds that port; nothing secret was sent to it") from None
                except Tampered as exc:
                    self.sock.close()
                    raise PeerError(f"rank {rank} on host {my_host}: {self._lost(exc)}") from None
                except (OSError, ConnectionError, FrameError) as exc:
                    broke = exc
                if kind == OK:
                    break
                self.sock.close()
                if broke is not None and time.monotonic() >= deadline:  # the handshake ran out of time
                    raise PeerError(f"rank {rank} on host {my_host}: the handshake with the rendezvous at {self.root} "
                                    f"did not finish within --timeout {timeout:g} s ({broke}); give a longer "
                                    "--timeout") from None
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

    def swap(self, put: str, value: bytes, key: str, timeout: float | None = None) -> bytes:
        """Set ``put`` to value and wait for ``key``, which the store then forgets: one request (a rank's
        report of one task and its wait for the next)."""
        with self.lock:
            return self._get(key, self.timeout if timeout is None else timeout, {"set": put, "take": True}, value)

    def _get(self, key: str, wait: float, extra: dict | None = None, blob: bytes = b"") -> bytes:
        self._send(GET, {"key": key, "timeout": wait, **(extra or {})}, blob)
        try:
            self.sock.settimeout(wait + 5)
            kind, obj, blob = read_frame(self.sock, seal=self.seal)
        except (OSError, ConnectionError, FrameError) as exc:
            raise self._lost(exc) from None
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

    def beat(self, stale_after: float, wait: float = 0.0) -> dict:
        """Watchdog connection: report this rank alive; get the run's status back, at once if there is
        news (a rank stale for ``stale_after`` s, failed, aborted), else after ``wait`` s (a long poll:
        the watchdog sleeps in it). No answer within ``stale_after`` s: rank 0 is stopped or hung."""
        with self.lock:
            self._send(BEAT, {"stale_after": stale_after, "wait": wait})
            try:
                self.sock.settimeout(max(stale_after, wait + 1.0))
                return read_frame(self.sock, seal=self.seal)[1]
            except TimeoutError:
                raise PeerError(f"{self.rank0} at {self.root}, which serves the rendezvous, stopped responding (no "
                                f"answer to a heartbeat within {max(stale_after, wait + 1.0):g} s; hung or "
                                "stopped; see --timeout)") from None
            except (OSError, ConnectionError, FrameError) as exc:
                raise self._lost(exc) from None
            finally:
                with contextlib.suppress(OSError):
                    self.sock.settimeout(self.timeout + 5)

    def _ask(self, kind: int, obj: dict) -> dict:
        with self.lock:
            self._send(kind, obj)
            try:
                return read_frame(self.sock, seal=self.seal)[1]
            except (OSError, ConnectionError, FrameError) as exc:
                raise self._lost(exc) from None

    def excuse(self, seconds: float) -> None:
        """This rank's watchdog may not beat for ``seconds`` (0: it beats again): one way, unanswered,
        so a rank whose own process serves the store (rank 0, its GIL held) cannot wait on itself."""
        with contextlib.suppress(PeerError), self.lock:
            self._send(EXCUSE, {"seconds": seconds})

    def abort(self, message: str, code: int) -> None:
        with contextlib.suppress(PeerError), self.lock:
            self._send(ABORT, {"message": message, "code": code})

    def bye(self) -> None:
        """Say goodbye (the store forgets this connection's heartbeat and closes it, which also ends a
        beat another thread is waiting in)."""
        with contextlib.suppress(OSError):
            send_frame(self.sock, BYE, {}, seal=self.seal)

    def close(self) -> None:
        self.bye()
        self.sock.close()

    def _lost(self, exc: Exception) -> PeerError:
        if isinstance(exc, Tampered):
            return PeerError(f"the connection to the rendezvous at {self.root} ({self.rank0}) was tampered with: {exc}")
        return PeerError(f"lost the rendezvous at {self.root} ({self.rank0}): {exc}")

    def _send(self, kind: int, obj: dict, blob: bytes = b"") -> None:
        try:
            send_frame(self.sock, kind, obj, blob, self.seal)
        except OSError as exc:
            raise self._lost(exc) from None
