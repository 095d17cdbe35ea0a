"""Mutual proof of the run token (core/run/auth.py): the token never crosses the wire, a program
squatting on the rendezvous port learns nothing it can replay and the rank says so in one line, a
recorded hello replayed later is refused, and under srun rank 0 listens on a port nobody can work
out beforehand (published with the token)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time

import pytest

from commbench.core.errors import PeerError
from commbench.core.run import auth
from commbench.core.run.framing import encode, read_frame
from commbench.core.run.rendezvous import StoreClient, StoreServer

TOKEN = "0123456789abcdef" * 2


def server(size: int = 3) -> StoreServer:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    return StoreServer(listener, TOKEN, size)


class Recorder:
    """A TCP relay between a client and ``target`` that keeps every byte either way."""

    def __init__(self, target: int) -> None:
        self.target, self.seen = target, bytearray()
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(8)
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                a, _ = self.listener.accept()
            except OSError:
                return
            b = socket.create_connection(("127.0.0.1", self.target))
            for src, dst in ((a, b), (b, a)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        with src, dst, contextlib.suppress(OSError):  # either end may reset: the relay just ends
            while chunk := src.recv(65536):
                self.seen += chunk
                dst.sendall(chunk)


def test_the_token_never_crosses_the_wire():
    srv = server(2)
    rec = Recorder(srv.port)
    store = StoreClient("127.0.0.1", rec.port, TOKEN, 1, 2, "h1", 10)
    store.set("k", b"v")
    assert store.get("k") == b"v"
    store.close()
    srv.close()
    assert len(rec.seen) > 200 and TOKEN.encode() not in rec.seen and TOKEN[:16].encode() not in rec.seen
    assert auth.derived(TOKEN, "grpc") != TOKEN and TOKEN not in auth.derived(TOKEN, "grpc")


def test_a_squatter_learns_nothing_it_can_replay():
    """A program holding the rendezvous port greets the rank as rank 0 would; the rank answers the
    challenge (a proof bound to the squatter's nonce, not the token), finds that the squatter cannot
    prove itself, and stops with one line naming it. What the squatter kept, replayed to the real
    rendezvous, is refused there."""
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", 0))
    squatter.listen(1)
    got: dict = {}

    def squat() -> None:
        conn, _ = squatter.accept()
        conn.sendall(encode(auth.CHALLENGE, {"nonce": auth.nonce()}))
        got["hello"] = read_frame(conn, 4096, 0, time.monotonic() + 10)[1]
        conn.sendall(encode(auth.PROVEN, {"proof": "0" * 64}))  # its best guess
        got["raw"] = conn.recv(4096)
        conn.close()

    t = threading.Thread(target=squat, daemon=True)
    t.start()
    with pytest.raises(PeerError, match="did not prove it knows the run token: another program holds that port"):
        StoreClient("127.0.0.1", squatter.getsockname()[1], TOKEN, 1, 3, "h1", 10)
    t.join(10)
    assert TOKEN not in str(got["hello"]) and got["raw"] == b""  # nothing more was sent to it
    srv = server(3)
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    read_frame(s, 4096, 0, time.monotonic() + 10)  # the real challenge, unanswered by the recording
    s.sendall(encode(1, got["hello"]))
    assert s.recv(4096) == b""  # refused and closed
    s.close()
    good = StoreClient("127.0.0.1", srv.port, TOKEN, 1, 3, "h1", 10)  # the run goes on
    good.close()
    srv.close()


def test_a_recorded_hello_replayed_later_is_refused():
    srv = server(3)
    rec = Recorder(srv.port)
    StoreClient("127.0.0.1", rec.port, TOKEN, 1, 3, "h1", 10).close()
    hello_frames = [f for f in _frames(bytes(rec.seen)) if f[0] == 1]
    assert hello_frames, "no hello recorded"
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    kind, challenge, _ = read_frame(s, 4096, 0, time.monotonic() + 10)
    assert kind == auth.CHALLENGE
    s.sendall(encode(1, hello_frames[0][1]))  # rank 2's seat is free: only the proof can stop it
    assert s.recv(4096) == b""
    s.close()
    srv.close()


def _frames(data: bytes) -> list[tuple[int, dict]]:
    """Every frame in a recorded byte stream (both directions interleave whole frames here)."""
    import json

    from commbench.core.run.framing import HEADER, decode_header

    out, i = [], 0
    while i + HEADER.size <= len(data):
        try:
            kind, jlen, blen = decode_header(data[i:i + HEADER.size])
        except Exception:  # noqa: BLE001 - a proof of bytes, not a frame: step on
            i += 1
            continue
        body = data[i + HEADER.size:i + HEADER.size + jlen]
        with contextlib.suppress(ValueError):
            out.append((kind, json.loads(body) if jlen else {}))
        i += HEADER.size + jlen + blen
    return out


def test_a_listener_greets_with_a_fresh_challenge_each_time():
    srv = server(2)
    nonces = set()
    for _ in range(3):
        with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
            kind, obj, _ = read_frame(s, 4096, 0, time.monotonic() + 10)
            assert kind == auth.CHALLENGE
            nonces.add(obj["nonce"])
    srv.close()
    assert len(nonces) == 3






def test_a_reachable_tensorflow_server_is_named_in_one_line(monkeypatch, capsys):
    """Where the run has no namespace of its own (not root, mpirun, srun), rank 0 says in one line
    that TensorFlow's servers have no authentication; inside the run's own namespace it says nothing."""
    from commbench.core.run.placement import ENV_NETNS
    from commbench.transports import _tf_bind

    monkeypatch.delenv(ENV_NETNS, raising=False)
    _tf_bind.exposure("127.0.0.1")
    _tf_bind.exposure("10.0.0.5")
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2 and all("no authentication" in x for x in lines)
    assert "other processes of this machine" in lines[0] and "anyone who reaches 10.0.0.5" in lines[1]
    monkeypatch.setenv(ENV_NETNS, "cbrun1")
    _tf_bind.exposure("127.0.0.1")
    assert capsys.readouterr().err == ""
