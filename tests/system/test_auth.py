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

from commbench.core.run.placement import PORT_BASE, PORT_SPAN


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




def _ranks_behind_a_relay(tmp_path, up) -> list:
    """Two ranks as srun starts them with COMMBENCH_TOKEN exported; rank 1 reaches rank 0's rendezvous
    through a relay (COMMBENCH_ROOT redirected to it) that forwards the handshake and edits rank 1's
    frames with ``up``."""
    import os
    import subprocess
    import sys

    from conftest import Relay, free_port

    port = free_port()
    relay = Relay(port, up)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "COMMBENCH_", "OMPI_", "PMI_"))}
    env.update(SLURM_JOB_ID="5151", SLURM_STEP_ID="0", SLURM_NTASKS="2", SLURM_STEP_NODELIST="localhost",
               COMMBENCH_TOKEN="ab" * 16)
    roots = {0: f"127.0.0.1:{port}", 1: f"127.0.0.1:{relay.port}"}
    ranks = [subprocess.Popen([sys.executable, "-m", "commbench", "p2p-latency", "-m", "8:64", "-i", "300",
                               "--timeout", "20", "-o", str(tmp_path / "out.jsonl")],
                              env={**env, "SLURM_PROCID": str(r), "COMMBENCH_ROOT": roots[r]},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in (0, 1)]
    outs = [r.communicate(timeout=120) for r in ranks]
    relay.close()
    return [(r.returncode, *o) for r, o in zip(ranks, outs, strict=True)]


def test_a_relay_on_the_path_forwards_but_cannot_inject_or_alter(tmp_path):
    """A relay that only forwards: the run completes. One that injects an ABORT {"code": 0} after
    rank 1's first sealed frame (once it ended the run with exit 0, no rows and no word), or rewrites
    a host name in rank 1's frames (once it reached the results file): refused, named in one line,
    non-zero exit, and nothing of it in the results."""
    from commbench.core.run.framing import TAG, encode
    from commbench.core.run.rendezvous import ABORT

    got = _ranks_behind_a_relay(tmp_path, lambda n, frame: frame)
    assert [g[0] for g in got] == [0, 0], got
    assert len([ln for ln in got[0][1].splitlines() if ln and not ln.startswith("#")]) == 4

    def inject(n, frame):
        return frame + encode(ABORT, {"message": "all done", "code": 0}) + bytes(TAG) if n == 1 else frame

    got = _ranks_behind_a_relay(tmp_path, inject)
    assert got[0][0] not in (0, None) and got[1][0] != 0, got
    said = got[0][2].splitlines()
    assert len(said) == 1 and "the connection of rank 1 on host" in said[0] and "was tampered with" in said[0], said

    me = socket.gethostname().encode()

    def alter(n, frame):  # the host rank 1 reports of itself
        return frame.replace(b'"' + me + b'"', b'"EVILHOST<b>"') if n >= 1 else frame

    got = _ranks_behind_a_relay(tmp_path, alter)
    assert got[0][0] != 0 and "tampered with" in got[0][2], got
    out = tmp_path / "out.jsonl"
    assert not out.exists() or "EVILHOST" not in out.read_text()
