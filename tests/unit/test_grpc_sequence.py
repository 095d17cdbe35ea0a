"""A gRPC link's one-way messages are filed by number: every order in which a sender's unary calls can
arrive is taken, and a number the sender never sends (taken or filed already, too far ahead) is refused."""

from __future__ import annotations

from collections import deque

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from commbench.transports import grpcio
from commbench.transports._net import SLACK, grpc_receive_limit
from commbench.transports.grpcio import Inbox

IN_FLIGHT = 4  # the sender's cap in this model (grpcio's MAX_IN_FLIGHT, small so that it is reached)


@pytest.fixture(autouse=True)
def small_window(monkeypatch):
    monkeypatch.setattr(grpcio, "AHEAD", IN_FLIGHT + 2)


def run_sender(steps: list[tuple[int, int]]) -> tuple[Inbox, list[int]]:
    """GrpcLink.send's rule: a call's future is kept until reaped; with more than IN_FLIGHT kept, the
    oldest is waited for (it arrives), while the others, the newest too, are on the wire. ``steps``:
    (0, _) send, (1, k) the k-th call in flight arrives, (2, _) the receiver takes what is next.
    Returns the inbox and the numbers taken, in order."""
    inbox, pending, arrived, taken, next_out = Inbox(), deque[int](), set[int](), [], 0

    def arrive(seq: int) -> None:
        assert inbox.file(seq, seq.to_bytes(8, "little")) == "", f"refused {seq} of a well-behaved sender"
        arrived.add(seq)

    for op, k in steps:
        if op == 0:  # the last send's wait for its oldest call (any call in flight may arrive first), then a send
            while pending and (pending[0] in arrived or len(pending) > IN_FLIGHT):
                if pending[0] not in arrived:
                    arrive(pending[0])
                pending.popleft()
            pending.append(next_out)
            next_out += 1
        elif op == 1:
            flying = [s for s in pending if s not in arrived]
            if flying:
                arrive(flying[k % len(flying)])
        elif inbox.ready():
            taken.append(int.from_bytes(inbox.take(), "little"))
    return inbox, taken


steps = st.lists(st.tuples(st.integers(0, 2), st.integers(0, 50)), max_size=120)


@given(steps)
@example([(0, 0)] * (IN_FLIGHT + 1) + [(1, IN_FLIGHT)])  # the newest of the most in flight arrives first
def test_every_order_a_sender_can_cause_is_taken_in_order(steps):
    inbox, taken = run_sender(steps)
    assert taken == list(range(len(taken)))
    assert inbox.in_order >= inbox.next_in


@given(steps, st.integers(0, 200))
def test_a_number_taken_filed_or_far_ahead_is_refused(steps, seq):
    inbox, _ = run_sender(steps)
    seen, far = seq < inbox.next_in or seq in inbox.held, seq >= inbox.in_order + IN_FLIGHT + 2
    why = inbox.file(seq, b"x")
    if seen:
        assert "already received" in why
    elif far:
        assert "past the" in why
    else:
        assert why == ""


def test_garbage_without_a_number_is_refused():
    assert Inbox().file(None, b"") == "without a sequence number"
    assert grpcio.RawCodec.seq_of(b"1234567") is None  # shorter than a number


def test_the_receive_limit_follows_the_run():
    assert grpc_receive_limit(8) == 8 + SLACK
    assert grpc_receive_limit(1 << 40) == (1 << 31) - 1  # gRPC's own bound
