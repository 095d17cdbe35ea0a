"""The rendezvous store in process: one thread serves any number of ranks, waiting GETs are answered
when their key comes, the run fails or aborts, or their time runs out; a tolerant store records a
dead rank instead of failing; a member's garbage ends only that member; all-gather's packing."""

from __future__ import annotations

import socket
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from commbench.core.errors import PeerError, PeerTimeout, RunAborted
from commbench.core.run import auth
from commbench.core.run.collectives import pack, unpack
from commbench.core.run.framing import encode, read_frame, send_frame
from commbench.core.run.rendezvous import GET, OK, VALUE, StoreClient, StoreServer

TOKEN = "t0ken"


def server(size: int, tolerant: bool = False) -> StoreServer:
    listener = socket.create_server(("127.0.0.1", 0), backlog=1024)
    return StoreServer(listener, TOKEN, size, tolerant)


def client(srv: StoreServer, rank: int, role: str = "rank") -> StoreClient:
    return StoreClient("127.0.0.1", srv.port, TOKEN, rank, srv.size, f"h{rank}", 10, role=role)


def raw_member(srv: StoreServer, rank: int) -> socket.socket:
    """A proven connection whose requests this test sends and reads by hand (a GET that waits)."""
    s = socket.create_connection(("127.0.0.1", srv.port))
    auth.authenticate(s, TOKEN, {"rank": rank, "size": srv.size, "host": f"h{rank}"}, time.monotonic() + 10)
    assert read_frame(s)[0] == OK
    s.settimeout(10)
    return s


def test_one_thread_serves_two_hundred_connections_and_their_waiting_gets():
    before = threading.active_count()
    srv = server(100)
    assert threading.active_count() == before + 1  # the loop
    waiting = [raw_member(srv, r) for r in range(1, 100)]
    watchdogs = [client(srv, r, "watchdog") for r in range(100)]
    setter = client(srv, 0)
    for s in waiting:
        send_frame(s, GET, {"key": "k", "timeout": 30})
    time.sleep(0.2)
    assert threading.active_count() == before + 1  # 200 connections, 99 GETs waiting: still one thread
    setter.set("k", b"v" * 1000)
    for s in waiting:
        kind, _, blob = read_frame(s)
        assert (kind, blob) == (VALUE, b"v" * 1000)
    assert watchdogs[5].beat(60)["failed"] is None
    for c in [setter, *watchdogs]:
        c.close()
    for s in waiting:
        s.close()
    srv.close()


def test_a_waiting_get_times_out_and_a_zero_timeout_answers_at_once():
    srv = server(2)
    a = client(srv, 0)
    t0 = time.monotonic()
    with pytest.raises(PeerTimeout):
        a.get("nothing", 0.3)
    assert 0.25 < time.monotonic() - t0 < 3
    t0 = time.monotonic()
    with pytest.raises(PeerTimeout):
        a.get("nothing", 0)
    assert time.monotonic() - t0 < 1
    a.close()
    srv.close()


def test_a_dead_member_fails_waiters_and_a_tolerant_store_records_it_instead():
    for tolerant in (False, True):
        srv = server(3, tolerant)
        a, b = client(srv, 0), client(srv, 1)
        victim = raw_member(srv, 2)
        got: list = []
        t = threading.Thread(target=lambda: got.append(_try(lambda: a.get("never", 20))))
        t.start()
        time.sleep(0.2)
        victim.close()  # no goodbye: the rank died
        t.join(10 if not tolerant else 0.5)
        status = b.status()
        if tolerant:
            assert t.is_alive() and status["failed"] is None  # the wait goes on; the death is a status
            assert [r for r, _ in status["dead"]] == [2] and "rank 2 on host h2" in status["dead"][0][1]
            b.set("never", b"now")
            t.join(10)
            assert got == [b"now"]
        else:
            assert isinstance(got[0], PeerError) and "rank 2 on host h2 left the run" in str(got[0])
            assert "rank 2" in status["failed"]
        a.close()
        b.close()
        srv.close()


def test_abort_answers_every_waiter():
    srv = server(3)
    a, b = client(srv, 0), client(srv, 1)
    got: list = []
    t = threading.Thread(target=lambda: got.append(_try(lambda: a.get("never", 20))))
    t.start()
    time.sleep(0.2)
    b.abort("stop now", 2)
    t.join(10)
    assert isinstance(got[0], RunAborted) and got[0].exit_code == 2 and "stop now" in str(got[0])
    srv.close()


@settings(max_examples=40, deadline=None)
@given(st.binary(max_size=300))
def test_a_members_garbage_ends_that_member_only(junk):
    srv = server(3)
    good = client(srv, 0)
    bad = raw_member(srv, 1)
    bad.sendall(junk + encode(GET, {"key": 5, "timeout": "x"}))  # then a GET of the wrong types
    bad.close()
    good.set("still", b"here")
    assert good.get("still") == b"here"  # the loop lives and serves the others
    good.close()
    srv.close()


@settings(max_examples=200)
@given(st.lists(st.one_of(st.none(), st.binary(max_size=50)), max_size=20))
def test_allgather_packing_round_trips(values):
    assert unpack(pack(values)) == values


@settings(max_examples=200)
@given(st.binary(max_size=100))
def test_unpacking_garbage_is_a_peer_error_or_a_list(blob):
    try:
        out = unpack(blob)
    except PeerError:
        return
    assert isinstance(out, list)


def _try(f):
    try:
        return f()
    except Exception as exc:  # the test looks at which
        return exc
