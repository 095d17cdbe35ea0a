"""The verbs transport up to the device, here (no RDMA hardware, no InfiniBand in this kernel):
pyverbs' own no-device error as users see it, queue-pair info exchange and validation, pool sizing,
buffer-list to SGE mapping, connection states, and the credit protocol run over an in-memory
fabric (verbs_fake) with the transport's real code. Hardware tests: test_verbs_hw.py (-m rdma)."""

from __future__ import annotations

import sys
import threading
import time
from functools import partial

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from commbench.core.config.run import CommonOptions, RunConfig
from commbench.core.errors import PeerError, UsageError
from commbench.core.measure.message import Message, Pattern
from commbench.core.measure.payload import Payload
from commbench.emulators.ps import run_threads
from commbench.transports import _verbs_plan as vp
from commbench.transports import _verbs_protocol as vq
from commbench.transports import verbs

try:  # the in-memory fabric borrows pyverbs' enums and error classes
    import verbs_fake

    PYVERBS = None
except ImportError as exc:
    verbs_fake = None
    PYVERBS = f"pyverbs is not importable ({exc}): install python3-pyverbs (rdma-core) and re-run launchers/setup.sh"


def _device_here() -> bool:
    if PYVERBS:
        return False
    from pyverbs.device import get_device_list
    from pyverbs.pyverbs_error import PyverbsError

    try:
        return bool(get_device_list())
    except PyverbsError:
        return False


# what users see where pyverbs is installed and no RDMA device exists (this machine, CI)
no_device = pytest.mark.skipif(PYVERBS is not None or _device_here(),
                               reason=PYVERBS or "an RDMA device exists here: the hardware tests run instead")

GOOD = {"rank": 1, "lid": 7, "gid": "fe80:0000:0000:0000:0202:c9ff:fe00:0001", "qpn": 0x123, "psn": 0xABCDE,
        "rkey": 0xDEADBEEF, "addr": 0x7F0000001000, "slot": 1 << 20, "depth": 64, "mtu": 5, "link_layer": 1,
        "op": "send", "mailbox": 0x7F0000002000}


# -- what a user sees here -------------------------------------------------------------------------


@no_device
def test_check_usable_with_real_pyverbs_raises_usage_error():
    with pytest.raises(UsageError, match=r"no RDMA device found \(pyverbs: Failed to get devices list\)"):
        verbs.VerbsTransport.check_usable(verbs.VerbsOptions())


# -- queue-pair info ------------------------------------------------------------------------------
def test_qp_info_round_trip():
    info = vp.QpInfo.parse(dict(GOOD), 1)
    assert info.to_json() == GOOD


@pytest.mark.parametrize("field,value,needle", [
    ("qpn", 1 << 24, "qpn"), ("psn", -1, "psn"), ("rkey", 1 << 32, "rkey"), ("lid", "7", "lid"),
    ("gid", "fe80::1", "gid"), ("gid", None, "gid"), ("addr", 0, "zero"), ("depth", 0, "zero"),
    ("op", "read", "op"), ("slot", True, "slot"), ("rank", 0, "says it is rank 0"), ("mtu", 9, "mtu"),
])
def test_qp_info_rejects_bad_fields(field, value, needle):
    with pytest.raises(PeerError, match=needle):
        vp.QpInfo.parse({**GOOD, field: value}, 1)


def test_qp_info_rejects_missing_extra_and_non_dicts():
    with pytest.raises(PeerError, match="missing fields"):
        vp.QpInfo.parse({k: v for k, v in GOOD.items() if k != "psn"}, 1)
    with pytest.raises(PeerError, match="unknown fields"):
        vp.QpInfo.parse({**GOOD, "evil": 1}, 1)
    with pytest.raises(PeerError, match="no queue-pair info"):
        vp.QpInfo.parse(None, 1)


def test_qp_info_compatibility_checks():
    peer = vp.QpInfo.parse(dict(GOOD), 1)
    local = vp.QpInfo(**{**GOOD, "rank": 0})
    peer.check_against(local, 1 << 20)
    with pytest.raises(PeerError, match="hold 1048576 B but messages of 2097152 B"):
        peer.check_against(local, 2 << 20)
    with pytest.raises(UsageError, match="--verbs-op write"):
        vp.QpInfo(**{**GOOD, "op": "write"}).check_against(local, 8)
    with pytest.raises(UsageError, match="one fabric"):
        vp.QpInfo(**{**GOOD, "link_layer": 2}).check_against(local, 8)
    with pytest.raises(PeerError, match="no LID"):
        vp.QpInfo(**{**GOOD, "lid": 0}).check_against(local, 8)
    roce_local = vp.QpInfo(**{**GOOD, "rank": 0, "link_layer": 2})
    with pytest.raises(PeerError, match="empty GID"):
        vp.QpInfo(**{**GOOD, "link_layer": 2, "gid": vp.ZERO_GID}).check_against(roce_local, 8)
    assert vp.path_mtu(5, 3) == 3


# -- pool sizing, SGE mapping, credits, states, port checks ------------------------------------------
def test_pool_is_sized_from_the_largest_message():
    p = vp.plan_pool(8, "send", 64 << 20)
    assert (p.slot, p.depth, p.recvs, p.region) == (64, 64, 66, 66 * 64 + vq.MAILBOX)
    p = vp.plan_pool(4 << 20, "send", 64 << 20)
    assert (p.slot, p.depth) == (4 << 20, 16) and p.region == 18 * (4 << 20) + vq.MAILBOX
    p = vp.plan_pool(4 << 20, "write", 64 << 20)
    assert p.region == 16 * (4 << 20) + 18 * 64 + vq.MAILBOX  # data slots + an area for credit messages + mailbox
    assert p.mailbox == p.region - vq.MAILBOX
    assert vp.plan_pool(1000, "send", 64 << 20).slot == 1024  # 64-byte aligned
    assert vp.plan_pool(64 << 20, "send", 64 << 20).depth == 2  # never fewer than 2
    assert vp.plan_pool(8, "send", 64 << 20, max_qp_wr=10).depth == 8
    with pytest.raises(UsageError, match="largest memory region"):
        vp.plan_pool(1 << 29, "send", 1 << 30, max_mr_size=1 << 30)
    with pytest.raises(UsageError, match="1 GiB"):
        vp.plan_pool(1 << 30, "send", 1 << 31)


def test_sge_plan():
    assert vp.sge_plan((8,), 30, 64) == "inline"
    assert vp.sge_plan((32, 32, 32), 30, 64) == "sge"  # 96 B > inline limit
    assert vp.sge_plan((4096,) * 30, 30, 64) == "sge"
    assert vp.sge_plan((4096,) * 31, 30, 64) == "pack"
    assert vp.sge_plan((4096, 0, 0, 4096), 2, 0) == "sge"  # empty buffers take no entry
    assert vp.sge_plan((0, 0), 30, 64) == "pack"
    assert vp.sge_plan((8, 8, 8), 2, 64) == "pack"


def test_credits():
    c = vq.Credits(peer_depth=4, own_depth=4)
    assert [c.spend() for _ in range(4)] == [0, 1, 2, 3]
    with pytest.raises(PeerError, match="no credit"):
        c.spend()
    c.granted(2)
    assert [c.spend(), c.spend()] == [0, 1]
    with pytest.raises(PeerError, match="more credits"):
        c.granted(5)
    r = vq.Credits(4, 4)
    assert [r.consumed() for _ in range(5)] == [0, 2, 0, 2, 0]
    assert vq.parse_imm(vq.imm_credit(3)) == (True, 3, False)
    assert vq.parse_imm(vq.imm_data(1 << 20)) == (False, 1 << 20, False)
    assert vq.parse_imm(vq.imm_data(vq.MAX_IMM_LEN, direct=True)) == (False, vq.MAX_IMM_LEN, True)


def test_adverts_are_read_whole_and_only_for_their_message():
    box = bytearray(vq.MAILBOX)
    assert vq.read_advert(box, 0) is None  # an empty mailbox holds no advert, not one for message 0
    vq.pack_advert(box, 7, 0x7F00_0000_1000, 0xBEEF, 0x1234, 65536)
    assert vq.read_advert(box, 7) == (0x7F00_0000_1000, 0xBEEF, 0x1234, 65536)
    assert vq.read_advert(box, 8) is None  # an older message's advert: the sender uses a slot
    torn = bytearray(box)
    torn[vq.ADVERT.size - 8:vq.ADVERT.size] = (6).to_bytes(8, "little")  # the trailing number not yet written
    assert vq.read_advert(torn, 7) is None
    a, b = vq.layout_of([100, 200], (64, 64)), vq.layout_of([4100, 4200], (64, 64))
    assert a == b != vq.layout_of([100, 164], (64, 64)) != vq.layout_of([100, 200], (64, 65))


def test_connection_states():
    s = vp.ConnState("rank 1")
    with pytest.raises(PeerError, match="is created, not ready"):
        s.require_ready()
    with pytest.raises(PeerError, match="cannot go from created to rts"):
        s.advance(vp.Conn.RTS)
    for to in (vp.Conn.EXCHANGED, vp.Conn.RTS, vp.Conn.READY):
        s.advance(to)
    s.require_ready()
    err = s.fail("work completion failed")
    assert s.state is vp.Conn.ERROR and "work completion failed" in str(err)
    with pytest.raises(PeerError, match="is error .work completion failed., not ready"):
        s.require_ready()


def test_port_problems():
    ok_gid = GOOD["gid"]
    assert vp.port_problem("mlx5_0", 1, 4, 1, 7, ok_gid) is None
    assert "DOWN, not ACTIVE" in vp.port_problem("mlx5_0", 1, 1, 1, 7, ok_gid)
    assert "subnet manager" in vp.port_problem("mlx5_0", 1, 4, 1, 0, ok_gid)
    assert "GID at --gid-index is empty" in vp.port_problem("rxe0", 1, 4, 2, 0, vp.ZERO_GID)
    assert vp.port_problem("rxe0", 1, 4, 2, 0, ok_gid) is None


# -- the transport's code over the in-memory fabric ----------------------------------------------------
@pytest.fixture
def fake(monkeypatch):
    if verbs_fake is None:
        pytest.skip(PYVERBS)
    monkeypatch.setattr(verbs, "load_api", lambda: verbs_fake.api())
    verbs_fake.FakeContext.max_sge = 4
    verbs_fake.FakeContext.port_state = 4
    verbs_fake.Stats.sge_counts = []
    verbs_fake.Stats.inline_sends = 0
    verbs_fake.Stats.posted_sends = verbs_fake.Stats.signaled_sends = 0
    switch = sys.getswitchinterval()
    sys.setswitchinterval(0.0002)  # two busy-polling ranks in one process: the GIL changes hands often
    yield verbs_fake
    sys.setswitchinterval(switch)


def config(poll: str = "busy", largest: int = 1 << 20, timeout: float = 5.0, **kw) -> RunConfig:
    """A run's configuration as the CLI makes it: these verbs options (a 1 MB pool unless given),
    messages up to ``largest`` bytes."""
    return RunConfig(CommonOptions(timeout=timeout), 2, poll, (Payload(str(largest), (largest,)),),
                     net=verbs.VerbsOptions(**{"verbs_pool_mb": 1, **kw}))


def ranks(*fns, **kw):
    """Run fn(rank's transport, its links to every other rank) on a thread per rank; re-raise what
    any raised."""
    size, out, errors = len(fns), [None] * len(fns), []
    w = verbs_fake.worlds(size)

    def run(rank, fn):
        t = verbs.VerbsTransport(w[rank], config(**kw))
        try:
            out[rank] = fn(t, t.connect(r for r in range(size) if r != rank))
        except BaseException as exc:
            errors.append(exc)
        finally:
            t.close()
    threads = [threading.Thread(target=run, args=(r, f)) for r, f in enumerate(fns)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(30)
    assert not any(th.is_alive() for th in threads), "a rank hung"
    if errors:
        for exc in errors[1:]:
            print("other rank:", repr(exc))
        raise errors[0]
    return out


def pair(fn0, fn1, **kw):
    """Run fn(rank's transport, link to the other) for two ranks (see ranks)."""
    return ranks(lambda t, links: fn0(t, links[1]), lambda t, links: fn1(t, links[0]), **kw)


def calling(link, req: Message, rep: Message, way: str):
    """One call(req, rep), made as ``way`` says: call() itself, or the closure timed loops run (caller)."""
    return link.caller(req, rep) if way == "caller" else partial(link.call, req, rep)


@pytest.mark.parametrize("way", ["call", "caller"])
@pytest.mark.parametrize("op", ["send", "write"])
@pytest.mark.parametrize("sizes", [(8,), (1 << 20,), (1000, 24, 3000), (512,) * 7])
def test_ping_pong_moves_the_bytes(fake, op, sizes, way):
    """Each way of calling, with the 1 MiB pool of one slot: every call waits for the credit its
    last took, which comes back in a message of its own."""
    pat = Pattern(sizes, 1)
    n = 50

    def client(t, link):
        req, rep = Message(sizes), Message(sizes)
        req.fill(pat)
        wrong, do = 0, calling(link, req, rep, way)
        for _ in range(n):
            do()
            wrong += not rep.matches(pat)
            rep.clear()
        return wrong

    def server(t, link):
        req, general, real = Message(sizes), [], link.recv_into
        link.recv_into = lambda m: (general.append(1), real(m))
        link.serve(n, req, req)  # echo what arrived
        return t.mode(), len(general)

    wrong, (mode, general) = pair(client, server, verbs_op=op)
    assert wrong == 0 and mode.startswith(f"{op}, fake_0:1")
    assert general == (sizes == (1 << 20,)), general  # serve's own receive but the first advertised one
    if sizes == (8,):
        assert fake.Stats.inline_sends > 0  # 8 B goes inline
        # inline sends go unsignaled but every few (selective signaling), and the send queue (the fake
        # refuses a post past its depth) never fills with sends no completion freed: 100 each way here
        assert 0 < fake.Stats.signaled_sends <= fake.Stats.posted_sends / 2, vars(fake.Stats)
    if len(sizes) == 7:  # more buffers than max_sge (4): packed into one entry
        assert set(fake.Stats.sge_counts) == {1}
    elif len(sizes) == 3:
        assert 3 in fake.Stats.sge_counts  # one entry per buffer


@pytest.mark.parametrize("way", ["call", "caller"])
@pytest.mark.parametrize("op", ["send", "write"])
@pytest.mark.parametrize("direct", ["on", "off"])
def test_large_messages_go_straight_into_the_waiting_receivers_buffers(fake, op, direct, way):
    sizes, n = (40 << 10, 24 << 10), 40  # 64 KiB over two buffers: one span, padding included
    pat = Pattern(sizes, 3)

    def client(t, link):
        req, rep, wrong = Message(sizes), Message(sizes), 0
        req.fill(pat)
        do = calling(link, req, rep, way)
        for _ in range(n):
            do()
            wrong += not rep.matches(pat)
            rep.clear()
        return wrong, link.proto.direct_out, link.proto.direct_in

    def server(t, link):
        req = Message(sizes)
        time.sleep(0.2)  # the first request leaves before any advert: by a slot, with its reply's advert
        link.serve(n, req, req)
        return link.proto.direct_in, link.proto.direct_out

    (wrong, c_out, c_in), (s_in, s_out) = pair(client, server, verbs_op=op, largest=64 << 10, verbs_direct=direct)
    assert wrong == 0
    assert (c_out, s_in) == ((c_out, c_out)) and (s_out, c_in) == (s_out, s_out)  # each direct send is a direct receive
    if direct == "off":
        assert c_out == c_in == 0
    else:  # each message carries the advert for its answer, even one sent by a slot: all go direct but the
        assert c_in == n and c_out >= n - 1, (c_out, c_in)  # first request (unless the server was first)


@pytest.mark.parametrize("way", ["call", "caller"])
@pytest.mark.parametrize("op", ["send", "write"])
def test_a_call_posts_its_advert_and_request_at_once_and_the_server_advertises_before_reaping(fake, op, way):
    """A call is one ibv_post_send: the advert for its reply's buffers, then the request, unsignaled (its
    reply says it arrived) but every quiet_every-th. The server posts the advert for its next request
    before it waits for its reply's completion (that wait made the advert late for a caller answering
    at once), and still reaps before it returns."""
    sizes, n = (64 << 10,), 30
    pat = Pattern(sizes, 5)

    def log_posts(link, log):
        real_post, real_take = link.qp.post_send, link.take_s

        def post(wr):
            chain, w = [], wr
            while w is not None:
                kind = {0: "data", 1 << 40: "credit"}.get(w.wr_id, "advert")
                chain.append((kind, bool(w.send_flags & fake.e.IBV_SEND_SIGNALED)))
                w = w.next_wr
            log.append(chain)
            real_post(wr)

        def take():
            got = real_take()
            if got is not None:
                log.append("reaped")
            return got
        link.qp.post_send, link.take_s = post, take

    def client(t, link):
        log, req, rep, wrong = [], Message(sizes), Message(sizes), 0
        req.fill(pat)
        log_posts(link, log)
        general = link.call
        link.call = lambda *a: (log.append("general"), general(*a))  # the caller falls back to call()
        do = calling(link, req, rep, way)
        for _ in range(n):
            do()
            wrong += not rep.matches(pat)
        return wrong, log, link.quiet_every, link.proto.direct_in

    def server(t, link):
        log, req = [], Message(sizes)
        log_posts(link, log)
        for _ in range(n):
            link.recv_into(req)
            log.append("received")
            link.send(req)
        return log

    (wrong, clog, quiet_every, direct_in), slog = pair(client, server, verbs_op=op, largest=64 << 10)
    assert wrong == 0 and direct_in == n
    general = clog.count("general")  # the caller's own path but on selective signaling's turns
    assert general == n if way == "call" else 0 < general <= n // 3, (general, quiet_every)
    clog = [e for e in clog if e != "general"]
    calls = [p for p in clog if p != "reaped" and p[0][0] != "credit"]
    assert len(calls) == n and all([k for k, _ in p] == ["advert", "data"] for p in calls), clog
    signaled = sum(sig for p in calls for _, sig in p)
    assert signaled == 2 * n // quiet_every, (signaled, quiet_every)  # only every quiet_every-th send
    # server: after each reply, the next request's advert is posted before the reply is reaped
    replies = [i for i, e in enumerate(slog[:-1]) if e not in ("received", "reaped") and e[0] == ("data", True)]
    assert len(replies) == n - 1  # the last reply is reaped by nobody: the run ends
    for i in replies:
        assert slog[i + 1][0][0] == "advert" and slog[i + 2] == "reaped", slog[i:i + 3]


@pytest.mark.parametrize("op", ["send", "write"])
def test_serve_posts_each_reply_behind_the_next_requests_advert(fake, op):
    """serve() posts each reply but the last behind the advert for the next request, in one
    ibv_post_send, so that a caller answering at once finds it: every request is placed directly."""
    sizes, n = (64 << 10,), 20
    pat = Pattern(sizes, 7)

    def client(t, link):
        req, rep = Message(sizes), Message(sizes)
        req.fill(pat)
        time.sleep(0.2)  # the server's first advert (posted alone as it starts waiting) is there first
        for _ in range(n):
            link.call(req, rep)
        return rep.matches(pat)

    def server(t, link):
        chains, real = [], link.qp.post_send

        def post(wr):
            kinds, w = [], wr
            while w is not None:
                kinds.append(({0: "data", 1 << 40: "credit"}.get(w.wr_id, "advert"),
                              bool(w.send_flags & fake.e.IBV_SEND_SIGNALED)))
                w = w.next_wr
            chains.append(kinds)
            real(wr)
        link.qp.post_send = post
        req = Message(sizes)
        link.serve(n, req, req)  # echo
        return chains, link.proto.direct_in

    echoed, (chains, direct_in) = pair(client, server, verbs_op=op, largest=64 << 10)
    assert echoed and direct_in == n
    assert [[k for k, _ in c] for c in chains if ("data", False) in c or ("data", True) in c] == \
        [["advert", "data"]] * (n - 1) + [["data"]]
    # replies unsignaled (the next request says each arrived) but the last and selective signaling's turns
    signaled = [sig for c in chains for k, sig in c if k == "data"]
    assert signaled[-1] and sum(signaled) <= n // 3, signaled
    alone = [[k for k, _ in c] for c in chains if len(c) == 1 and c[0][0] != "data"]
    assert [c for c in alone if c != ["credit"]] == [["advert"]]  # the first, alone


@pytest.mark.parametrize("way", ["progress", "complete"])
@pytest.mark.parametrize("op", ["send", "write"])
def test_a_window_of_sends_is_signaled_at_its_end(fake, op, way):
    """Sends posted together (a window through progress, as complete does with a window on one link:
    osu_bw's) go unsignaled but the last and every quiet_every-th, as perftest's --cq-mod: its
    completion says every send before it is done, and the buffers are the caller's again when it
    returns. The window's receives post no adverts (a streaming sender outruns them)."""
    sizes, window, rounds = (64 << 10,), 64, 3

    def complete(t, link, sends, recvs):
        if way == "progress":
            t.progress([(link, m) for m in sends], [(link, m) for m in recvs])
        else:
            t.complete([link.post_send(m) for m in sends] + [link.post_recv(m) for m in recvs])

    def sender(t, link):
        pat, ack = Pattern(sizes, 4), Message((4,))
        out = [Message(sizes) for _ in range(window)]
        general, real = [], link._post
        link._post = lambda *a, **k: (general.append(1), real(*a, **k))  # the rest go by _poster
        for r in range(rounds):
            for m in out:
                m.fill(pat, r)  # the buffers are free again: refilled while nothing is in flight
            complete(t, link, out, [])
            link.recv_into(ack)
        return link.quiet_every, len(general)

    def receiver(t, link):
        pat, ack, wrong = Pattern(sizes, 4), Message((4,)), 0
        inbox = [Message(sizes) for _ in range(window)]
        adverts, real = [], link._advertise

        def advertise(msg, post=True):
            before, got = link.proto.advertised_for(id(msg)), real(msg, post)
            if not before and link.proto.advertised_for(id(msg)):  # this call advertised msg's buffers
                adverts.append(msg)
            return got
        link._advertise = advertise
        for r in range(rounds):
            complete(t, link, [], inbox)
            wrong += sum(not m.matches(pat, r) for m in inbox)
            link.send(ack)
        return wrong, len(adverts)

    (quiet_every, general), (wrong, adverts) = pair(sender, receiver, verbs_op=op, largest=64 << 10,
                                                    verbs_pool_mb=8)
    assert wrong == 0 and adverts == 0, adverts
    assert rounds <= general <= rounds * (window // (quiet_every - 1) + 1), (general, quiet_every)
    # per window its last and every quiet_every-th (every send was signaled before: 192 here); the
    # inline acks and credit returns add one per quiet_every of them
    bound = rounds * (window // quiet_every + 1) + fake.Stats.inline_sends // quiet_every + 1
    assert fake.Stats.signaled_sends <= bound, vars(fake.Stats)


def test_registration_happens_once_per_buffer(fake):
    sizes = (4096, 4096)

    def client(t, link):
        req, rep = Message(sizes), Message(sizes)
        link.call(req, rep)
        first = len(t.registry.mrs)
        for _ in range(99):
            link.call(req, rep)
        return first, len(t.registry.mrs)

    def server(t, link):
        req = Message(sizes)
        link.serve(100, req, req)

    registered, _ = pair(client, server, largest=8192)
    assert registered == (1, 1)  # both request buffers carved from one mapping: one registration, at the first call


def test_message_views_of_one_tensor_share_one_registration(fake):
    tensor = np.arange(1 << 16, dtype=np.float32)
    chunks = Message.over(np.array_split(tensor, 4))  # within max_sge (4): one entry per chunk

    def sender(t, link):
        link.send(chunks)
        link.recv_into(Message((1,)))
        return len(t.registry.mrs)

    def receiver(t, link):
        into = Message(chunks.sizes)
        link.recv_into(into)
        link.send(Message((1,)))
        return np.array_equal(np.frombuffer(b"".join(bytes(v) for v in into.views), np.float32), tensor)

    registered, same = pair(sender, receiver, largest=tensor.nbytes)
    assert registered == 1 and same


@pytest.mark.parametrize("op", ["send", "write"])
def test_one_message_sent_on_two_links_from_two_threads(fake, op):
    """A rank serving two peers from a thread each (the PS emulator's shards) sends the same Message
    on both links: its buffers are registered once, not twice with one registration dropped under a
    send, and each link posts work requests of its own (flags, the peer's address and rkey)."""
    sizes, n = (40 << 10, 8 << 10), 150  # one span of 48 KiB: direct placement where adverts allow
    pat = Pattern(sizes, 5)
    shared = Message(sizes)
    shared.fill(pat)

    def serve_both(t, links):  # as the PS emulator's shards serve their workers
        run_threads([lambda r=r: links[r].serve(n, Message((8,)), shared) for r in (1, 2)])
        return len(t.registry.mrs)

    def client(t, links):
        link = links[0]
        req, rep, wrong = Message((8,)), Message(sizes), 0
        for _ in range(n):
            link.call(req, rep)
            wrong += not rep.matches(pat)
            rep.clear()
        return wrong, link.proto.direct_in

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch between any two steps of a send, as they may
    try:
        registered, (wrong1, direct1), (wrong2, direct2) = ranks(serve_both, client, client, verbs_op=op,
                                                                 largest=sum(sizes))
    finally:
        sys.setswitchinterval(old)
    assert (wrong1, wrong2) == (0, 0)
    assert registered == 1
    assert direct1 > 0 and direct2 > 0  # the shared work request for direct writes was exercised


@pytest.mark.parametrize("op", ["send", "write"])
def test_window_beyond_the_pool_depth_flows_on_credits(fake, op):
    sizes, window, rounds = (256 << 10,), 40, 3  # 1 MB pool / 256 KiB slots = depth 4, window 40
    pat = Pattern(sizes, 2)

    def sender(t, link):
        msg, ack = Message(sizes), Message((4,))
        msg.fill(pat)
        for _ in range(rounds):
            for _ in range(window):
                link.send(msg)
            link.recv_into(ack)
        return t.plan.depth

    def receiver(t, link):
        msg, ack, wrong = Message(sizes), Message((4,)), 0
        for _ in range(rounds):
            for _ in range(window):
                link.recv_into(msg)
                wrong += not msg.matches(pat)
                msg.clear()
            link.send(ack)
        return wrong

    depth, wrong = pair(sender, receiver, verbs_op=op, largest=256 << 10)
    assert depth == 4 and wrong == 0


def test_bidirectional_progress_beyond_the_depth_does_not_deadlock(fake):
    sizes, window = (256 << 10,), 32

    def both(t, link):
        pat = Pattern(sizes, 3)
        out = Message(sizes)
        out.fill(pat)
        inbox = [Message(sizes) for _ in range(window)]
        t.progress([(link, out)] * window, [(link, m) for m in inbox])
        return sum(not m.matches(pat) for m in inbox)

    assert pair(both, both, largest=256 << 10) == [0, 0]


def test_size_mismatch_and_silent_peer_are_peer_errors(fake):
    def sender(t, link):
        link.send(Message((16,)))

    def receiver(t, link):
        with pytest.raises(PeerError, match="16-byte message arrived where 8 B"):
            link.recv_into(Message((8,)))
        with pytest.raises(PeerError, match="no message within 0.3 s"):
            link.recv_into(Message((16,)))
        assert link.state.state is vp.Conn.ERROR

    pair(sender, receiver, timeout=0.3)


def test_events_mode_moves_the_bytes(fake):
    sizes = (8,)

    def client(t, link):
        req, rep = Message(sizes), Message(sizes)
        req.arrays[0][:] = 42
        for _ in range(20):
            link.call(req, rep)
        return int(rep.arrays[0][0]), t.mode()

    def server(t, link):
        req = Message(sizes)
        link.serve(20, req, req)
        return type(link.rcq), type(link.scq)

    (value, mode), (rcq, scq) = pair(client, server, poll="blocking")
    assert value == 42 and ", events" in mode
    # a CQ to sleep on must be armed, which pyverbs can do for classic CQs only; sends stay polled in place
    assert rcq is fake.FakeCQ and scq is fake.FakeCQEX


def test_events_mode_progress_sleeps_until_credits_or_data_arrive(fake):
    """--poll blocking: a progress pass over one link that moved nothing sleeps in ibv_get_cq_event (as
    perftest -e does), here a sender out of credits while its receiver has not started, and every
    message still arrives."""
    sizes, window = (256 << 10,), 12  # 1 MB pool: depth 4
    pat = Pattern(sizes, 5)

    def sender(t, link):
        out = Message(sizes)
        out.fill(pat)
        t.progress([(link, out)] * window, [])
        return link.rcq.events

    def receiver(t, link):
        time.sleep(0.3)
        inbox = [Message(sizes) for _ in range(window)]
        t.progress([], [(link, m) for m in inbox])
        return sum(not m.matches(pat) for m in inbox)

    sleeps, wrong = pair(sender, receiver, poll="blocking", largest=256 << 10)
    assert wrong == 0 and sleeps > 0


@pytest.mark.parametrize("extended", [True, False])
def test_completions_are_read_in_place_where_cqs_are_extended(fake, monkeypatch, extended):
    """Busy-polled links read completions in place from extended CQs (no pyverbs WC object made per
    completion); where pyverbs has none, from classic CQs. Either way the bytes move, and a failed
    completion is a PeerError naming its status."""
    monkeypatch.setattr(verbs, "load_api", lambda: verbs_fake.api(extended=extended))
    fake.Stats.cqex = 0
    sizes = (64 << 10,)
    pat = Pattern(sizes, 6)

    def client(t, link):
        req, rep = Message(sizes), Message(sizes)
        req.fill(pat)
        for _ in range(5):
            link.call(req, rep)
        echoed = rep.matches(pat)
        t.world.barrier("broken")  # the server's queue pair is in error now
        link.send(req)
        with pytest.raises(PeerError, match=r"a send work completion failed with status 12 \(the peer stopped ack"):
            link.recv_into(rep)
        return echoed, type(link.rcq)

    def server(t, link):
        req = Message(sizes)
        link.serve(5, req, req)
        link.qp.state = "error"
        t.world.barrier("broken")

    (echoed, rcq), _ = pair(client, server)
    assert echoed and rcq is (fake.FakeCQEX if extended else fake.FakeCQ)
    assert fake.Stats.cqex == (4 if extended else 0)  # a send and a receive CQ per link


def test_events_mode_takes_sigalrm_once_and_gives_it_back(fake):
    """--poll blocking interrupts its sleeps with SIGALRM: the handler is installed once (not per
    sleep: two system calls fewer per message), only from the main thread, and restored at close."""
    import signal

    def mine(*_):
        pass

    before = signal.signal(signal.SIGALRM, mine)
    try:
        t = verbs.VerbsTransport(verbs_fake.worlds(1)[0], config(poll="blocking"))
        got: list[bool] = []
        th = threading.Thread(target=lambda: got.append(t.alarm()))
        th.start()
        th.join()
        assert got == [False] and signal.getsignal(signal.SIGALRM) is mine  # another thread: no timer
        assert t.alarm()
        installed = signal.getsignal(signal.SIGALRM)
        assert installed is not mine
        assert t.alarm() and signal.getsignal(signal.SIGALRM) is installed  # once
        t.close()
        assert signal.getsignal(signal.SIGALRM) is mine
    finally:
        signal.signal(signal.SIGALRM, before)


@pytest.mark.parametrize("ranks,cpus,poll,yields", [(4, 2, "busy", True), (2, 2, "busy", False),
                                                      (4, 8, "busy", False), (4, 2, "blocking", False)])
def test_a_busy_poll_yields_where_the_host_has_more_ranks_than_cpus(fake, monkeypatch, ranks, cpus, poll, yields):
    """Four ranks spinning on two CPUs hold up the peers they wait for (a guest test timed out so):
    a busy poll then yields the CPU when it finds nothing, as MPI's mpi_yield_when_idle, and says so."""
    monkeypatch.setattr(verbs.os, "sched_getaffinity", lambda pid: set(range(cpus)))
    t = verbs.VerbsTransport(verbs_fake.worlds(ranks)[0], config(poll=poll))
    try:
        assert t.yield_idle is yields
        assert (f"busy-poll, yielding when idle ({ranks} ranks on {cpus} CPUs)" in t.mode()) is yields
    finally:
        t.close()


def test_port_down_and_bad_flags_are_usage_errors(fake):
    fake.FakeContext.port_state = 1
    with pytest.raises(UsageError, match="port 1 of fake_0 is DOWN"):
        verbs.VerbsTransport.check_usable(verbs.VerbsOptions())
    fake.FakeContext.port_state = 4
    with pytest.raises(UsageError, match="--ib-dev mlx5_9: no such RDMA device; devices here: fake_0"):
        verbs.VerbsTransport.check_usable(verbs.VerbsOptions(ib_dev="mlx5_9"))
    with pytest.raises(UsageError, match="--ib-port 2: fake_0 has ports 1..1"):
        verbs.VerbsTransport.check_usable(verbs.VerbsOptions(ib_port=2))
    with pytest.raises(UsageError, match="--gid-index 9: port 1 of fake_0 has 4 GIDs"):
        verbs.VerbsTransport.check_usable(verbs.VerbsOptions(gid_index=9))
    verbs.VerbsTransport.check_usable(verbs.VerbsOptions())


def test_mismatched_ops_fail_at_connect(fake):
    w = verbs_fake.worlds(2)
    errors = []

    def run(rank):
        t = verbs.VerbsTransport(w[rank], config(verbs_op="send" if rank == 0 else "write"))
        try:
            t.connect([1 - rank])
        except UsageError as exc:
            errors.append(str(exc))
        finally:
            t.close()
    threads = [threading.Thread(target=run, args=(r,)) for r in (0, 1)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(10)
    assert len(errors) == 2 and all("start every rank with the same command" in e for e in errors)


# -- random programs over every path of two real VerbsLinks --------------------------------------------
# Messages as buffer sizes: inline, one or several entries, packed (more buffers than max_sge, 4 here),
# and large ones that may go straight into the receiver's buffers (one span or two buffers).
SHAPES = [(8,), (100, 28), (3000,), (1000, 24, 3000), (512,) * 5, (40 << 10,), (40 << 10, 24 << 10), (33 << 10,) * 5]
KINDS = ("call", "caller", "serve-fn", "reverse", "send", "window", "exchange")
step_st = st.tuples(st.sampled_from(KINDS), st.sampled_from(SHAPES), st.sampled_from(SHAPES), st.integers(1, 12))


def run_program(t, link, me: int, program) -> tuple[int, set[str]]:
    """Rank ``me``'s half of ``program``: for each step (kind, shape a, shape b, n) it makes or answers
    calls, sends or receives, or exchanges, checking every byte it receives. Returns the messages that
    arrived wrong, and which paths messages took."""
    wrong, keep, paths = 0, [], set()
    general, post = [0], link._post
    link._post = lambda *a, **k: (general.__setitem__(0, general[0] + 1), post(*a, **k))[1]
    msgs = 0

    def filled(shape, seed, i=0):
        m = Message(shape)
        m.fill(Pattern(shape, seed), i)
        keep.append(m)
        return m

    def check(m, shape, seed, i=0):
        nonlocal wrong
        wrong += not m.matches(Pattern(shape, seed), i)
        m.clear()

    for s, (kind, a, b, n) in enumerate(program):
        caller = (me == 0) != (kind == "reverse")
        if kind in ("call", "caller", "serve-fn", "reverse"):
            if caller:
                req, rep = filled(a, 2 * s), Message(b)
                do = link.caller(req, rep) if kind in ("caller", "reverse") else partial(link.call, req, rep)
                for _ in range(n):
                    do()
                    check(rep, b, 2 * s + 1)
            else:
                req, reply = Message(a), filled(b, 2 * s + 1)

                def answer(req=req, reply=reply, a=a, s=s):
                    check(req, a, 2 * s)
                    return reply
                link.serve(n, req, reply if kind == "call" or kind == "caller" else answer)
            msgs += n
        elif kind in ("send", "window"):
            if me == 0:
                out = [filled(a, 2 * s, i) for i in range(n)]
                if kind == "send":
                    for m in out:
                        link.send(m)
                else:
                    t.complete([link.post_send(m) for m in out])
                msgs += n
            else:
                inbox = [Message(a) for _ in range(n)]
                keep.extend(inbox)
                if kind == "send":
                    for m in inbox:
                        link.recv_into(m)
                else:
                    t.complete([link.post_recv(m) for m in inbox])
                for i, m in enumerate(inbox):
                    check(m, a, 2 * s, i)
        else:  # both ways at once, beyond the pool's depth
            mine, theirs = (a, b) if me == 0 else (b, a)
            out = [filled(mine, 2 * s + me, i) for i in range(n)]
            inbox = [Message(theirs) for _ in range(n)]
            keep.extend(inbox)
            t.progress([(link, m) for m in out], [(link, m) for m in inbox])
            for i, m in enumerate(inbox):
                check(m, theirs, 2 * s + 1 - me, i)
            msgs += n
    p = link.proto
    paths.update(what for what, hit in (("placed directly", p.direct_in), ("sent directly", p.direct_out),
                                        ("by a closure", msgs > general[0]), ("by the general path", general[0]))
                 if hit)
    return wrong, paths


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(op=st.sampled_from(["send", "write"]), direct=st.sampled_from(["on", "off"]),
       pool=st.sampled_from([0.2, 0.5, 2]), program=st.lists(step_st, min_size=1, max_size=6))
def test_random_programs_over_the_real_links_move_every_byte(fake, monkeypatch, op, direct, pool, program):
    """Two real VerbsLinks over the in-memory fabric, which fails a send with no receive posted (RNR),
    a write outside a registered region or a post beyond the send queue: every path (call, caller,
    serve with a fixed reply or a function, send, a window through complete, both ways at once through
    progress) in random order, shapes and counts, over pools of 2 to 12 slots, the protocol deciding
    throughout (_verbs_protocol). Every byte arrives where it should."""
    monkeypatch.setattr(fake, "PIN_S", 0.0002)  # registrations still yield the CPU, and a program costs less
    out = pair(lambda t, link: run_program(t, link, 0, program), lambda t, link: run_program(t, link, 1, program),
               verbs_op=op, verbs_direct=direct, verbs_pool_mb=pool, largest=max(sum(s) for s in SHAPES))
    assert [w for w, _ in out] == [0, 0]
    for what in sorted(out[0][1] | out[1][1]):
        event(what)
