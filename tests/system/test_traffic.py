"""--traffic: the capture's TCP reassembly and HTTP/2 reading (fed made-up segments), and real runs
measured on the wire (root: a packet capture)."""

from __future__ import annotations

import os
import socket

import pytest
from conftest import commbench

from commbench.core.output.results import read_runs

root = pytest.mark.skipif(os.geteuid() != 0, reason="a packet capture needs root")










@root
@pytest.mark.slow
def test_grpc_calls_measured_on_the_wire(tmp_path):
    """Unary gRPC: one Exchange RPC per round trip, carrying the message each way (plus gRPC's framing)."""
    out = tmp_path / "r.jsonl"
    r = commbench("p2p-latency", "-t", "grpc", "--grpc-call", "unary", "-m", "8,64K", "-i", "50", "-x", "5",
                  "--traffic", "-o", str(out))
    assert r.code == 0, r.err
    rows = [x for x in read_runs(out)[0].rows if x["bench"] == "p2p-latency-traffic"]
    by = {(x["size"], x["from"], x["to"]): x for x in rows}
    assert set(by) == {(s, a, b) for s in (8, 65536) for a, b in (("rank0", "rank1"), ("rank1", "rank0"))}
    for size in (8, 65536):
        call, back = by[(size, "rank0", "rank1")], by[(size, "rank1", "rank0")]
        assert call["steps"] == 50 and call["rpcs_step"] == 1.0 and back["rpcs_step"] == 0.0
        (name, m), = call["methods"].items()
        assert name.startswith("Exchange") and m["request_b"] >= size and m["response_b"] >= size
        for x in (call, back):  # the message, its gRPC prefix and HTTP/2 frame, a few headers
            assert size < x["bytes_step"] < size + 400, x
    assert "# traffic on the wire, 65536, 50 steps" in r.out


@root
@pytest.mark.slow
def test_tcp_bytes_on_the_wire_are_the_messages_and_their_framing(tmp_path):
    out = tmp_path / "r.jsonl"
    r = commbench("p2p-bandwidth", "-t", "tcp", "-m", "1M:1M", "-i", "4", "-x", "1", "--traffic", "-o", str(out))
    assert r.code == 0, r.err
    rows = {(x["from"], x["to"]): x for x in read_runs(out)[0].rows if x["bench"] == "p2p-bandwidth-traffic"}
    window = 64 * (1 << 20)  # a step is a window of 64 messages, then a 4-byte ack
    assert window <= rows[("rank0", "rank1")]["bytes_step"] < window * 1.001
    assert 4 <= rows[("rank1", "rank0")]["bytes_step"] < 100
    assert rows[("rank0", "rank1")]["rpcs_step"] == 0


@root
def test_the_capture_stops_promptly_while_packets_keep_coming(tmp_path):
    """A steady flow on loopback (packets every 10 ms: the capture's 0.2 s receive timeout never
    fires) must not keep the capture from stopping (CI once waited 60 s for it and failed the run)."""
    import threading
    import time

    from commbench.core.capture.packets import Capture

    cap = Capture(tmp_path / "c.json", [])
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        with socket.create_connection(srv.getsockname()) as c, srv.accept()[0] as a:
            going = threading.Event()
            going.set()

            def flood() -> None:
                while going.is_set():
                    c.sendall(b"x" * 1000)
                    a.recv(65536)
                    time.sleep(0.01)
            t = threading.Thread(target=flood)
            t.start()
            try:
                time.sleep(0.5)
                t0 = time.monotonic()
                cap.stop(timeout=10)
                assert time.monotonic() - t0 < 5
            finally:
                going.clear()
                t.join()


@root
def test_the_capture_keeps_what_came_before_it_was_stopped(tmp_path):
    """A flood on loopback between two processes runs ahead of the capture (one Python process);
    stopped right after it, the capture still reads every byte the kernel had queued for it (CI once
    counted 98 % of a run's bytes: the capture stopped with the end of the run still queued). In a
    namespace of the test's own: another program's loopback traffic is not this test's."""
    import subprocess
    import sys

    from commbench.core.capture.packets import Capture
    from commbench.launch.private_net import entered, private_loopback

    total = 512 << 20
    with private_loopback() as ns, entered(ns), socket.socket() as srv:
        cap = Capture(tmp_path / "c.json", [], ns)
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        send = (f"import socket; c = socket.create_connection(('127.0.0.1', {srv.getsockname()[1]})); "
                f"b = bytes(1 << 24); [c.sendall(b) for _ in range({total >> 24})]")
        flood = subprocess.Popen([sys.executable, "-c", send])
        a, peer = srv.accept()
        with a:
            buf, left = bytearray(1 << 22), total
            while left > 0:
                left -= a.recv_into(buf)
            here = a.getsockname()
        assert flood.wait(30) == 0
        data = cap.stop(timeout=60).data
    flows = [f for f in data["flows"] if (tuple(f["src"]), tuple(f["dst"])) == (peer, here)]
    assert data["drops"] == 0 and len(flows) == 1
    assert sum(n for _, n in flows[0]["segments"]) == total


@root
def test_the_kernel_passes_the_capture_only_incoming_tcp(tmp_path):
    """The capture's socket filter (TCP_IN_ONLY) lets the kernel drop what the capture does not read:
    in a namespace of the test's own (nothing else on its loopback), 20,000 UDP datagrams and the
    outgoing copies of a TCP exchange never reach the capture; the exchange's incoming segments do."""
    from commbench.core.capture.packets import Capture
    from commbench.launch.private_net import entered, private_loopback

    with private_loopback() as ns:
        cap = Capture(tmp_path / "c.json", [], ns)
        with entered(ns):
            u, v = socket.socket(socket.AF_INET, socket.SOCK_DGRAM), socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            srv = socket.create_server(("127.0.0.1", 0))
        with u, v, srv:
            v.bind(("127.0.0.1", 0))
            port = srv.getsockname()[1]
            for _ in range(20000):
                u.sendto(b"x" * 100, v.getsockname())
            with entered(ns):
                c = socket.create_connection(srv.getsockname())
            a, _ = srv.accept()
            with a, c:
                for _ in range(50):
                    c.sendall(b"y" * 1000)
                    a.recv(4096)
        data = cap.stop(timeout=60).data
    print(f"kernel passed {data['passed']} packets to the capture")
    flows = [f for f in data["flows"] if f["dst"][1] == port]
    assert flows and sum(n for _, n in flows[0]["segments"]) == 50 * 1000
    # SYN, SYN-ACK, ACK, 50 segments and their ACKs, the FINs: each once (incoming), no datagram
    assert data["passed"] < 200 and data["drops"] == 0, data["passed"]
