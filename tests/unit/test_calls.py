"""Calls made at once (Transport.calls / serve_calls): each request carries its index, and the
answering side picks each one's reply by it, in whatever order the requests come (gRPC's handler
threads take concurrent calls in any order). Hypothesis generates the batches and the orders."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from wire import ThreadWorld, Wire, WireTransport

from commbench.core.errors import PeerError
from commbench.core.measure.message import Message
from commbench.transports.base import INDEX, Link, Transport, index_of, stamp


class Shuffled(Link):
    """A link on the answering side whose requests arrive in a given order; what it sends is kept."""

    def __init__(self, requests: list[bytes]) -> None:
        super().__init__(1, "rank 1")
        self.requests, self.sent = requests, []

    def send(self, msg: Message) -> None:
        self.sent.append(bytes(msg.views[0]))

    def recv_into(self, msg: Message) -> None:
        assert msg.assign([self.requests.pop(0)])


def marked(n: int, nbytes: int) -> list[Message]:
    """n replies, each of a size of its own and filled with its number."""
    out = []
    for i in range(n):
        m = Message((nbytes + i,))
        m.arrays[0][:] = i % 251
        out.append(m)
    return out


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 40).flatmap(lambda n: st.permutations(range(n))), st.integers(INDEX, 64))
def test_each_request_gets_the_reply_its_index_names_in_any_order(order, size):
    n = len(order)
    requests = [Message((size,)) for _ in range(n)]
    stamp(requests)
    assert [index_of(q, n, "x") for q in requests] == list(range(n))
    link = Shuffled([bytes(requests[i].views[0]) for i in order])
    replies = marked(n, 8)
    served = Message((size,))
    Transport.serve_calls(None, link, served, replies)  # type: ignore[arg-type]
    assert [(len(b), b[0]) for b in link.sent] == [(8 + i, i % 251) for i in order]


def test_a_request_naming_no_call_is_the_peers_fault():
    (q,) = stamp_all([Message((16,))], start=7)
    link = Shuffled([bytes(q.views[0])])
    with pytest.raises(PeerError, match="rank 1 sent call 7 of 3 answered at once"):
        Transport.serve_calls(None, link, Message((16,)), marked(3, 8))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at least 4 B"):
        stamp([Message((2,))])


def stamp_all(msgs: list[Message], start: int) -> list[Message]:
    for i, m in enumerate(msgs):
        m.arrays[0][:INDEX] = memoryview((start + i).to_bytes(INDEX, "little"))
    return msgs


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(1, 12), min_size=1, max_size=3))
def test_calls_on_several_links_at_once_come_back_matched(counts):
    """Rank 0 makes every batch's calls at once, one batch per peer (ranks 1..k over wires, whose
    progress sends everything before it receives); each peer answers its own with serve_calls; every
    reply lands in its own message with its own content (peer r's reply i: 100 r + i bytes of i)."""
    k = len(counts)
    shared = {"size": k + 1, "lock": threading.Lock(), "slots": {}, "barrier": threading.Barrier(k + 1)}
    wires = {(a, b): Wire() for a in range(k + 1) for b in range(k + 1) if a != b}
    errors: list[BaseException] = []

    def peer(rank: int) -> None:
        try:
            t = WireTransport(ThreadWorld(rank, shared), wires)
            t.serve_calls(t.connect([0])[0], Message((INDEX,)), marked(counts[rank - 1], 100 * rank))
        except BaseException as exc:  # re-raised in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=peer, args=(r,)) for r in range(1, k + 1)]
    for th in threads:
        th.start()
    t = WireTransport(ThreadWorld(0, shared), wires)
    links = t.connect(range(1, k + 1))
    batches = [(links[r], [Message((INDEX,)) for _ in range(c)], [Message((100 * r + i,)) for i in range(c)])
               for r, c in zip(range(1, k + 1), counts, strict=True)]
    t.calls(batches)
    for th in threads:
        th.join(10)
    assert not errors, errors
    for r, (_, _, replies) in zip(range(1, k + 1), batches, strict=True):
        want = [(100 * r + i, i % 251) for i in range(len(replies))]
        assert [(m.nbytes, int(m.arrays[0][0])) for m in replies] == want
