"""The verbs transport up to the device, here (no RDMA hardware, no InfiniBand in this kernel):
pyverbs' own no-device error as users see it, queue-pair info exchange and validation, pool sizing,
buffer-list to SGE mapping, connection states, and the credit protocol run over an in-memory
fabric (verbs_fake) with the transport's real code. Hardware tests: test_verbs_hw.py (-m rdma)."""

from __future__ import annotations

import threading
import time
from functools import partial

import pytest
from conftest import commbench

from commbench.core.config.run import CommonOptions, RunConfig
from commbench.core.measure.message import Message, Pattern
from commbench.core.measure.payload import Payload
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



# -- what a user sees here -------------------------------------------------------------------------
@no_device
def test_no_device_is_one_line_exit_2_naming_usable_transports():
    r = commbench("p2p-latency", "--transport", "verbs", "-m", "8")
    assert r.code == 2, r.err
    assert r.err.count("\n") == 1 and "Traceback" not in r.err
    assert "no RDMA device found (pyverbs: Failed to get devices list)" in r.err  # pyverbs' own error
    usable = r.err.split("usable transports here: ")[1].strip().split(", ")
    assert {"tcp", "grpc"} <= set(usable) and "verbs" not in usable and "ipoib" not in usable


@no_device
def test_no_device_with_every_benchmark_and_op():
    for args in (["p2p-bandwidth", "--verbs-op", "write"], ["ps-throughput", "--poll", "blocking"],
                 ["allreduce", "--ib-dev", "mlx5_0", "--ib-port", "2", "--gid-index", "3"]):
        r = commbench(*args, "--transport", "verbs")
        assert r.code == 2 and "no RDMA device found" in r.err and r.err.count("\n") == 1, (args, r.err)


def test_bad_verbs_flags_are_usage_errors():
    r = commbench("p2p-latency", "-t", "verbs", "--verbs-op", "read")
    assert r.code == 2 and "--verbs-op" in r.err and "Traceback" not in r.err
    r = commbench("p2p-latency", "-t", "verbs", "--verbs-pool-mb", "0")
    assert r.code == 2 and "argument --verbs-pool-mb: must be a finite number above 0" in r.err


# -- queue-pair info ------------------------------------------------------------------------------


# -- pool sizing, SGE mapping, credits, states, port checks ------------------------------------------


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
    return verbs_fake


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


