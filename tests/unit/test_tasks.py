"""Rank 0's tasks and a pair's own connection, in process: a task and its report cost the rendezvous
one request per rank; rank 0 reads and writes its store without any; a rank that dies or stops is
reported lost, not waited for; a pair's collectives go over its own connection, proven with the
token, and a dead or silent peer is named; the rounds left after a loss are planned again."""

from __future__ import annotations

import os
import socket
import threading
import time
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from commbench.benchmarks._cluster.schedule import replan, serial, tournament
from commbench.core.errors import PeerError, PeerTimeout
from commbench.core.run.collectives import Group
from commbench.core.run.framing import Seal
from commbench.core.run.link import Control, LinkStore
from commbench.core.run.rendezvous import StoreClient, StoreServer
from commbench.core.run.tasks import Dispatcher, Worker

TOKEN = "t0ken"


def world(rank: int, store, server=None, timeout: float = 10.0, size: int = 4) -> SimpleNamespace:
    w = SimpleNamespace(rank=rank, store=store, server=server, timeout=timeout, size=size, tolerant=True,
                        host=f"h{rank}", hosts=[f"h{r}" for r in range(size)], bind=None,
                        addresses=["127.0.0.1"] * size,
                        placement=SimpleNamespace(token=TOKEN))
    w.describe = lambda r: f"rank {r} on host h{r}"
    return w


@pytest.fixture
def rdv():
    listener = socket.create_server(("127.0.0.1", 0), backlog=64)
    srv = StoreServer(listener, TOKEN, 4, tolerant=True)
    clients: list[StoreClient] = []

    def join(rank: int, role: str = "rank") -> StoreClient:
        c = StoreClient("127.0.0.1", srv.port, TOKEN, rank, 4, f"h{rank}", 10, role=role)
        clients.append(c)
        return c
    yield srv, join
    for c in clients:
        c.close()
    srv.close()


def test_rank_0_hears_what_arrived_not_what_it_still_awaits(rdv):
    """The store tells rank 0 which watched keys were set since it last asked (so a round of N results
    costs it N, however they trickle in); keys set before the watch count, others stay in the store."""
    srv, join = rdv
    c = join(1)
    c.set("early", b"0")
    srv.watch(["a", "b", "early"])
    c.set("a", b"1")
    c.set("other", b"3")
    c.status(30.0)  # a request answered: the sets before it are in the store (a set is not answered)
    assert sorted(srv.arrivals(5)) == [("a", b"1"), ("early", b"0")]
    t0 = time.monotonic()
    assert srv.arrivals(0.2) == [] and time.monotonic() - t0 >= 0.15  # nothing new: it waited
    srv.put("b", b"2")  # rank 0's own set, made by the loop
    deadline = time.monotonic() + 5
    got: list = []
    while not got and time.monotonic() < deadline:
        got = srv.arrivals(1)
    assert got == [("b", b"2")]
    srv.unwatch(["never"])
    assert srv.take("other") == b"3" and srv.take("a") is None  # taken on arrival; the unwatched one kept


def test_the_store_counts_the_requests_of_a_named_collective(rdv):
    """What a start-up all-gather through the store costs it, apart from everything else it answers."""
    srv, join = rdv
    srv.count("world")
    c = join(1)
    c.set("1:world/1", b"a")
    assert c.get("1:world/1") == b"a"
    c.set("2:worlds/1", b"b")  # another collective, and keys that are no collective's
    c.set("task/1/1", b"c")
    c.status(30.0)
    assert srv.counted == {"world": 2} and srv.requests >= 5
    assert srv.uncount("world") == 2 and srv.counted == {}
    c.set("3:world/1", b"d")
    assert c.get("3:world/1") == b"d" and srv.counted == {}  # answered, no longer counted


def test_a_task_and_its_report_are_one_request_each_and_rank_0_makes_none(rdv):
    srv, join = rdv
    boss = Dispatcher(world(0, None, srv))
    workers = {r: Worker(world(r, join(r))) for r in (1, 2, 3)}
    done: dict[int, list] = {r: [] for r in workers}

    def run(r: int) -> None:
        result = {"hello": r}
        while (task := workers[r].next(result))["kind"] != "end":
            done[r].append(task["n"])
            result = {"twice": 2 * task["n"]}
    threads = [threading.Thread(target=run, args=(r,)) for r in workers]
    for t in threads:
        t.start()
    assert boss.collect([1, 2, 3]) == {r: {"hello": r} for r in (1, 2, 3)}
    before = srv.requests
    for n in range(5):
        boss.assign({r: {"kind": "x", "n": n + r} for r in (1, 2, 3)})
        assert boss.collect([1, 2, 3]) == {r: {"twice": 2 * (n + r)} for r in (1, 2, 3)}
    assert srv.requests - before == 15  # 5 steps x 3 ranks, one request each; rank 0's own: none
    boss.end([1, 2, 3])
    for t in threads:
        t.join(10)
    assert done == {r: [r, r + 1, r + 2, r + 3, r + 4] for r in (1, 2, 3)}
    assert not [k for k in srv.data if k.startswith(("task/", "result/"))]  # each read once, then forgotten


def test_a_rank_that_dies_before_it_reports_is_lost_at_once_not_waited_for(rdv):
    srv, join = rdv
    boss = Dispatcher(world(0, None, srv))
    alive, doomed = Worker(world(1, join(1))), Worker(world(2, join(2)))
    t = threading.Thread(target=lambda: (alive.next({}), alive.next({"ok": 1})))  # the second: END
    t.start()
    d = threading.Thread(target=doomed.next, args=({},))
    d.start()
    assert set(boss.collect([1, 2])) == {1, 2}
    boss.assign({1: {"kind": "x"}, 2: {"kind": "x"}})
    d.join(10)
    doomed.world.store.sock.close()  # dies without a goodbye, its task not reported
    t0 = time.monotonic()
    got = boss.collect([1, 2])
    assert time.monotonic() - t0 < 3
    assert got[1] == {"ok": 1}
    assert got[2]["lost"] and "rank 2 on host h2" in got[2]["error"], got
    assert boss.collect([2])[2]["lost"]  # lost for good: never waited for again
    boss.end([1])
    t.join(10)
    assert not t.is_alive()


def test_a_rank_whose_heartbeat_stops_is_lost_once_stale(rdv):
    srv, join = rdv
    boss = Dispatcher(world(0, None, srv, timeout=1.0))
    join(3)
    join(3, "watchdog").beat(5)  # one heartbeat, then silence (a host whose network went down)
    t0 = time.monotonic()
    got = boss.collect([3])
    assert 2.5 < time.monotonic() - t0 < 8  # timeout + grace after its last beat, not sooner
    assert got[3]["lost"] and "stopped responding" in got[3]["error"]


def test_a_rank_alive_but_stuck_in_its_task_is_dropped_at_the_limit(rdv):
    srv, join = rdv
    boss = Dispatcher(world(0, None, srv))
    beat = join(2, "watchdog")
    stuck = Worker(world(2, join(2)))
    t = threading.Thread(target=stuck.next, args=({},))
    t.start()
    boss.collect([2])
    boss.assign({2: {"kind": "x"}})  # taken, never reported (an MPI call to a dead peer); heartbeats go on
    t.join(10)
    t0 = time.monotonic()
    beat.beat(30)
    got = boss.collect([2], limit=1.0)
    assert 0.9 < time.monotonic() - t0 < 3
    assert got[2]["lost"] and "did not finish its task within 1 s" in got[2]["error"]
    assert 2 in srv.departed(60)  # the run's last barrier does not wait for it


def pair(timeout: float = 5.0):
    a, b = socket.socketpair()
    wa, wb = (world(r, SimpleNamespace(local_address="127.0.0.1"), timeout=timeout) for r in (0, 1))
    key = os.urandom(32)
    return LinkStore(a, Seal(key, True), wa, 1, timeout), LinkStore(b, Seal(key, False), wb, 0, timeout)


def test_a_pairs_collectives_go_over_its_own_connection():
    la, lb = pair()
    ga = Group(la.world, [0, 1], "p", la)
    gb = Group(lb.world, [0, 1], "p", lb)
    out: dict = {}
    t = threading.Thread(target=lambda: out.update(b=(gb.allgather_json("x", "from b"), gb.bcast_json("y"),
                                                      gb.barrier("z"))))
    t.start()
    out["a"] = (ga.allgather_json("x", "from a"), ga.bcast_json("y", {"n": 1}), ga.barrier("z"))
    t.join(10)
    assert out["a"] == out["b"] == (["from a", "from b"], {"n": 1}, None)


def test_a_dead_peer_is_named_at_once_and_a_silent_one_once_stale():
    la, lb = pair(timeout=0.3)
    g = Group(la.world, [0, 1], "p", la)
    lb.close()
    t0 = time.monotonic()
    with pytest.raises(PeerError, match="rank 1 on host h1 left the pair"):
        g.barrier("b", patient=True)
    assert time.monotonic() - t0 < 2
    la, lb = pair(timeout=0.3)
    g = Group(la.world, [0, 1], "p", la)
    with pytest.raises(PeerError, match="rank 1 on host h1 stopped responding"):
        g.barrier("b", patient=True)  # a patient wait too: a silent peer is not waited for forever
    with pytest.raises(PeerTimeout):
        lb.get("never", 0)


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=64))
def test_garbage_on_a_pairs_connection_breaks_that_pair_only(junk):
    a, b = socket.socketpair()
    la = LinkStore(a, Seal(b"k" * 32, True), world(0, SimpleNamespace(local_address="127.0.0.1")), 1, 0.2)
    b.sendall(junk + b"\0" * 16)  # never a whole valid frame of a key
    b.close()
    with pytest.raises((PeerError, PeerTimeout)):
        la.get("k", 0.2)
    la.close()


def test_the_pairs_connection_needs_the_token_and_the_pair_expected(rdv):
    srv, join = rdv
    first, second = world(1, join(1)), world(2, join(2))
    listener = Control(second)
    try:
        got: dict = {}
        t = threading.Thread(target=lambda: got.update(sock=listener.accept(1, "pairwise.1.1.2", 5)))
        t.start()
        stranger = world(3, join(3))
        stranger.placement = SimpleNamespace(token="wrong")
        with pytest.raises(PeerError):
            Control(stranger).dial(listener.address, 2, "pairwise.1.1.2", 1)
        with pytest.raises(PeerError):  # the right token, the wrong pair: refused too
            Control(world(3, join(3))).dial(listener.address, 2, "pairwise.9.1.2", 1)
        sock, seal = Control(first).dial(listener.address, 2, "pairwise.1.1.2", 5)
        t.join(10)
        a, b = LinkStore(sock, seal, first, 2, 5), LinkStore(*got["sock"], second, 1, 5)
        a.set("k", b"v")
        assert b.get("k") == b"v"
        a.close()
        b.close()
    finally:
        listener.close()
    with pytest.raises(PeerError, match="rank 1 on host h1 did not connect within"):
        late = Control(second)
        try:
            late.accept(1, "x", 0.3)
        finally:
            late.close()


@settings(max_examples=200, deadline=None)
@given(st.integers(2, 40), st.data(), st.booleans())
def test_the_rounds_left_after_a_loss_cover_each_pair_once_in_disjoint_rounds(n, data, one_at_a_time):
    rounds = serial(n) if one_at_a_time else tournament(n)
    done = data.draw(st.integers(0, len(rounds) - 1))
    lost = set(data.draw(st.lists(st.integers(0, n - 1), max_size=3)))
    live = set(range(n)) - lost
    left = rounds[done:]
    new, skipped = replan(left, live, one_at_a_time)
    pairs = [p for rnd in new for p in rnd]
    assert sorted(pairs + skipped) == sorted(p for rnd in left for p in rnd)  # each pair once, measured or not
    assert all(a in live and b in live for a, b in pairs) and all(a in lost or b in lost for a, b in skipped)
    for rnd in new:
        ends = [e for p in rnd for e in p]
        assert len(ends) == len(set(ends)) and rnd  # disjoint pairs, no empty round
    assert len(new) <= len([r for r in left if any(a in live and b in live for a, b in r)])
    if one_at_a_time:
        assert all(len(rnd) == 1 for rnd in new)

