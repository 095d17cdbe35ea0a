"""Frames after the handshake are sealed: a relay on the path (another host, a spoofed address, a
redirected COMMBENCH_ROOT) that forwarded the proof can pass frames on, but a frame it injects,
alters, replays, drops or reorders is refused, naming the tampering, before anything in it is used."""

from __future__ import annotations

import os
import socket

import pytest
from conftest import Relay
from hypothesis import given, settings
from hypothesis import strategies as st

from commbench.core.errors import PeerError
from commbench.core.run.framing import HEADER, TAG, FrameError, Seal, Tampered, decode_header, encode, take_frame
from commbench.core.run.rendezvous import ABORT, SET, StoreClient, StoreServer

TOKEN = "t0ken"
frames = st.lists(st.tuples(st.integers(1, 11), st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
                            st.binary(max_size=40)), min_size=1, max_size=6)


def sealed_stream(msgs, key: bytes) -> list[bytes]:
    seal = Seal(key, dialer=True)
    return [encode(kind, obj, blob, seal) for kind, obj, blob in msgs]


def read_all(data: bytes, key: bytes) -> tuple[list, bool]:
    """The frames a reader takes from ``data``, and whether it was refused (else it waits for more)."""
    buf, seal, out = bytearray(data), Seal(key, dialer=False), []
    try:
        while (frame := take_frame(buf, seal)) is not None:
            out.append(frame)
    except FrameError:
        return out, True
    return out, False


@settings(max_examples=200, deadline=None)
@given(frames, st.data())
def test_any_change_to_a_sealed_stream_is_refused_before_the_changed_frame_is_used(msgs, data):
    key = os.urandom(32)
    wire = sealed_stream(msgs, key)
    assert read_all(b"".join(wire), key) == ([(k, o, b) for k, o, b in msgs], False)
    change = data.draw(st.sampled_from(["flip", "drop", "repeat", "swap", "inject", "reflect", "other key"]))
    i = data.draw(st.integers(0, len(wire) - 1))
    bad = list(wire)
    if change == "flip":
        at = data.draw(st.integers(0, len(wire[i]) - 1))
        bad[i] = wire[i][:at] + bytes([wire[i][at] ^ data.draw(st.integers(1, 255))]) + wire[i][at + 1:]
    elif change == "drop":
        del bad[i]
        if i == len(wire) - 1:
            return  # a dropped last frame is a connection that ended: the reader waits for it, then times out
    elif change == "repeat":
        bad.insert(i + 1, wire[i])
    elif change == "swap":
        if len(wire) < 2 or i == len(wire) - 1 or wire[i] == wire[i + 1]:
            return
        bad[i], bad[i + 1] = wire[i + 1], wire[i]
    elif change == "inject":
        bad.insert(i, encode(ABORT, {"message": "stop", "code": 0}) + os.urandom(TAG))
    elif change == "reflect":  # the reader's own direction's frames sent back to it
        back = Seal(key, dialer=False)
        bad[i] = encode(*msgs[i], seal=back) if i == 0 else wire[i]
        if i != 0:
            return
    else:
        bad = sealed_stream(msgs, os.urandom(32))
    got, refused = read_all(b"".join(bad), key)
    assert got == [(k, o, b) for k, o, b in msgs[:len(got)]], f"{change}: a changed frame was taken"
    assert refused or len(got) < len(msgs), f"{change} went unnoticed"  # else it waits for the rest: a timeout


def store(size: int) -> StoreServer:
    return StoreServer(socket.create_server(("127.0.0.1", 0), backlog=64), TOKEN, size)


def client(port: int, rank: int, size: int) -> StoreClient:
    return StoreClient("127.0.0.1", port, TOKEN, rank, size, f"h{rank}", 10)


def test_a_relay_that_only_forwards_is_harmless():
    srv = store(2)
    relay = Relay(srv.port)
    a, b = client(srv.port, 0, 2), client(relay.port, 1, 2)
    b.set("k", b"through the relay")
    assert a.get("k") == b"through the relay"
    a.set("back", b"v" * 100_000)
    assert b.get("back") == b"v" * 100_000
    for c in (a, b):
        c.close()
    relay.close()
    srv.close()


def _tampered(edit) -> tuple[StoreServer, Exception]:
    """Rank 1 behind a relay that edits its frames; rank 0 waits for what rank 1 sets."""
    srv = store(2)
    relay = Relay(srv.port, edit)
    a, b = client(srv.port, 0, 2), client(relay.port, 1, 2)
    b.set("hosts", b"cbh1")
    try:
        a.get("hosts", 10)
        a.get("never", 10)
    except PeerError as exc:
        got = exc
    else:
        raise AssertionError("the tampered frame was taken")
    assert "the connection of rank 1 on host h1 was tampered with" in str(srv.failed)
    for c in (a, b):
        c.close()
    relay.close()
    srv.close()
    return srv, got


def test_an_injected_abort_is_refused_and_named():
    def inject(n, frame):  # after rank 1's first sealed frame: rank 0 told the run is over, all is well
        return frame + encode(ABORT, {"message": "done", "code": 0}) + bytes(TAG) if n == 1 else frame

    srv, got = _tampered(inject)
    assert srv.aborted is None and "tampered with" in str(got) and "rank 1 on host h1" in str(got)


def test_an_altered_frame_is_refused_and_nothing_in_it_is_used():
    def alter(n, frame):
        kind = decode_header(frame[:HEADER.size])[0]
        return frame.replace(b"cbh1", b"EVIL") if kind == SET else frame

    srv, got = _tampered(alter)
    assert "EVIL" not in str(got) and b"EVIL" not in b"".join(srv.data.values()) and "tampered with" in str(got)


def test_a_replayed_frame_is_refused():
    def replay(n, frame):
        return frame + frame if n == 1 else frame  # rank 1's first sealed frame, and again

    srv, got = _tampered(replay)
    assert "tampered with" in str(got)


def test_the_rank_behind_a_relay_refuses_a_forged_answer():
    """The other way: rank 0's frames are sealed too; a forged answer to a rank's request is refused."""
    def forge(n, frame):  # rank 0's first answer after OK replaced by a status that says the run failed
        return encode(2, {"failed": "EVIL"}) + bytes(TAG) if n == 3 else frame

    srv = store(2)
    relay = Relay(srv.port, down=forge)
    b = client(relay.port, 1, 2)
    with pytest.raises(PeerError, match=r"the connection to the rendezvous at .* \(rank 0\) was tampered with"):
        b.status()
    b.close()
    relay.close()
    srv.close()


def test_frames_reflected_back_to_their_sender_do_not_check():
    key = os.urandom(32)
    mine = Seal(key, dialer=True)
    frame = encode(SET, {"key": "k"}, b"v", mine)
    with pytest.raises(Tampered):
        take_frame(bytearray(frame), Seal(key, dialer=True))  # the sender reading its own frame
    assert take_frame(bytearray(frame), Seal(key, dialer=False)) == (SET, {"key": "k"}, b"v")
