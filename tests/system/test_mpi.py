"""The mpi transport and mpirun launch, with the pip Open MPI wheel, as root too."""

from pathlib import Path

import pytest
from conftest import BIN, mpi_env, mpiexec, table_rows

from commbench.core.output.results import read_runs

pytest.importorskip("mpi4py")


@pytest.mark.parametrize("mode", ["buffer", "pickle"])
@pytest.mark.parametrize("bench", ["p2p-latency", "p2p-bandwidth", "p2p-bibw"])
def test_mpi_transport_validated(mode, bench):
    extra = [] if bench == "p2p-latency" else ["-W", "8"]
    r = mpiexec(2, bench, "-t", "mpi", "--mpi-mode", mode, "-m", "0,1,4K,1M", "-i", "20", "-x", "2",
                "--validate", *extra)
    assert r.code == 0, r.err
    assert [row[0] for row in table_rows(r.out)] == ["0", "1", "4096", "1048576"]
    assert all(row[-1] == "0" for row in table_rows(r.out))
    assert f"mpi ({'pickle' if mode == 'pickle' else 'buffer'}, MPI progress (busy-poll))" in r.out


def test_mpi_iovec_payload_and_corruption():
    ok = mpiexec(2, "p2p-latency", "-t", "mpi", "--payload", "skew", "--buffers", "7", "-i", "20", "--validate")
    assert ok.code == 0, ok.err
    bad = mpiexec(2, "p2p-latency", "-t", "mpi", "-m", "1K:1K", "-i", "20", "-x", "0", "--validate",
                  "--inject-corruption", "4")
    assert bad.code == 1 and table_rows(bad.out)[0][-1] == "10", bad.out + bad.err  # 20 each way, every 4th


@pytest.mark.parametrize("transport", ["tcp", "grpc"])
def test_other_transports_under_mpiexec(transport):
    """Under mpirun no hosts are named: rank 0 sends the rendezvous address through MPI."""
    r = mpiexec(2, "p2p-latency", "-t", transport, "-m", "8,64K", "-i", "50", "--validate")
    assert r.code == 0, r.err
    assert len(table_rows(r.out)) == 2 and "ranks: 2" in r.out


def test_mpiexec_wrong_rank_count():
    r = mpiexec(3, "p2p-latency", "-t", "mpi", "-m", "8:8")
    assert r.code != 0
    assert "p2p-latency needs 2 ranks but the launcher started 3" in r.err


def test_pairs_under_mpiexec():
    r = mpiexec(4, "p2p-bandwidth", "-t", "mpi", "--pairs", "2", "-m", "64K:64K", "-i", "5", "-W", "8")
    assert r.code == 0, r.err
    assert table_rows(r.out)[0][3] == "2"


@pytest.mark.slow
def test_stopped_peer_inside_mpi_recv():
    """Rank 0 blocks in MPI_Recv, where no Python runs; its watchdog gives up on the stopped rank 1."""
    import signal
    import subprocess
    import tempfile
    import time

    import psutil

    tmp = Path(tempfile.mkdtemp())
    out = tmp / "r.jsonl"
    p = subprocess.Popen([str(BIN / "mpiexec"), "-n", "2", str(BIN / "commbench"), "p2p-latency", "-t", "mpi",
                          "-m", "0:4M", "-i", "100000", "--timeout", "4", "-o", str(out)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=mpi_env(tmp))
    victim = None
    deadline = time.monotonic() + 30
    while victim is None and time.monotonic() < deadline:
        for proc in psutil.process_iter():
            try:
                if proc.environ().get("OMPI_COMM_WORLD_RANK") == "1" and "p2p-latency" in proc.cmdline() \
                        and proc.environ().get("TMPDIR") == str(tmp):
                    victim = proc
            except psutil.Error:
                pass
        time.sleep(0.2)
    if victim is None:
        p.kill()
        out, err = p.communicate()
        raise AssertionError(f"rank 1 never appeared; mpiexec exit {p.returncode}, said: {out[-1000:]}{err[-2000:]}")
    while not (out.exists() and '"row"' in out.read_text()):  # measuring, so rank 0 sits in MPI calls
        assert time.monotonic() < deadline + 30 and p.poll() is None
        time.sleep(0.05)
    victim.send_signal(signal.SIGSTOP)
    t0 = time.monotonic()
    try:
        _, err = p.communicate(timeout=60)
    finally:
        victim.kill()
        p.kill()
    elapsed = time.monotonic() - t0
    assert p.returncode != 0
    assert "rank 0 on host" in err and "rank 1 on host" in err and "stopped responding" in err, err
    assert elapsed < 4 + 2 + 6, elapsed  # timeout + the watchdog's grace + start-up


@pytest.mark.parametrize("algorithm", ["native", "ring", "recursive-doubling"])
def test_allreduce_over_mpi(algorithm):
    r = mpiexec(4, "allreduce", "-t", "mpi", "-a", algorithm, "-b", "4", "-e", "1M", "-f", "32", "-i", "5",
                "--validate")
    assert r.code == 0, r.err
    rows = table_rows(r.out)
    assert [row[1] for row in rows] == ["1", "32", "1024", "32768"] and all(row[-1] == "0" for row in rows)


@pytest.mark.parametrize("args", [["--rpc", "packed", "--mode", "async", "--ps", "2"], ["--ps", "1"]],
                         ids=["packed-async", "tf"])
def test_ps_over_mpi_threads(args):
    """Async shards (and every rank of the default --rpc tf: a chief, 2 workers, a shard) serve each
    peer from a thread: MPI from several threads at once."""
    r = mpiexec(4, "ps-throughput", "-t", "mpi", "--workers", "2", *args, "--payload", "mobilenet_v2", "-i", "5",
                "--validate")
    assert r.code == 0, r.err
    assert table_rows(r.out)[0][-1] == "0"


@pytest.mark.parametrize("wireup", ["pmix", "mpi"])
def test_bootstrap_gives_up_on_a_late_rank(tmp_path, wireup):
    """Rank 1 starts 30 s late: rank 0, inside PMIx's fence or MPI_Init/MPI_Bcast, gives up after --timeout."""
    import subprocess
    import time

    script = (f'[ "$OMPI_COMM_WORLD_RANK" = 1 ] && sleep 30; '
              f'exec {BIN / "commbench"} p2p-latency -t tcp -m 8:8 --timeout 3')
    t0 = time.monotonic()
    p = subprocess.Popen([str(BIN / "mpiexec"), "-n", "2", "sh", "-c", script], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True, env={**mpi_env(tmp_path), "COMMBENCH_WIREUP": wireup})
    try:
        line = ""
        while "wire-up did not finish" not in line:  # rank 0's line, timed as it arrives (mpiexec outlives it)
            line = p.stderr.readline()
            assert line, "stderr closed without rank 0's message"
        elapsed = time.monotonic() - t0
    finally:
        p.terminate()  # mpiexec removes its session directory on SIGTERM, not on SIGKILL
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    assert not list(tmp_path.glob("ompi.*")), "mpiexec left its session directory behind"
    assert "rank 0 on host" in line and "did not finish within 3 s" in line, line
    assert elapsed < 20, elapsed


@pytest.mark.parametrize("wireup, via", [(None, "pmix"), ("mpi", "mpi"), ("store", "store")])
@pytest.mark.parametrize("transport", ["tcp", "mpi"])
def test_wireup_under_mpiexec(tmp_path, transport, wireup, via):
    """mpirun's PMIx server carries the ranks' wire-up, so rank 0's store answers no request before
    the run starts; MPI does where asked (as under an mpirun without PMIx); the store's own all-gather
    is the comparison."""
    import subprocess

    out = tmp_path / "r.jsonl"
    env = {**mpi_env(tmp_path), **({"COMMBENCH_WIREUP": wireup} if wireup else {})}
    p = subprocess.run([str(BIN / "mpiexec"), "--oversubscribe", "-n", "3", str(BIN / "commbench"), "cluster",
                        "-t", transport, "--tests", "pairwise", "--bw-time", "0.05", "-i", "20", "-o", str(out)],
                       capture_output=True, text=True, timeout=180, env=env)
    assert p.returncode == 0, p.stderr
    (run,) = read_runs(out)
    w = run.meta["wireup"]
    assert w["via"] == via and w["seconds"] > 0, w
    assert (w["store_requests"] == 0) == (via != "store"), w  # the store's all-gather: a SET and a GET per rank
    assert len([x for x in run.rows if x["test"] == "pairwise"]) == 3


def test_local_mpi_launch_ignores_stale_session_directories(tmp_path):
    """Killed mpiexecs leave $TMPDIR/ompi.<pid> with PMIx rendezvous files; one for every pid the next
    mpiexec could get must not stop commbench's own mpiexec (it did: "The PMIx server's listener thread
    failed to start", exit 213, when CI's pids wrapped onto such a leftover)."""
    import socket

    from conftest import commbench

    host = socket.gethostname()
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    last = int(Path("/proc/sys/kernel/ns_last_pid").read_text())
    for k in range(1, 3001):  # the pids the next processes get, wrapping as the kernel does
        pid = last + k if last + k < pid_max else last + k - pid_max + 300
        session = tmp_path / f"ompi.{pid}"
        session.mkdir(exist_ok=True)
        (session / f"pmix.{host}.tool.{pid}").write_text(f"prterun-{host}-{pid}@0.0;tcp4://127.0.0.1:1\n")
    r = commbench("p2p-latency", "-t", "mpi", "-m", "8:8", "-i", "20", env={"TMPDIR": str(tmp_path)})
    assert r.code == 0, r.err
    assert [row[0] for row in table_rows(r.out)] == ["8"]
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("ompi.")) == [], \
        "the launcher's temporary directory was left behind"


def test_mpi_without_a_launcher_starts_mpiexec(tmp_path):
    """`commbench ... -t mpi` on its own starts its ranks under the wheel's mpiexec, as compare does."""
    from conftest import commbench

    r = commbench("p2p-latency", "-t", "mpi", "-m", "8,1K", "-i", "50")
    assert r.code == 0, r.err
    assert [row[0] for row in table_rows(r.out)] == ["8", "1024"] and "transport: mpi" in r.out
    r = commbench("allreduce", "-t", "mpi", "-a", "native", "--ranks", "3", "-b", "4K", "-e", "4K", "-i", "5",
                  "--validate")
    assert r.code == 0, r.err
    assert [row[5] for row in table_rows(r.out)] == ["native"] and table_rows(r.out)[0][-1] == "0"


def test_compare_runs_the_mpi_configuration():
    """The main job's mpi configurations start under the wheel's mpiexec and reach the summary."""
    from conftest import commbench

    r = commbench("compare", "--only", "mpi buffer")
    assert r.code == 0, r.err
    summary = r.out[r.out.index("# commbench compare"):]
    row = next(line.split() for line in summary.splitlines() if line.startswith("mpi buffer"))
    assert float(row[2]) > 0 and float(row[4]) > 0  # latency at 8 B, bandwidth at 4 MiB
