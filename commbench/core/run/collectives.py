"""Collectives over the rendezvous store, for the whole world and for groups of its ranks.

``Collectives`` is what World and Group share: all-gather, broadcast, gather and barrier, made of
``set`` and ``get`` on keys named by the caller's order of calls (every member calls the same
collectives in the same order). A ``Group`` is some of the world's ranks, renumbered 0..k-1 in the
order given, with keys of its own: a transport built on a group connects only its members, so a
cluster evaluation can open a pair, measure it and close it while other pairs do the same.

In a tolerant run (a cluster evaluation, where a dead node is a finding, not the end) a wait asks
the store, once a second, whether the rank it waits for has died or stopped heartbeating, or whether
a member gave up on the group's work (``Group.fail``); then it raises PeerError naming that rank
and host (or, for ``survivors`` barriers, goes on without it).
"""

from __future__ import annotations

import contextlib
import json
import struct
import time
from typing import Any

from commbench.core.errors import PeerError, PeerTimeout

POLL_S = 1.0  # a tolerant wait asks whether its rank is still alive this often
STALE_GRACE = 2.0  # as the watchdog's: a heartbeat older than timeout + this is a stopped rank


_LEN = struct.Struct("<q")


def pack(values: list[bytes | None]) -> bytes:
    """A list of byte strings (None allowed) as one: each as its length (-1: None) and its bytes."""
    return b"".join(_LEN.pack(-1) if v is None else _LEN.pack(len(v)) + v for v in values)


def unpack(blob: bytes) -> list[bytes | None]:
    """The inverse of pack; a malformed value is a PeerError (it came from the rendezvous)."""
    out: list[bytes | None] = []
    off = 0
    while off < len(blob):
        if off + _LEN.size > len(blob):
            raise PeerError("malformed all-gather value from the rendezvous")
        (n,) = _LEN.unpack_from(blob, off)
        off += _LEN.size
        if n > len(blob) - off:
            raise PeerError("malformed all-gather value from the rendezvous")
        out.append(None if n < 0 else bytes(blob[off:off + n]))
        off += max(n, 0)
    return out


class Collectives:
    """Collectives over ``store`` among ``members`` (world ranks), this process being ``rank``."""

    rank: int
    size: int
    members: tuple[int, ...]
    timeout: float
    tolerant: bool
    store: Any  # rendezvous.StoreClient, or a pair's link.LinkStore
    _tag = ""
    _seq: int

    def _key(self, name: str) -> str:
        self._seq += 1
        return f"{self._tag}{self._seq}:{name}"

    def describe(self, rank: int) -> str:
        raise NotImplementedError

    def gone(self, rank: int) -> str | None:
        """Why member ``rank`` has left the run (died, or stopped heartbeating), or None while it lives."""
        return self.departed().get(self.members[rank])

    def departed(self) -> dict[int, str]:
        """Every world rank that has left the run (died, or stopped heartbeating) and why: one request."""
        status = self.store.status(self.timeout + STALE_GRACE)
        out = {int(r): f"rank {r} on host {host} stopped responding (no heartbeat for {age:g} s)"
               for r, host, age in status.get("stale", [])}
        out.update({int(r): str(why) for r, why in status.get("dead", [])})  # a death says more than silence
        return out

    def failed(self) -> str | None:
        """Why a member gave up on this group's work (Group.fail), or None."""
        return None

    def _value(self, key: str, rank: int, patient: bool) -> bytes:
        """``wait_key`` without ``survivors``: a value, or PeerError."""
        got = self.wait_key(key, rank, patient)
        assert got is not None  # only survivors=True returns None
        return got

    def wait_key(self, key: str, rank: int, patient: bool, survivors: bool = False) -> bytes | None:
        """The value member ``rank`` sets at key. Not ``patient``: within the run's timeout. In a tolerant
        run a dead member raises PeerError (``survivors``: returns None)."""
        if not self.tolerant or (self.members[rank] == 0 and type(self).failed is Collectives.failed):
            # rank 0 serves the store: its death or stop ends the connection itself, so a wait on it need
            # not ask the store (at 10,000 ranks, waiting ranks' polls would outnumber everything else)
            return self._patient_get(key) if patient else self.store.get(key)
        deadline = None if patient else time.monotonic() + self.timeout
        while True:
            try:
                return self.store.get(key, POLL_S)
            except PeerTimeout:
                pass
            why = self.gone(rank) or self.failed()
            if why:
                if survivors:
                    return None
                raise PeerError(why)
            if deadline is not None and time.monotonic() > deadline:
                raise PeerTimeout(f"no answer from {self.describe(rank)} within {self.timeout:g} s (see --timeout)")

    def _patient_get(self, key: str) -> bytes:
        """Wait for key as long as every rank lives: a rank that dies or aborts ends the wait at once
        (the store says so), one that stops or hangs is caught by the watchdogs (stale heartbeats)."""
        while True:
            try:
                return self.store.get(key)
            except PeerTimeout:
                continue

    def allgather(self, name: str, value: bytes, patient: bool = False, survivors: bool = False) -> list[bytes | None]:
        """Every member's value (None for a member gone, with ``survivors``). Through the root, which
        gathers and publishes them as one value: 2(n - 1) store requests in all, not n^2."""
        key = self._key(name)
        if self.rank != 0:
            self.store.set(f"{key}/{self.rank}", value)
            return unpack(self._value(f"{key}/all", 0, patient))
        values = [value, *(self.wait_key(f"{key}/{r}", r, patient, survivors) for r in range(1, self.size))]
        self.store.set(f"{key}/all", pack(values))
        return values

    def exchange_json(self, name: str, obj: object, peers) -> dict[int, object]:
        """Every member publishes obj; each gets its ``peers``' only (a transport's addresses: O(peers)
        requests per rank, not O(ranks)). Every member calls it, with its own peers."""
        key = self._key(name)
        self.store.set(f"{key}/{self.rank}", json.dumps(obj).encode())
        return {p: json.loads(self._value(f"{key}/{p}", p, False))
                for p in sorted(set(peers)) if p != self.rank}

    def allgather_json(self, name: str, obj: object) -> list:
        return [None if b is None else json.loads(b) for b in self.allgather(name, json.dumps(obj).encode())]

    def bcast_json(self, name: str, obj: object = None, root: int = 0, timeout: float | None = None) -> object:
        """Root's obj on every member; ``timeout`` (default the run's) bounds the wait for it."""
        key = self._key(name)
        if self.rank == root:
            self.store.set(key, json.dumps(obj).encode())
            return obj
        if self.tolerant and timeout is None:
            return json.loads(self._value(key, root, False))
        return json.loads(self.store.get(key, timeout))

    def gather_json(self, name: str, obj: object, root: int = 0, patient: bool = False,
                    survivors: bool = False) -> list | None:
        """Every member's obj on root (None for a member gone, with ``survivors``), None elsewhere."""
        key = self._key(name)
        if self.rank != root:
            self.store.set(f"{key}/{self.rank}", json.dumps(obj).encode())
            return None
        got = [None if r == root else self.wait_key(f"{key}/{r}", r, patient, survivors) for r in range(self.size)]
        return [obj if r == root else None if b is None else json.loads(b) for r, b in enumerate(got)]

    def barrier(self, name: str = "barrier", patient: bool = False, survivors: bool = False) -> None:
        """Every member reaches this point. ``patient``: wait as long as the others live (a rank that only
        answers waits here while another measures a long point), not the run's timeout; ``survivors``
        (tolerant runs): every member still alive. Through the root: 2(n - 1) store requests, not n^2."""
        key = self._key(name)
        if self.rank != 0:
            self.store.set(f"{key}/{self.rank}", b"")
            self.wait_key(f"{key}/go", 0, patient)
            return
        for r in range(1, self.size):
            self.wait_key(f"{key}/{r}", r, patient, survivors)
        self.store.set(f"{key}/go", b"")

    def check_alive(self) -> None:
        """Raise PeerError if a member has died, RunAborted if one aborted: for loops waiting on a peer."""
        self.store.check()
        if self.tolerant:
            for r in range(self.size):
                why = r != self.rank and self.gone(r)
                if why:
                    raise PeerError(why)


class Group(Collectives):
    """Some of the world's ranks (``members``, world ranks in the group's order), renumbered from 0,
    with collectives of their own: what a transport needs of a world to connect them."""

    def __init__(self, world, members: list[int] | tuple[int, ...], tag: str, store=None) -> None:
        if world.rank not in members:
            raise ValueError(f"rank {world.rank} is not in group {tag} {members}")
        self.world = world
        self.members = tuple(members)
        self.rank = self.members.index(world.rank)
        self.size = len(self.members)
        self._tag = f"g{tag}/"
        self._seq = 0
        self.store = store or world.store  # a pair's own connection (core/run/link.py), else the rendezvous
        self.timeout = world.timeout
        self.tolerant = world.tolerant
        self.placement = world.placement
        self.host = world.host
        self.bind = world.bind
        self.hosts = [world.hosts[m] for m in self.members]
        self.addresses = [world.addresses[m] for m in self.members]

    def describe(self, rank: int) -> str:
        return self.world.describe(self.members[rank])

    def fail(self, why: str) -> None:
        """This member gives up on the group's work (a peer's fault): members waiting for it stop too."""
        with contextlib.suppress(PeerError):  # a pair's connection may be what failed
            self.store.set(f"{self._tag}failed", f"{self.world.describe(self.world.rank)} gave up: {why}".encode())

    def failed(self) -> str | None:
        try:
            return self.store.get(f"{self._tag}failed", 0).decode(errors="replace")
        except PeerTimeout:
            return None
