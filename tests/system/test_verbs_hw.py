"""On an RDMA device (hardware, or Soft-RoCE: launchers/rxe-guest.sh boots a guest with rxe0 and
.ci/run runs these there), through the CLI as users run it: RC SEND and RDMA WRITE with immediate,
busy and event completions, latency, bandwidth and bibw, skew and model payloads, --validate with a
corruption that is counted, a window larger than the receive pool (credits), two pairs at once,
ps-throughput and the all-reduce, a peer killed mid-run, and `commbench devices`. Elsewhere they
skip with pyverbs' reason, unless COMMBENCH_REQUIRE_RDMA=1 (the guest: a skip there would hide a
failure). Loops are short: under QEMU's software CPU a run takes most of a minute.

Run: .venv/bin/python -m pytest -m rdma   (COMMBENCH_IB_DEV=mlx5_0 / COMMBENCH_GID_INDEX=3 for RoCE;
in the rxe guest GID index 1 is the IPv4 one)
"""

from __future__ import annotations

import os
import re
import signal
import time

import psutil
import pytest
from conftest import ENV, commbench, spawn, table_rows

from commbench.core.output.results import read_runs


def _no_device_reason() -> str | None:
    try:
        from pyverbs.device import get_device_list
        from pyverbs.pyverbs_error import PyverbsError
    except ImportError as exc:
        return f"pyverbs is not importable: {exc}"
    try:
        return None if get_device_list() else "no RDMA device (empty device list)"
    except PyverbsError as exc:
        return f"no RDMA device: pyverbs says {exc}"


REASON = _no_device_reason()
REQUIRED = os.environ.get("COMMBENCH_REQUIRE_RDMA") == "1"
pytestmark = [pytest.mark.rdma, pytest.mark.skipif(REASON is not None and not REQUIRED, reason=REASON or "")]
DEV = [*(["--ib-dev", os.environ["COMMBENCH_IB_DEV"]] if "COMMBENCH_IB_DEV" in os.environ else []),
       *(["--gid-index", os.environ["COMMBENCH_GID_INDEX"]] if "COMMBENCH_GID_INDEX" in os.environ else [])]


def verbs(*args: str, code: int = 0, timeout: float = 600):
    r = commbench(*args, "-t", "verbs", *DEV, timeout=timeout)
    assert r.code == code, r.out + r.err
    return r


def test_device_is_listed_with_its_port():
    r = commbench("devices")
    assert r.code == 0, r.err
    rdma = r.out.split("RDMA devices:")[1].split("network interfaces:")[0]
    assert re.search(r"^  \w+$", rdma, re.M), rdma  # the device's name alone: no dangling colon
    assert re.search(r"port 1: ACTIVE, .*mtu \d+, lid \d+; GIDs: \[0\] [0-9a-f:]+", rdma), rdma


@pytest.mark.parametrize("op,poll", [("send", "busy"), ("write", "blocking")])
def test_latency(op, poll, tmp_path):
    out = tmp_path / "r.jsonl"
    r = verbs("p2p-latency", "--verbs-op", op, "--poll", poll, "-m", "8,64K,1M", "-i", "100", "-x", "10", "--validate",
              "-o", str(out))
    rows = table_rows(r.out)
    assert [row[0] for row in rows] == ["8", "65536", "1048576"] and all(row[-1] == "0" for row in rows)
    assert f"verbs ({op}," in r.out and ("busy-poll" if poll == "busy" else "events") in r.out
    # direct placement: large messages (nearly all: a request may leave before its advert lands) go
    # straight into the waiting receiver's buffers; small ones never do
    direct = {row["size"]: (row["received_direct"], row["received"]) for row in read_runs(out)[0].rows}
    assert direct[8] == (0, 220) and all(d >= 0.8 * n and n == 220 for d, n in (direct[65536], direct[1 << 20])), direct


@pytest.mark.parametrize("op,poll", [("write", "busy"), ("send", "blocking")])
@pytest.mark.parametrize("bench", ["p2p-bandwidth", "p2p-bibw"])
def test_bandwidth(bench, op, poll):
    r = verbs(bench, "--verbs-op", op, "--poll", poll, "-m", "64K,1M", "-i", "5", "-x", "1", "-W", "16", "--validate")
    rows = table_rows(r.out)
    assert len(rows) == 2 and all(float(row[4]) > 0 and row[-1] == "0" for row in rows)  # MB/s, #wrong


def test_window_larger_than_the_receive_pool():
    """4 receive slots of 256 KiB against a window of 64: the sender waits for credits, nothing is lost."""
    r = verbs("p2p-bandwidth", "-m", "256K:256K", "-W", "64", "-i", "3", "-x", "1", "--verbs-pool-mb", "1",
              "--validate")
    (row,) = table_rows(r.out)
    assert row[2] == "64" and float(row[4]) > 0 and row[-1] == "0"


@pytest.mark.parametrize("payload", ["skew", "small_cnn"])
def test_payloads(payload):
    r = verbs("p2p-latency", "--payload", payload, "-i", "50", "-x", "5", "--validate")
    assert all(row[-1] == "0" for row in table_rows(r.out))


def test_corruption_is_counted():
    r = verbs("p2p-latency", "-m", "1K,64K", "-i", "20", "-x", "0", "--validate", "--inject-corruption", "5", code=1)
    assert [row[-1] for row in table_rows(r.out)] == ["8", "8"]  # every 5th of 20, each way (64 KiB: placed directly)
    assert "differs from what was sent" in r.err


def test_two_pairs_at_once():
    r = verbs("p2p-bandwidth", "--pairs", "2", "-m", "64K:64K", "-i", "5", "-x", "1", "-W", "16", "--validate")
    (row,) = table_rows(r.out)
    assert row[3] == "2" and float(row[4]) > 0 and row[-1] == "0"
    cpus = len(os.sched_getaffinity(0))  # four ranks on fewer CPUs: a busy poll gives the CPU away
    assert (f"yielding when idle (4 ranks on {cpus} CPUs)" in r.out) == (cpus < 4), r.out


def test_ps_and_allreduce():
    r = verbs("ps-throughput", "--workers", "2", "--ps", "1", "--payload", "small_cnn", "-i", "5", "-x", "1",
              "--validate")
    assert table_rows(r.out)[0][-1] == "0"
    r = verbs("allreduce", "--ranks", "3", "-b", "1K", "-e", "64K", "-f", "64", "-i", "5", "--validate")
    assert [row[-1] for row in table_rows(r.out)] == ["0", "0"]


def test_killed_peer_is_named_within_the_timeout(tmp_path):
    from system.test_faults import HOST, rank_pids, wait_rows

    out, timeout = tmp_path / "r.jsonl", 20
    launcher = spawn("p2p-latency", "-t", "verbs", *DEV, "-m", "0:64K", "-i", "300", "-x", "10",
                     "--timeout", str(timeout), "-o", str(out))
    pids = rank_pids(launcher)
    wait_rows(out, 2, launcher, limit=300)
    psutil.Process(pids[1]).send_signal(signal.SIGKILL)
    t0 = time.monotonic()
    _, stderr = launcher.communicate(timeout=timeout + 60)
    elapsed = time.monotonic() - t0
    assert launcher.returncode != 0 and elapsed < timeout / 2, (elapsed, stderr)  # found dead, not timed out
    assert f"rank 0 on host {HOST}: " in stderr and f"rank 1 on host {HOST}" in stderr, stderr
    assert "rank 1 (pid" in stderr and "killed by SIGKILL" in stderr and "Traceback" not in stderr


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="starts munged, slurmctld and slurmd: needs root")
def test_srun_verbs_on_a_slurm_cluster(tmp_path_factory, tmp_path):
    """`srun -n 2 commbench p2p-latency -t verbs` as on a cluster: a one-node Slurm cluster from
    launchers/slurm-cluster.sh (in the rxe guest: on the guest's own cgroups), two ranks of one step,
    rank and size from Slurm's variables, a validated run."""
    from system.test_slurm import BIN, cluster, down, srun

    d = cluster(tmp_path_factory, 1)
    try:
        out = tmp_path / "r.jsonl"
        env = {**ENV, "SLURM_CONF": str(d / "slurm.conf")}
        r = srun(env, "-n", "2", str(BIN / "commbench"), "p2p-latency", "-t", "verbs", *DEV, "-m", "8,4K", "-i", "50",
                 "--validate", "-o", str(out), timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "transport: verbs" in r.stdout and r.stdout.count("# commbench p2p-latency") == 1
        assert [(row[0], row[-1]) for row in table_rows(r.stdout)] == [("8", "0"), ("4096", "0")]
        (run,) = read_runs(out)
        assert run.meta["options"]["ranks"] == 2 and [x["wrong"] for x in run.rows] == [0, 0]
    finally:
        down(d)
