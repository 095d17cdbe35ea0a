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
from commbench.core.run.framing import Seal, encode, read_frame, send_frame
from commbench.core.run.rendezvous import GET, OK, VALUE, StoreClient, StoreServer

TOKEN = "t0ken"


def server(size: int, tolerant: bool = False) -> StoreServer:
    listener = socket.create_server(("127.0.0.1", 0), backlog=1024)
    return StoreServer(listener, TOKEN, size, tolerant)


def client(srv: StoreServer, rank: int, role: str = "rank") -> StoreClient:
    return StoreClient("127.0.0.1", srv.port, TOKEN, rank, srv.size, f"h{rank}", 10, role=role)


def raw_member(srv: StoreServer, rank: int) -> tuple[socket.socket, Seal]:
    """A proven connection whose requests this test sends and reads by hand (a GET that waits), and its seal."""
    s = socket.create_connection(("127.0.0.1", srv.port))
    seal = auth.authenticate(s, TOKEN, {"rank": rank, "size": srv.size, "host": f"h{rank}"}, time.monotonic() + 10)
    assert read_frame(s, seal=seal)[0] == OK
    s.settimeout(10)
    return s, seal


def test_one_thread_serves_two_hundred_connections_and_their_waiting_gets():
    before = threading.active_count()
    srv = server(100)
    assert threading.active_count() == before + 1  # the loop
    waiting = [raw_member(srv, r) for r in range(1, 100)]
    watchdogs = [client(srv, r, "watchdog") for r in range(100)]
    setter = client(srv, 0)
    for s, seal in waiting:
        send_frame(s, GET, {"key": "k", "timeout": 30}, seal=seal)
    time.sleep(0.2)
    assert threading.active_count() == before + 1  # 200 connections, 99 GETs waiting: still one thread
    setter.set("k", b"v" * 1000)
    for s, seal in waiting:
        kind, _, blob = read_frame(s, seal=seal)
        assert (kind, blob) == (VALUE, b"v" * 1000)
    assert watchdogs[5].beat(60)["failed"] is None
    for c in [setter, *watchdogs]:
        c.close()
    for s, _ in waiting:
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
        victim, _ = raw_member(srv, 2)
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


def test_an_excused_rank_is_not_stale_until_its_excuse_ends():
    """A rank about to hold its GIL (loading TensorFlow's libraries) excuses its heartbeats, one way on
    its main connection: silent past stale_after, it is not named; its excuse withdrawn, silence counts
    at once; its own beats in the meantime do not shorten the excuse; a rank with no watchdog beating
    is not brought in by an excuse."""
    srv = server(3)
    w0, w1, main1, main2 = client(srv, 0, "watchdog"), client(srv, 1, "watchdog"), client(srv, 1), client(srv, 2)
    try:
        w1.beat(0.3)
        main1.excuse(30)
        main2.excuse(0)  # rank 2 has no watchdog
        w1.beat(0.3)  # a beat that got through mid-import
        time.sleep(0.6)
        assert w0.beat(0.3)["stale"] == [] and not {1, 2} & set(srv.departed(0.3))
        main1.excuse(0)
        time.sleep(0.6)
        assert [r for r, _, _ in w0.beat(0.3)["stale"]] == [1] and 1 in srv.departed(0.3)
    finally:
        for c in (w0, w1, main1, main2):
            c.close()
        srv.close()


def test_a_stopped_watchdog_excuses_nothing():
    """A watchdog the run's end stopped (an abort stops it without ``stop()``) may still be the import
    hook: an import then says nothing to a store that is closing; a live one excuses and withdraws."""
    from commbench.core.run.watchdog import Watchdog

    sent: list[float] = []
    dog = Watchdog.__new__(Watchdog)  # only what ``excused`` reads: the stop flag and the main connection
    dog.stopped = threading.Event()
    dog.world = type("World", (), {"store": type("Store", (), {"excuse": staticmethod(sent.append)})()})()
    with dog.excused(120):
        assert sent == [120]
    dog.stopped.set()
    with dog.excused(120):
        pass
    assert sent == [120, 0]


def test_what_a_rank_says_while_tensorflow_imports_reaches_the_real_stderr(capfd, monkeypatch, tmp_path):
    """fd 2 is caught while TensorFlow imports (its start-up notices dropped); a watchdog that ends the
    process meanwhile still says why, on the real stderr, and the catch is undone afterwards."""
    import sys

    from commbench.core import errors, imports

    (tmp_path / "tensorflow.py").write_text(  # a TensorFlow whose import a watchdog interrupts
        "import os\nfrom commbench.core.errors import say\nos.write(2, b'oneDNN custom operations are on\\n')\n"
        "say('rank 1 on host h1 stopped responding')\nraise ImportError('gone')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "tensorflow", raising=False)
    with pytest.raises(errors.Unavailable):
        imports.import_tensorflow("no TensorFlow here")
    errors.say("after")
    err = capfd.readouterr().err
    assert err == "commbench: rank 1 on host h1 stopped responding\ncommbench: after\n" and errors.said_to is None


@settings(max_examples=40, deadline=None)
@given(st.binary(max_size=300))
def test_a_members_garbage_ends_that_member_only(junk):
    srv = server(3)
    good = client(srv, 0)
    bad, seal = raw_member(srv, 1)
    bad.sendall(junk + encode(GET, {"key": 5, "timeout": "x"}, seal=seal))  # then a GET of the wrong types
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


def _frames():
    """Bytes a stranger might send before proving anything: garbage, headers with hostile sizes and
    kinds, frames of every kind with JSON of every shape (a hello with a forged or missing proof)."""
    from commbench.core.run.framing import HEADER, MAGIC

    leaf = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
    json_part = st.recursive(leaf, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c,
                                                                                         max_size=4), max_leaves=10)
    hello = st.fixed_dictionaries({"rank": st.integers(-2, 4), "size": st.integers(0, 4)},
                                  optional={"nonce": st.text("0123456789abcdef", min_size=32, max_size=32),
                                            "proof": st.text("0123456789abcdef", max_size=64),
                                            "role": st.sampled_from(["rank", "watchdog", "x"])})
    framed = st.builds(lambda k, o: encode(k, o), st.integers(0, 255), st.one_of(hello, st.dictionaries(
        st.text(max_size=8), json_part, max_size=4)))
    header = st.builds(lambda m, k, j, b: HEADER.pack(m, k, j, b), st.sampled_from([MAGIC, b"CBv2", b"\0\0\0\0"]),
                       st.integers(0, 255), st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1))
    return st.lists(st.one_of(st.binary(max_size=64), framed, header), min_size=1, max_size=5)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(frames=_frames())
def test_no_bytes_before_the_token_get_a_stranger_in(frames):
    """Whatever a connection sends before it has proven the token (garbage, hostile headers, forged
    hellos, frames of any kind), the gate never answers it OK or PROVEN, and the store goes on serving
    the run's ranks. In process, the gate and rendezvous as rank 0 runs them; examples fixed per run."""
    import contextlib

    srv = server(2)
    good = client(srv, 0)
    s = socket.create_connection(("127.0.0.1", srv.port))
    s.settimeout(1)  # an unfinished hello is waited for (HELLO_TIMEOUT): the test need not
    got = bytearray()
    with contextlib.suppress(OSError):
        got += s.recv(4096)  # the challenge
        for f in frames:
            s.sendall(f)
        s.shutdown(socket.SHUT_WR)  # nothing more comes: the gate answers what came, then drops it
        while chunk := s.recv(4096):
            got += chunk
    s.close()
    kinds = []
    while len(got) >= 13 and got[:4] == b"CBv1":  # what the gate sent back, frame by frame
        jlen, blen = int.from_bytes(got[5:9], "little"), int.from_bytes(got[9:13], "little")
        kinds.append(got[4])
        del got[:13 + jlen + blen]
    assert kinds and kinds[0] == auth.CHALLENGE and OK not in kinds and auth.PROVEN not in kinds, kinds
    good.set("still", b"here")
    assert good.get("still") == b"here"
    good.close()
    srv.close()


def test_a_handshake_cut_short_by_the_timeout_says_so():
    """A listener that accepts and never answers (a rendezvous too slow for the --timeout given): the
    rank names the timeout, not another run or another token."""
    silent = socket.create_server(("127.0.0.1", 0))
    try:
        with pytest.raises(PeerError, match=r"did not finish within --timeout 0.2 s .*give a longer --timeout"):
            StoreClient("127.0.0.1", silent.getsockname()[1], TOKEN, 1, 2, "h1", 0.2)
    finally:
        silent.close()


def test_refusals_in_a_flood_cost_the_log_a_line_or_so_each_10_s(monkeypatch, capsys):
    """The first 10 refusals are said, then every 100th, or one after 10 s of silence."""
    from commbench.core.run import gate as gate_mod

    listener = socket.create_server(("127.0.0.1", 0))
    g = gate_mod.Gate(listener, "rank 0", TOKEN)
    clock = [1000.0]
    monkeypatch.setattr(gate_mod.time, "monotonic", lambda: clock[0])
    try:
        for _ in range(250):
            a, b = socket.socketpair()
            g.refuse(a, ("10.0.0.9", 4242), "no proof of the run token")
            b.close()
        said = capsys.readouterr().err.splitlines()
        assert len(said) == 12 and said[-1].endswith("200 refused so far)"), said
        clock[0] += gate_mod.SAY_EVERY
        a, b = socket.socketpair()
        g.refuse(a, ("10.0.0.9", 4242), "no proof of the run token")
        b.close()
        assert capsys.readouterr().err.count("251 refused so far") == 1
    finally:
        g.close()
