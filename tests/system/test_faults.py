"""Faults: a dead or hung peer ends the run on every rank within --timeout, naming the rank and
host, keeping every row measured so far; stray connections are refused and the run goes on."""

import contextlib
import signal
import socket
import threading
import time

import psutil
import pytest
from conftest import commbench, free_port, grpc_cpp, spawn, srun_ranks, table_rows

from commbench.core.config.run import CommonOptions, RunConfig
from commbench.core.output.results import read_runs
from commbench.core.run import auth
from commbench.core.run.framing import encode, read_frame
from commbench.core.run.placement import Placement
from commbench.core.run.world import World
from commbench.transports._net import SocketOptions
from commbench.transports.tcp import TcpTransport

HOST = socket.gethostname()


def rank_pids(launcher) -> dict[int, int]:
    """The launcher's rank processes, by rank (read from their environment)."""
    deadline = time.monotonic() + 90  # returns once both are; a busy emulated-CPU guest takes tens of s
    while time.monotonic() < deadline:
        ranks = {}
        for child in psutil.Process(launcher.pid).children():
            with contextlib.suppress(KeyError, psutil.Error):
                ranks[int(child.environ()["COMMBENCH_RANK"])] = child.pid
        if len(ranks) == 2:
            return ranks
        time.sleep(0.05)
    raise AssertionError("ranks did not start")


def wait_rows(path, n, launcher, limit=60):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().count('"type": "row"') >= n:
            return
        assert launcher.poll() is None, launcher.communicate()
        time.sleep(0.05)
    raise AssertionError(f"fewer than {n} rows after {limit} s")


@pytest.mark.slow
@pytest.mark.parametrize("transport", [["-t", "tcp"], ["-t", "grpc"], ["-t", "grpc", "--grpc-call", "unary"],
                                       grpc_cpp(), grpc_cpp("--grpc-call", "unary")])
@pytest.mark.parametrize("victim", [1, 0])
def test_killed_peer(tmp_path, transport, victim):
    out = tmp_path / "r.jsonl"
    timeout = 8
    launcher = spawn("p2p-latency", *transport, "-m", "0:4M", "-i", "400", "-x", "10", "--timeout", str(timeout),
                     "-o", str(out))
    pids = rank_pids(launcher)
    wait_rows(out, 3, launcher)
    psutil.Process(pids[victim]).send_signal(signal.SIGKILL)
    t0 = time.monotonic()
    stdout, stderr = launcher.communicate(timeout=timeout + 30)
    elapsed = time.monotonic() - t0
    assert launcher.returncode != 0
    assert elapsed < timeout + 3, elapsed
    survivor = 1 - victim
    assert f"rank {survivor} on host {HOST}: rank {victim} on host {HOST}" in stderr or \
        f"rank {survivor} on host {HOST}: lost the rendezvous" in stderr, stderr
    assert f"rank {victim} (pid {pids[victim]}) was killed by SIGKILL" in stderr
    assert "Traceback" not in stderr
    rows = read_runs(out)[0].rows
    assert len(rows) >= 3
    printed = [line for line in stdout.splitlines() if not line.startswith("#")]
    assert len(rows) - 1 <= len(printed) <= len(rows)  # every printed row is in the file (written first)


def test_a_rank_that_crashes_says_where_it_was(tmp_path):
    """A rank dying of a fatal signal (a segfault in a transport's C library) leaves the Python stack it
    died in on stderr (faulthandler), and the launcher names the rank and the signal."""
    out = tmp_path / "r.jsonl"
    launcher = spawn("p2p-latency", "-m", "0:4M", "-i", "400", "-x", "10", "--timeout", "8", "-o", str(out))
    pids = rank_pids(launcher)
    wait_rows(out, 2, launcher)
    psutil.Process(pids[1]).send_signal(signal.SIGSEGV)
    _, stderr = launcher.communicate(timeout=40)
    assert launcher.returncode != 0
    assert "Fatal Python error: Segmentation fault" in stderr, stderr
    assert "(most recent call first)" in stderr and 'File "' in stderr, stderr
    assert f"rank 1 (pid {pids[1]}) was killed by SIGSEGV" in stderr, stderr


@pytest.mark.slow
@pytest.mark.parametrize("transport", [["-t", "tcp"], ["-t", "grpc"], grpc_cpp()])
def test_hung_peer(tmp_path, transport):
    out = tmp_path / "r.jsonl"
    timeout = 3
    launcher = spawn("p2p-latency", *transport, "-m", "0:4M", "-i", "400", "-x", "10",
                     "--timeout", str(timeout), "-o", str(out))
    pids = rank_pids(launcher)
    wait_rows(out, 2, launcher)
    psutil.Process(pids[1]).send_signal(signal.SIGSTOP)
    t0 = time.monotonic()
    _, stderr = launcher.communicate(timeout=4 * timeout + 30)
    elapsed = time.monotonic() - t0
    assert launcher.returncode != 0
    assert f"rank 0 on host {HOST}:" in stderr and f"rank 1 on host {HOST}" in stderr, stderr
    # rank 0 gives up by itself (its own timeout, or its watchdog), or the launcher kills the stopped
    # rank after --timeout + 1 s and rank 0 reports its death
    killed = f"rank 1 (pid {pids[1]}) has been stopped for more than --timeout 3 s; killing it" in stderr
    assert any(s in stderr for s in ("timed out after 3 s", "sent nothing within 3 s", "stopped calling",
                                     "did not answer within 3 s", "stopped responding (no heartbeat")) or \
        killed and any(s in stderr for s in ("left the run", "unreachable", "closed the connection")), stderr
    assert "still running after another rank failed; killing it" in stderr or killed, stderr
    assert elapsed < 2 * timeout + 6, elapsed  # rank 0 within its timeout; the stopped rank killed after it
    assert len(read_runs(out)[0].rows) >= 2


def test_strays_at_the_rendezvous_are_refused():
    port = free_port()
    launcher = spawn("p2p-latency", "-m", "0:64K", "-i", "1500", "-x", "10", "--port", str(port))
    time.sleep(0.3)
    strays = []
    for payload in (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",  # garbage
                    encode(1, {"token": "not-the-token", "rank": 1, "size": 2, "host": "evil"}),  # wrong token
                    b"CBv1\x01\xff\xff\xff\x7f\x00\x00\x00\x00"):  # a frame claiming 2 GiB of JSON
        for _ in range(50):
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=2)
                break
            except OSError:
                time.sleep(0.05)
        s.sendall(payload)
        strays.append(s)
    silent = socket.create_connection(("127.0.0.1", port), timeout=2)  # says nothing at all
    stdout, stderr = launcher.communicate(timeout=120)
    for s in (*strays, silent):
        s.close()
    assert launcher.returncode == 0, stderr
    assert stderr.count("refused a connection") >= 3, stderr
    assert "no proof of the run token" in stderr and "not a commbench peer" in stderr
    assert len([line for line in stdout.splitlines() if not line.startswith("#")]) == 18  # 0 .. 64K


def test_strays_at_a_data_port_are_refused():
    """Two ranks in threads of this process; before rank 0 dials rank 1's tcp port, 20 strangers connect
    to it and trickle half a header or nothing, and one shows a wrong token: the listener reads them
    all at once (core/run/gate.py), so rank 0's connection is taken at once, not after 21 x HELLO_TIMEOUT."""
    from commbench.core.run.gate import HELLO_TIMEOUT

    port = free_port()
    listener = socket.socket()
    listener.bind(("127.0.0.1", port))
    listener.listen()
    listen_fd = listener.detach()  # rank 0's World owns it from here, as under the launcher (one owner per fd)
    token = "t" * 32
    config = RunConfig(CommonOptions(timeout=30.0, port=port), 2, net=SocketOptions())
    links, errors, done = {}, [], {}

    class SlowDial(TcpTransport):  # rank 0 dials late, so the strays are first in rank 1's accept queue
        def _dial(self, addr, peer, deadline):
            time.sleep(1.0)
            return super()._dial(addr, peer, deadline)

    def rank(r):
        try:
            p = Placement(r, 2, "127.0.0.1", port, token, "local", listen_fd if r == 0 else None)
            w = World(p, 30.0)
            t = (SlowDial if r == 0 else TcpTransport)(w, config)
            links[r] = (w, t, t.connect([1 - r]))
            done[r] = time.monotonic()
        except Exception as exc:  # reported below
            errors.append(exc)

    t0 = threading.Thread(target=rank, args=(0,))
    t0.start()
    t1 = threading.Thread(target=rank, args=(1,))
    t1.start()
    deadline = time.monotonic() + 10
    while True:  # rank r's data port is port + 1 + r
        try:
            stray = socket.create_connection(("127.0.0.1", port + 2), timeout=1)
            break
        except OSError:
            assert time.monotonic() < deadline, errors
            time.sleep(0.02)
    silent = [socket.create_connection(("127.0.0.1", port + 2), timeout=1) for _ in range(20)]
    for s in silent[:10]:
        s.send(b"CBv1")  # a third of a header, then nothing
    stray.sendall(encode(1, {"token": "wrong", "rank": 1}))
    started = time.monotonic()
    t0.join(60)
    t1.join(60)
    assert not errors, errors
    assert done[1] - started < HELLO_TIMEOUT, done[1] - started  # not held up by the silent ones
    stray.settimeout(10)
    greeting = read_frame(stray, 4096, 0)  # the gate's challenge, then nothing but the close
    assert greeting[0] == auth.CHALLENGE and stray.recv(1) == b""  # the stray was closed
    from commbench.core.measure.message import Message

    a, b = Message((5, 1000)), Message((5, 1000))
    a.arrays[1][:] = 7
    links[0][2][1].send(a)
    links[1][2][0].recv_into(b)
    assert (b.arrays[1] == 7).all()
    for r in (1, 0):
        links[r][1].close()
        links[r][0].close()
    for s in (stray, *silent):
        s.close()


def _port_below_ephemeral(n: int) -> int:
    """A port P with P .. P + n - 1 free, below the kernel's ephemeral range (so no outgoing socket of
    this machine can take one as its source port meanwhile)."""
    low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
    for p in range(low - 2000, low - n, 7):
        try:
            socks = [socket.create_server(("127.0.0.1", q)) for q in range(p, p + n)]
        except OSError:
            continue
        for s in socks:
            s.close()
        return p
    raise AssertionError("no free ports below the ephemeral range")


@contextlib.contextmanager
def explained(launcher):
    """A failed check inside says what the run itself printed (it may have died first)."""
    try:
        yield
    except AssertionError as exc:
        launcher.kill()
        try:
            out, err = launcher.communicate(timeout=30)
        except (ValueError, OSError):  # already read to the end by the check itself
            out, err = "", ""
        said = f"{out or ''}"[-1500:] + f"{err or ''}"[-2500:]
        raise AssertionError(f"{exc}\nthe run (exit {launcher.returncode}) said:\n{said}") from None


def _connect(port: int) -> socket.socket:
    for _ in range(200):
        try:
            return socket.create_connection(("127.0.0.1", port), timeout=5)
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"nothing listens on {port}")


def _closed_by_peer(s: socket.socket, within: float) -> bool:
    """True if the other end closes s within the time (whatever it says first, e.g. 'busy')."""
    deadline = time.monotonic() + within
    try:
        while (left := deadline - time.monotonic()) > 0:
            s.settimeout(left)
            if s.recv(4096) == b"":
                return True
    except ConnectionResetError:
        return True
    except OSError:
        return False
    return False


@pytest.mark.slow
def test_rendezvous_bounds_strangers_before_the_token():
    """Before a connection shows the run token rank 0 reads at most HELLO_MAX_JSON for it, gives it at
    most HELLO_TIMEOUT in all however its bytes trickle, holds at most MAX_UNPROVEN at once (the rest
    are told 'busy' and closed) and starts no thread for it (one selector reads them all): during a
    live run, 20 frames claiming 2 GiB, 50 slowloris connections and 1,000 idle ones leave the run
    unharmed, rank 0 under RSS_BOUND and THREAD_BOUND threads."""
    from commbench.core.run.gate import HELLO_MAX_JSON, HELLO_TIMEOUT, MAX_UNPROVEN

    rss_bound, thread_bound = 300 << 20, 24
    port = _port_below_ephemeral(3)  # our stranger sockets take ephemeral source ports: keep P + 1 + r off them
    launcher = spawn("p2p-latency", "-m", "8,64K", "--time", "10", "--warmup-time", "0.2", "--port", str(port),
                     "--timeout", "30")
    with explained(launcher):
        wait_for_listener(port)
        rank0 = next(c.pid for c in psutil.net_connections("tcp") if c.laddr and c.laddr.port == port
                     and c.status == psutil.CONN_LISTEN)
        time.sleep(2)  # the ranks have joined: the run is live
        big = [_connect(port) for _ in range(20)]
        for s in big:  # a header claiming 2 GiB of JSON
            s.sendall(b"CBv1\x01" + (2 << 30).to_bytes(4, "little") + bytes(4))
        over = _connect(port)  # JSON just over the pre-token limit
        over.sendall(b"CBv1\x01" + (HELLO_MAX_JSON + 1).to_bytes(4, "little") + bytes(4))
        assert _closed_by_peer(over, 2) and all(_closed_by_peer(s, 2) for s in big), "oversized frames were read"
        stop, t0, closed_after = threading.Event(), time.monotonic(), []
        slow = [_connect(port) for _ in range(50)]

        def drip() -> None:  # one byte per connection every 0.5 s: never a whole hello in time
            for byte in b"CBv1\x01\x10\x00\x00\x00\x00\x00\x00":
                for s in slow:
                    with contextlib.suppress(OSError):
                        s.send(bytes([byte]))
                if stop.wait(0.5):
                    return

        dripper = threading.Thread(target=drip)
        dripper.start()
        idle = [_connect(port) for _ in range(1000)]
        peak_threads, peak_rss = 0, 0
        for _ in range(20):
            proc = psutil.Process(rank0)
            peak_threads = max(peak_threads, proc.num_threads())
            peak_rss = max(peak_rss, proc.memory_info().rss)
            time.sleep(0.1)
        if _closed_by_peer(slow[0], 2 * HELLO_TIMEOUT):
            closed_after.append(time.monotonic() - t0)
        closed_idle = sum(_closed_by_peer(s, 2 * HELLO_TIMEOUT) for s in idle)
        stop.set()
        dripper.join(30)
        stdout, stderr = launcher.communicate(timeout=180)
        for s in (*big, over, *idle, *slow):
            s.close()
        print(f"rank 0 under the flood: at most {peak_threads} threads, {peak_rss >> 20} MiB RSS; "
              f"slowloris closed after {closed_after} s")
        assert launcher.returncode == 0, stderr
        assert [line.split()[0] for line in stdout.splitlines() if not line.startswith("#")] == ["8", "65536"]
        assert closed_after and closed_after[0] < HELLO_TIMEOUT + 2, closed_after
        assert closed_idle == 1000  # those over MAX_UNPROVEN at once, and the rest after HELLO_TIMEOUT
        assert peak_threads <= thread_bound and peak_rss < rss_bound, (peak_threads, peak_rss)
        assert f"more than {MAX_UNPROVEN} connections without the run token" in stderr
        assert "frame too large" in stderr


@pytest.mark.slow
def test_a_start_up_flood_does_not_keep_the_ranks_out():
    """A flooder that holds 400 connections to the rendezvous and both data ports from before the run
    starts, re-opening at once whatever is closed (so the gates' MAX_UNPROVEN slots stay full), does not
    keep the ranks out: a new connection over the cap evicts the oldest unproven one, and a rank proves
    itself within a round trip. The run completes; its wall time with and without the flood is printed."""
    import subprocess
    import sys
    from pathlib import Path

    port = _port_below_ephemeral(3)  # flood sockets take ephemeral source ports: keep P + 1 + r off them
    run = ("p2p-latency", "-m", "8,64K", "-i", "200", "-x", "20", "--port", str(port), "--timeout", "30")
    t0 = time.monotonic()
    quiet = commbench(*run)
    alone = time.monotonic() - t0
    assert quiet.code == 0, quiet.err
    flooder = subprocess.Popen([sys.executable, str(Path(__file__).parent.parent / "flooder.py"), "400",
                                str(port), str(port + 1), str(port + 2)], stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(0.5)  # flooding before anything listens, as from the moment the run starts
        t0 = time.monotonic()
        flooded = commbench(*run, timeout=120)
        under = time.monotonic() - t0
    finally:
        flooder.terminate()
        opened, greeted = map(int, flooder.communicate(timeout=30)[0].split())
    print(f"start-up flood: run {alone:.1f} s alone, {under:.1f} s under 400 re-opening connections "
          f"({opened} opened, {greeted} frames read by the flooder)")
    assert flooded.code == 0, flooded.err
    assert [r[0] for r in table_rows(flooded.out)] == ["8", "65536"]
    assert opened > 2 * 400, "the flood never re-opened: the slots were not contested"
    assert "connections without the run token; the oldest goes" in flooded.err


def wait_for_listener(port: int) -> None:
    deadline = time.monotonic() + 30
    while not any(c.laddr and c.laddr.port == port and c.status == psutil.CONN_LISTEN
                  for c in psutil.net_connections("tcp")):
        assert time.monotonic() < deadline, f"nothing listens on {port}"
        time.sleep(0.05)


@pytest.mark.parametrize("transport", [["-t", "grpc"], grpc_cpp(), grpc_cpp("--grpc-call", "unary")])
def test_stray_grpc_calls_are_refused(transport):
    """A gRPC client without the run token gets UNIMPLEMENTED from a rank's data port; garbage bytes get
    the connection closed; the run goes on and every row arrives."""
    import grpc

    port = _port_below_ephemeral(3)
    launcher = spawn("p2p-latency", *transport, "-m", "0:64K", "-i", "1500", "-x", "10", "--port", str(port))
    target = f"127.0.0.1:{port + 1}"  # rank 0's data port
    codes = []
    # the channel dials at once; a refused dial backs off (1 s, x1.6 each time): on a loaded machine the
    # rank's port opened later than the backoff retried, after the run had ended. Dial when it listens,
    # and retry quickly
    with explained(launcher):
        wait_for_listener(port + 1)
    fast = [("grpc.initial_reconnect_backoff_ms", 100), ("grpc.max_reconnect_backoff_ms", 500)]
    with grpc.insecure_channel(target, options=fast) as ch, explained(launcher):
        try:
            grpc.channel_ready_future(ch).result(timeout=60)
        except grpc.FutureTimeoutError:
            raise AssertionError(f"rank 0's data port {target} did not accept a gRPC channel within 60 s") from None
        for path in ("/cbnot-the-token/Exchange1", "/cbnot-the-token/DeliverStream1", "/x.Y/Z"):
            try:
                ch.unary_unary(path)(b"stray", timeout=5)
            except grpc.RpcError as exc:
                codes.append(exc.code())
    garbage = _connect(port + 1)
    garbage.sendall(b"GET / HTTP/1.1\r\n\r\n" * 100)
    stdout, stderr = launcher.communicate(timeout=180)
    garbage.close()
    assert launcher.returncode == 0, stderr
    assert codes == [grpc.StatusCode.UNIMPLEMENTED] * 3
    assert len([line for line in stdout.splitlines() if not line.startswith("#")]) == 18  # 0 .. 64K


def forged_deliver(mode: str, seq: int, body: bytes) -> bytes:
    """A one-way message as a rank's grpc transport sends it (a sequence number, then the bytes)."""
    if mode == "proto":
        from commbench.transports._proto import commbench_pb2

        return commbench_pb2.Buffers(seq=seq, buffers=[body]).SerializeToString()
    return seq.to_bytes(8, "little") + body


@pytest.mark.parametrize("transport", [["-t", "grpc", "--grpc-call", "unary"], ["-t", "grpc", "--grpc-mode", "proto"],
                                       grpc_cpp("--grpc-call", "unary"), grpc_cpp()])
def test_forged_grpc_calls_are_bounded_and_end_the_run_as_tampering(transport):
    """Someone who learnt a run's gRPC method names (here: from the token in a rank's environment) calls
    rank 0 as rank 1: 100 messages of 1 MiB in an 8-byte run are refused by gRPC itself (rank 0 holds
    none of them), and a message numbered far ahead ends the run naming the tampering, not rank 1."""
    import grpc

    port = _port_below_ephemeral(3)
    launcher = spawn("p2p-latency", *transport, "-m", "8", "--time", "60", "--port", str(port),
                     "--timeout", "20")
    pids = rank_pids(launcher)
    service = "cb" + auth.derived(psutil.Process(pids[0]).environ()["COMMBENCH_TOKEN"], "grpc")
    mode = "proto" if "proto" in transport else "raw"
    with explained(launcher):
        wait_for_listener(port + 1)
        time.sleep(1)  # measuring by now
        rank0 = psutil.Process(pids[0])
        before = rank0.memory_info().rss
        with grpc.insecure_channel(f"127.0.0.1:{port + 1}") as ch:
            deliver = ch.unary_unary(f"/{service}/Deliver1")
            codes = []
            for k in range(100):
                try:
                    deliver(forged_deliver(mode, 10**12 + k, b"\0" * (1 << 20)), timeout=10)
                except grpc.RpcError as exc:
                    codes.append(exc.code())
            grew = rank0.memory_info().rss - before
            try:
                deliver(forged_deliver(mode, 10**12, b"\0" * 8), timeout=10)
                far = grpc.StatusCode.OK
            except grpc.RpcError as exc:
                far = exc.code()
    out, err = launcher.communicate(timeout=60)
    print(f"rank 0 grew {grew / 1e6:.1f} MB over 100 forged calls of 1 MiB; the run said: {err.strip()}")
    assert set(codes) == {grpc.StatusCode.RESOURCE_EXHAUSTED} and len(codes) == 100
    assert grew < 50e6
    assert far == grpc.StatusCode.INVALID_ARGUMENT
    assert launcher.returncode != 0
    assert "tampering" in err and "numbered 1000000000000, more than" in err, err
    assert "Traceback" not in err


@pytest.mark.slow
@pytest.mark.parametrize("victim", [1, 0])
def test_a_stopped_rank_under_mpiexec_ends_the_run_within_the_timeout(tmp_path, victim):
    """Under mpiexec (no commbench launcher watching /proc) a stopped rank, rank 0 (which serves the
    rendezvous) or not: the survivor names it and exits within --timeout + 2 s without MPI_Finalize
    (which waited for the stopped rank forever), and mpiexec ends the job."""
    from conftest import BIN, mpi_env, signal_a_rank

    out = tmp_path / "r.jsonl"
    took, r, out_s = signal_a_rank([str(BIN / "mpiexec"), "-n", "2", str(BIN / "commbench"), "p2p-latency", "-m", "8:8",
                             "-i", "10000000", "--timeout", "5", "-o", str(out)], mpi_env(tmp_path), victim,
                            signal.SIGSTOP, out)
    print(f"the survivor was out {out_s:.1f} s and mpiexec ended {took:.1f} s after rank {victim} was stopped "
          "(--timeout 5)")
    assert r.code != 0 and f"rank {victim} " in r.err, r.err
    assert out_s < 5 + 2, r.err  # what the ranks promise; mpiexec's own teardown comes after (8.2 s once, loaded)
    assert took < 5 + 2 + 3, r.err


@pytest.mark.slow
def test_stopped_rank_ends_the_run_within_the_timeout():
    """A rank stopped (SIGSTOP) mid-run: the launcher ends within --timeout + 2 s of the stop, kills what
    is left, names the stopped rank and exits non-zero."""
    launcher = spawn("p2p-latency", "-m", "8:8", "-i", "10000000", "--timeout", "6")
    pids = rank_pids(launcher)
    time.sleep(3)  # measuring by now
    stopped_at = time.monotonic()
    psutil.Process(pids[1]).suspend()
    try:
        _, stderr = launcher.communicate(timeout=60)
        took = time.monotonic() - stopped_at
    finally:
        with contextlib.suppress(psutil.Error):
            psutil.Process(pids[1]).kill()
    assert launcher.returncode != 0
    assert took < 6 + 2, (took, stderr)
    assert "rank 1" in stderr, stderr
    assert not [p for p in pids.values() if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]


@pytest.mark.slow
def test_ranks_end_when_their_launcher_dies():
    launcher = spawn("p2p-latency", "-m", "8:8", "-i", "10000000", "--timeout", "60")
    pids = rank_pids(launcher)
    time.sleep(2)
    launcher.kill()
    launcher.wait()
    deadline = time.monotonic() + 5
    alive = list(pids.values())
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]
        time.sleep(0.1)
    assert not alive, f"ranks {alive} outlived their launcher"


def test_srun_token_is_random_and_the_old_derivation_is_refused(tmp_path):
    """Two ranks started as srun starts them (SLURM_* variables, no COMMBENCH_TOKEN): rank 0 makes a
    random token and hands it over in a 0600 file; a stranger who derives the token the way commbench
    once did (from the job's public ids) is refused and the run completes."""
    import hashlib
    import os
    import stat

    port = _port_below_ephemeral(3)
    tokens = tmp_path / "tokens"
    ranks, path = srun_ranks(4242, tokens, "p2p-latency", "-m", "8:8", "-i", "3000", "--port", str(port),
                             "--timeout", "30")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(tokens.stat().st_mode) == 0o700
    listening = {c.laddr.ip for c in psutil.net_connections("tcp") if c.laddr and c.laddr.port == port
                 and c.status == psutil.CONN_LISTEN}
    assert listening == {"127.0.0.1"}, listening  # the first node's address ("localhost"), not every interface
    old = hashlib.sha256(f"commbench:4242:0:{os.getuid()}:localhost".encode()).hexdigest()[:32]
    assert old != path.read_text().split()[0]
    s = _connect(port)
    s.sendall(encode(1, {"token": old, "rank": 1, "size": 2, "host": "evil"}))
    assert _closed_by_peer(s, 10)
    s.close()
    outs = [r.communicate(timeout=120) for r in ranks]
    assert [r.returncode for r in ranks] == [0, 0], outs
    assert "no proof of the run token" in outs[0][1]
    assert [line.split()[0] for line in outs[0][0].splitlines() if not line.startswith("#")] == ["8"]
    assert not path.exists()  # withdrawn at the end
