"""--traffic: the capture's TCP reassembly and HTTP/2 reading (fed made-up segments), and real runs
measured on the wire (root: a packet capture)."""

from __future__ import annotations

import os
import random
import socket
import struct

import hpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from commbench.core.capture.packets import NO_PEER, PREFACE, Capturer, Traffic, in_flight_max, own_endpoints
from commbench.core.errors import CommbenchError, UsageError

CLIENT, SERVER = ("127.0.0.1", 40000), ("127.0.0.1", 50051)
ENDS = {(CLIENT, SERVER): "worker", (SERVER, CLIENT): "ps"}  # who holds each end: (end, peer) -> role


def frame(ftype: int, flags: int, stream: int, payload: bytes) -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + struct.pack(">I", stream) + payload


def headers(enc: hpack.Encoder, stream: int, path: str, split: bool = False) -> bytes:
    block = enc.encode([(":method", "POST"), (":scheme", "http"), (":path", path), ("te", "trailers")])
    if not split:
        return frame(0x1, 0x4, stream, block)
    half = len(block) // 2  # HEADERS without END_HEADERS, then a CONTINUATION that ends them
    return frame(0x1, 0x8, stream, bytes([3]) + block[:half] + b"\0\0\0") + frame(0x9, 0x4, stream, block[half:])


def conversation() -> tuple[bytes, bytes]:
    """A client opening two RPCs (one with padded, continued headers) and the server answering."""
    c, s = hpack.Encoder(), hpack.Encoder()
    client = PREFACE + frame(0x4, 0, 0, b"") + headers(c, 1, "/pkg.Svc/Foo") + frame(0x0, 0x1, 1, b"x" * 100) + \
        headers(c, 3, "/pkg.Svc/Bar", split=True) + frame(0x0, 0, 3, b"y" * 3000) + frame(0x0, 0x1, 3, b"y" * 2000)
    server = frame(0x4, 0, 0, b"") + frame(0x1, 0x4, 1, s.encode([(":status", "200")])) + \
        frame(0x0, 0, 1, b"r" * 40) + frame(0x1, 0x5, 1, s.encode([("grpc-status", "0")]))
    return client, server


def feed(cap: Capturer, src, dst, data: bytes, t0: int, chunks: int, shuffle: bool, drop: int | None = None,
         isn: int = 0xFFFFFF00) -> None:
    """data as TCP segments of src -> dst after a handshake (sequence numbers wrap), in order or not."""
    cap.segment(t0, src, dst, isn, 0x02 | (0x10 if src == SERVER else 0), memoryview(b""))
    cuts = sorted(random.Random(7).sample(range(1, len(data)), chunks - 1))
    parts = [(a, data[a:b]) for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
    if shuffle:  # neighbours swapped: what a packet socket sees when per-CPU queues reorder
        for i in range(0, len(parts) - 1, 2):
            parts[i], parts[i + 1] = parts[i + 1], parts[i]
    parts.append(parts[1])  # and a retransmission, counted once
    for k, (off, chunk) in enumerate(parts):
        if k != drop:
            cap.segment(t0 + 10 + k, src, dst, (isn + 1 + off) & 0xFFFFFFFF, 0x18, memoryview(chunk))


@pytest.mark.parametrize("shuffle", [False, True])
def test_rpcs_are_counted_with_their_methods_and_sizes_from_reordered_segments(shuffle):
    client, server = conversation()
    cap = Capturer([9999])
    feed(cap, CLIENT, SERVER, client, 1000, 40, shuffle)
    feed(cap, SERVER, CLIENT, server, 1000, 5, shuffle)
    t = Traffic(cap.result(0))
    assert [(path, req, resp) for _, _, path, req, resp, _ in t.data["rpcs"]] == \
        [("/pkg.Svc/Foo", 100, 40), ("/pkg.Svc/Bar", 5000, 0)]
    ends = [end for *_, end in t.data["rpcs"]]  # Foo's trailers (END_STREAM) end it; Bar is never answered
    assert ends[0] is not None and ends[0] >= t.data["rpcs"][0][0] and ends[1] is None
    cells = t.by_roles(ENDS, 0, 10**9)
    assert cells[("worker", "ps")]["bytes"] == len(client)  # every byte once, the retransmission too
    assert cells[("ps", "worker")]["bytes"] == len(server)
    assert cells[("worker", "ps")]["rpcs"] == 2 and cells[("ps", "worker")]["rpcs"] == 0
    assert cells[("worker", "ps")]["methods"] == {"Foo": [1, 100, 40], "Bar": [1, 5000, 0]}
    assert cells[("worker", "ps")]["segments"] == 40


@given(st.lists(st.tuples(st.integers(0, 50), st.one_of(st.none(), st.integers(0, 30))), max_size=40))
def test_calls_in_flight_are_the_most_open_at_one_instant(raw):
    """in_flight_max against counting at every instant: a call is open from its start until (not at)
    its end; one never seen to end stays open."""
    spans = [(t, None if d is None else t + d) for t, d in raw]
    want = max((sum(1 for a, e in spans if a <= t and (e is None or t < e)) for t, _ in spans), default=0)
    assert in_flight_max(spans) == want


def test_a_window_counts_only_what_it_covers():
    client, server = conversation()
    cap = Capturer([])
    feed(cap, CLIENT, SERVER, client, 1000, 40, False)
    t = Traffic(cap.result(0))
    cells = t.by_roles(ENDS, 1010, 1020)  # the first ten segments
    assert cells[("worker", "ps")]["segments"] == 10
    assert t.by_roles(ENDS, 5000, 6000) == {}


def test_a_segment_the_capture_missed_is_an_error_not_a_smaller_number():
    client, _ = conversation()
    cap = Capturer([])
    feed(cap, CLIENT, SERVER, client, 1000, 40, False, drop=5)
    with pytest.raises(CommbenchError, match="bytes never captured"):
        Traffic(cap.result(0)).by_roles(ENDS, 0, 10**9)
    # a connection of nobody in the run does not matter
    assert Traffic(cap.result(0)).by_roles({}, 0, 10**9) == {}
    with pytest.raises(CommbenchError, match="dropped 3 packets"):
        Traffic(cap.result(3)).by_roles({}, 0, 10**9)


def test_other_protocols_count_bytes_only_and_excluded_ports_nothing():
    data = b"\x00\x00\x00\x08" + b"z" * 5000
    cap = Capturer([SERVER[1]])
    feed(cap, CLIENT, SERVER, data, 1000, 4, False)
    assert cap.result(0)["flows"] == []  # the rendezvous's port: never captured
    cap = Capturer([])
    feed(cap, CLIENT, SERVER, data, 1000, 4, True)
    cells = Traffic(cap.result(0)).by_roles({(CLIENT, SERVER): "rank0", (SERVER, CLIENT): "rank1"}, 0, 10**9)
    assert cells == {("rank0", "rank1"): {"bytes": len(data), "segments": 4, "rpcs": 0, "methods": {},
                                          "in_flight_max": 0}}


def test_one_port_on_connections_of_two_ranks_is_told_apart_by_its_peer():
    """The kernel gives one ephemeral port to connections to different peers, from different processes
    too: CI's flaky test_tf_mode_sends_what_tensorflow_sends_on_the_wire (the chief's calls to one worker
    counted as the ps's when a ps reused the chief's port)."""
    other = ("127.0.0.1", 50052)
    client, server = conversation()
    cap = Capturer([])
    feed(cap, CLIENT, SERVER, client, 1000, 10, False)  # chief -> worker
    feed(cap, CLIENT, other, client[:-5], 1000, 10, False)  # ps -> worker 2, from the same port
    roles = {(CLIENT, SERVER): "chief", (SERVER, CLIENT): "worker", (CLIENT, other): "ps", (other, CLIENT): "worker"}
    cells = Traffic(cap.result(0)).by_roles(roles, 0, 10**9)
    assert {k: (c["bytes"], c["rpcs"]) for k, c in cells.items()} == \
        {("chief", "worker"): (len(client), 2), ("ps", "worker"): (len(client) - 5, 2)}


@pytest.mark.parametrize("listener", [SERVER, ("0.0.0.0", SERVER[1])])
def test_a_connection_its_server_closed_is_the_listeners(listener):
    client, _ = conversation()
    cap = Capturer([])
    feed(cap, CLIENT, SERVER, client, 1000, 10, False)
    cells = Traffic(cap.result(0)).by_roles({(CLIENT, SERVER): "worker", (listener, NO_PEER): "ps"}, 0, 10**9)
    assert cells[("worker", "ps")]["bytes"] == len(client)
    # the client's port on a connection to another peer says nothing about this one
    other = {(CLIENT, ("127.0.0.1", 50052)): "chief", (listener, NO_PEER): "ps"}
    assert Traffic(cap.result(0)).by_roles(other, 0, 10**9) == {}


def test_own_endpoints_names_this_processes_sockets():
    with socket.socket() as lst:
        lst.bind(("127.0.0.1", 0))
        lst.listen()
        with socket.create_connection(lst.getsockname()) as c:
            s, _ = lst.accept()
            with s:
                mine = own_endpoints()
            assert (*lst.getsockname(), *NO_PEER) in mine
            assert (*c.getsockname(), *lst.getsockname()) in mine and (*lst.getsockname(), *c.getsockname()) in mine


def test_traffic_needs_root(monkeypatch):
    from commbench.core.capture import traffic

    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(UsageError, match="needs root"):
        traffic.check_usable()


