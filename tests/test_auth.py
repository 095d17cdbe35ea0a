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
from conftest import srun_ranks

from commbench.core.errors import PeerError
from commbench.core.run import auth
from commbench.core.run.framing import encode, read_frame
from commbench.core.run.placement import PORT_BASE, PORT_SPAN
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


def test_srun_rank_zero_listens_where_nobody_could_work_out(tmp_path):
    """Started as srun starts ranks (no --port, no COMMBENCH_TOKEN): rank 0 listens on a free port and
    publishes it beside the token; the port a stranger would derive from the job's ids is not used."""
    ranks, path = srun_ranks(4343, tmp_path / "tokens", "p2p-latency", "-m", "8:8", "-i", "2000", "--timeout", "30")
    token, port = path.read_text().split()
    outs = [r.communicate(timeout=120) for r in ranks]
    assert [r.returncode for r in ranks] == [0, 0], outs
    assert len(token) == 32 and int(port) != PORT_BASE + (4343 * 17) % PORT_SPAN
    assert [line.split()[0] for line in outs[0][0].splitlines() if not line.startswith("#")] == ["8"]
    assert not path.exists()


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


def _rank_processes(launcher_pid: int, within: float = 60) -> list:
    """The rank processes of a local launch (their environment has the run token), once all are up."""
    import psutil
    from conftest import rank_processes

    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        ranks = rank_processes(psutil.Process(launcher_pid).children(recursive=True))
        with contextlib.suppress(psutil.Error):
            if len(ranks) >= 2 and all("COMMBENCH_TOKEN" in p.environ() for p in ranks.values()):
                return list(ranks.values())
        time.sleep(0.05)
    raise AssertionError("the ranks did not start")


root = pytest.mark.skipif(__import__("os").geteuid() != 0, reason="network namespaces and packet sockets need root")


@root
@pytest.mark.slow
@pytest.mark.parametrize("transport", ["tcp", "grpc"])
def test_a_whole_run_never_puts_its_token_on_the_wire(transport):
    """Every byte on the loopback of a namespace holding one whole run (launcher, rendezvous, ranks),
    read by a packet socket there: the run's token (which the test reads from a rank's environment)
    appears nowhere, as text or as bytes, while the rendezvous's frames and the data do."""
    import subprocess
    import sys

    from conftest import ENV

    from commbench.launch.private_net import entered, private_loopback

    with private_loopback() as ns:
        with entered(ns):
            cap = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
        cap.settimeout(0.2)
        seen, going = bytearray(), threading.Event()

        def read() -> None:
            while not going.is_set():
                with contextlib.suppress(TimeoutError):
                    seen.extend(cap.recv(1 << 17))

        reader = threading.Thread(target=read)
        reader.start()
        launcher = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-m", "commbench", "p2p-latency",
                                     "-t", transport, "-m", "8:8", "--time", "2", "--warmup-time", "0.2"],
                                    env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        token = _rank_processes(launcher.pid)[0].environ()["COMMBENCH_TOKEN"]
        out, err = launcher.communicate(timeout=120)
        going.set()
        reader.join(5)
        cap.close()
    assert launcher.returncode == 0, err
    print(f"{transport}: {len(seen) / 1e6:.1f} MB captured, token {token[:6]}... not in it")
    assert len(seen) > 1e5 and b"CBv1" in seen  # the data, and the rendezvous's frames
    for form in (token.encode(), bytes.fromhex(token), token[:16].encode(), token[16:].encode()):
        assert form not in seen


@root
@pytest.mark.slow
def test_tensorflow_servers_are_out_of_reach_of_the_machines_other_processes():
    """TensorFlow's gRPC server has no authentication. As root the local launcher runs a tf-grpc run in
    a network namespace of its own: the TF servers' ports, which the ranks listen on, refuse a
    connection from this test's namespace, and no 'no authentication' note is printed."""
    import subprocess
    import sys

    from conftest import ENV

    launcher = subprocess.Popen([sys.executable, "-m", "commbench", "p2p-latency", "-t", "tf-grpc", "-m", "8",
                                 "--time", "20", "--warmup-time", "0.2"], env=ENV, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    try:
        ranks = _rank_processes(launcher.pid)
        here = __import__("os").readlink("/proc/self/ns/net")
        ports: set[int] = set()
        deadline = time.monotonic() + 60

        def spaces() -> set[str]:
            return {__import__("os").readlink(f"/proc/{p.pid}/ns/net") for p in ranks}

        # a rank started by `ip netns exec` is in this namespace until it enters its own (read at once, under load
        # it once gave {this one, the run's}): wait for them all to leave it before reading their sockets
        while here in spaces() and time.monotonic() < deadline:
            time.sleep(0.05)
        while len(ports) < 3 and time.monotonic() < deadline:  # the rendezvous, both TF servers
            for p in ranks:  # the listening sockets of the rank's namespace (psutil reads this one's)
                for table in ("tcp", "tcp6"):
                    with contextlib.suppress(OSError):
                        ports |= {int(line.split()[1].split(":")[1], 16) for line in
                                  open(f"/proc/{p.pid}/net/{table}").read().splitlines()[1:]
                                  if line.split()[3] == "0A"}
            time.sleep(0.2)
        seen = spaces()
        refused = 0
        for port in ports:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=2).close()
            except ConnectionRefusedError:
                refused += 1
    finally:
        out, err = launcher.communicate(timeout=120)
    assert launcher.returncode == 0, err
    assert len(seen) == 1 and here not in seen, (here, seen)
    assert len(ports) >= 3 and refused == len(ports), ports
    assert "no authentication" not in err, err


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
