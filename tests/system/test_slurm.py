"""A real Slurm cluster on this machine (launchers/slurm-cluster.sh): srun launches, MPI under srun,
the singleton mistake, a dead rank ending the step, and two nodes meeting through the node list."""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ENV, table_rows

from commbench.core.output.results import read_runs

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
pytestmark = [pytest.mark.root, pytest.mark.slow,
              pytest.mark.skipif(os.geteuid() != 0, reason="starts munged, slurmctld and slurmd: needs root")]


SCRIPT = ["bash", str(ROOT / "launchers" / "slurm-cluster.sh")]


def cluster(tmp_path_factory, nodes: int):
    d = tmp_path_factory.mktemp(f"slurm{nodes}")
    up = subprocess.run([*SCRIPT, "up", str(d), str(nodes)],
                        capture_output=True, text=True, timeout=300)
    assert up.returncode == 0, up.stdout + up.stderr
    return d


def down(d: Path) -> None:
    subprocess.run([*SCRIPT, "down", str(d)], timeout=60)


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    d = cluster(tmp_path_factory, 1)
    yield {**ENV, "SLURM_CONF": str(d / "slurm.conf")}
    down(d)


def srun(env, *args, timeout=180):
    return subprocess.run(["srun", *args], capture_output=True, text=True, env=env, timeout=timeout)


def test_srun_tcp(slurm, tmp_path):
    out = tmp_path / "r.jsonl"
    r = srun(slurm, "-n", "2", str(BIN / "commbench"), "p2p-latency", "-m", "8,4K", "-i", "200", "--validate",
             "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert [row[0] for row in table_rows(r.stdout)] == ["8", "4096"]
    assert r.stdout.count("# commbench p2p-latency") == 1  # rank 0 alone prints
    (run,) = read_runs(out)
    assert run.meta["options"]["ranks"] == 2 and [x["wrong"] for x in run.rows] == [0, 0]


def test_srun_mpi_pmix(slurm):
    r = srun(slurm, "-n", "2", "--mpi=pmix", str(BIN / "commbench"), "p2p-latency", "-t", "mpi", "-m", "8,4K",
             "-i", "200", "--validate")
    assert r.returncode == 0, r.stderr
    assert "mpi (buffer, MPI progress (busy-poll))" in r.stdout
    assert [row[-1] for row in table_rows(r.stdout)] == ["0", "0"]


def test_srun_mpi_prints_the_table_and_nothing_else(slurm):
    """As a user types it, in a plain environment: Slurm's PMIx asks the wheel's PMIx for components it
    was built without (munge, ds21, ds12), which printed a help message per rank and component from a
    prefix that is not the venv's; commbench keeps the components the wheel has."""
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root"), "SLURM_CONF": slurm["SLURM_CONF"]}
    r = srun(env, "-n", "2", "--mpi=pmix", str(BIN / "commbench"), "p2p-latency", "-t", "mpi", "-m", "8,4K",
             "-i", "200")
    assert r.returncode == 0, r.stderr
    # srun's own word that the job waited for CPUs (a busy machine: the step before still ending) is not ours
    said = [line for line in r.stderr.splitlines()
            if not re.fullmatch(r"srun: job \d+ (queued and waiting for resources|has been allocated resources)", line)]
    assert said == [], r.stderr
    lines = r.stdout.splitlines()
    assert all(line.startswith("# ") or re.match(r"^\d+\s", line) for line in lines), lines
    assert [row[0] for row in table_rows(r.stdout)] == ["8", "4096"]


def test_srun_wrong_mpi_plugin_is_an_error(slurm):
    r = srun(slurm, "-n", "2", "--mpi=none", str(BIN / "commbench"), "p2p-latency", "-t", "mpi", "-m", "8:8")
    assert r.returncode != 0
    assert "MPI sees 1 rank(s) but srun started 2" in r.stderr and "--mpi=pmix" in r.stderr
    assert "Traceback" not in r.stderr


def test_srun_verbs_without_a_device_is_one_line_per_rank(slurm):
    t0 = time.monotonic()
    r = srun(slurm, "-n", "2", str(BIN / "commbench"), "p2p-latency", "--transport", "verbs", timeout=60)
    assert r.returncode == 2 and time.monotonic() - t0 < 30
    lines = [line for line in r.stderr.strip().splitlines() if not line.startswith("srun: ")]  # srun's own
    assert len(lines) == 2, r.stderr  # one per rank, nothing else
    assert all(line.startswith("commbench: no RDMA device found") and "usable transports here: " in line
               for line in lines), r.stderr


def test_srun_dead_rank_ends_the_step(slurm, tmp_path):
    out = tmp_path / "r.jsonl"
    p = subprocess.Popen(["srun", "-n", "2", str(BIN / "commbench"), "p2p-latency", "-m", "0:4M", "-i", "3000",
                          "--timeout", "10", "-o", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=slurm)
    deadline = time.monotonic() + 60
    while not (out.exists() and out.read_text().count('"row"') >= 3):
        assert time.monotonic() < deadline and p.poll() is None
        time.sleep(0.05)
    victim = None
    for pid in os.listdir("/proc"):
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, ValueError):
            continue
        if b"SLURM_PROCID=1" in env and b"p2p-latency" in cmd and f"SLURM_CONF={slurm['SLURM_CONF']}".encode() in env:
            victim = int(pid)
    assert victim
    os.kill(victim, signal.SIGKILL)
    t0 = time.monotonic()
    _, err = p.communicate(timeout=60)
    assert p.returncode != 0
    assert time.monotonic() - t0 < 10
    assert "rank 0 on host" in err and "rank 1 on host" in err, err
    assert len(read_runs(out)[0].rows) >= 3


def test_ps_recipe_under_sbatch(slurm, tmp_path):
    """slurm/ps-throughput.sbatch, submitted for real: a chief, 2 workers and 2 shards, both placements."""
    job = subprocess.run(["sbatch", "--wait", "-n", "5", "-o", str(tmp_path / "out.txt"),
                          f"--export=ALL,COMMBENCH={BIN / 'commbench'},TRANSPORTS=tcp,EXTRA=-i 3 -x 1 --validate",
                          str(ROOT / "slurm" / "ps-throughput.sbatch")],
                         capture_output=True, text=True, env=slurm, cwd=tmp_path, timeout=600)
    out = (tmp_path / "out.txt").read_text()
    assert job.returncode == 0, job.stderr + out
    files = sorted(tmp_path.glob("commbench-ps-*/*.jsonl"))
    assert [f.name for f in files] == ["ps_tcp_greedy.jsonl", "ps_tcp_round-robin.jsonl"]
    for f in files:
        (row,) = read_runs(f)[0].rows
        assert row["workers"] == 2 and row["ps"] == 2 and row["wrong"] == 0 and row["rpc"] == "tf"


def test_train_under_srun(slurm, tmp_path):
    """TF tasks from srun's ranks: a chief, 2 workers and a PS meet through commbench's rendezvous."""
    out = tmp_path / "t.jsonl"
    r = srun(slurm, "-n", "4", str(BIN / "commbench"), "train", "--strategy", "ps", "--workers", "2", "--ps", "1",
             "--steps", "6", "--warmup-steps", "2", "--batch", "16", "-o", str(out), timeout=400)
    assert r.returncode == 0, r.stderr[-3000:]
    (row,) = read_runs(out)[0].rows
    assert row["images_s"] > 0 and row["workers"] == 2 and row["ps"] == 1
    r = srun(slurm, "-n", "3", str(BIN / "commbench"), "train", "--workers", "2", "--ps", "1", timeout=120)
    assert r.returncode == 2 and "needs 4 ranks but the launcher started 3" in r.stderr


@pytest.mark.parametrize("transports,code", [("tcp", 0), ("tcp verbs", 1)])
def test_compare_recipe_on_one_node(slurm, tmp_path, transports, code):
    """slurm/compare.sbatch on a one-node cluster runs (both tasks on the node) instead of pending for
    a second node; a failed step (verbs: no device here) fails the job after the others' summary."""
    job = subprocess.run(["sbatch", "--wait", "-o", str(tmp_path / "out.txt"),
                          f"--export=ALL,COMMBENCH={BIN / 'commbench'},TRANSPORTS={transports},SIZES=8,4M,"
                          "EXTRA=-i 20 --timeout 20", str(ROOT / "slurm" / "compare.sbatch")],
                         capture_output=True, text=True, env=slurm, cwd=tmp_path, timeout=600)
    out = (tmp_path / "out.txt").read_text()
    assert job.returncode == code, job.stderr + out
    summary = out[out.index("# commbench compare"):]
    assert table_rows(summary)[0][:2] == ["tcp", "blocking"]
    if code:
        assert "2 step(s) failed: latency_verbs bandwidth_verbs" in out, out


def test_cluster_script_leaves_others_alone(slurm, tmp_path_factory, tmp_path):
    """slurm-cluster.sh: a running cluster's DIR or a foreign non-empty DIR is refused (exit 2, nothing
    torn down); a second cluster beside the first gets free ports of its own; its `down` stops only
    its own daemons (munged too is stopped by its recorded pid, and only by the cluster that started it)."""
    first = Path(slurm["SLURM_CONF"]).parent
    again = subprocess.run([*SCRIPT, "up", str(first)], capture_output=True, text=True, timeout=60)
    assert again.returncode == 2 and "holds a running cluster" in again.stderr, again.stderr
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("x")
    refused = subprocess.run([*SCRIPT, "up", str(foreign)], capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "not empty" in refused.stderr and (foreign / "keep.txt").exists()
    assert "SlurmctldPort=6817" not in (first / "slurm.conf").read_text()  # a free port, not Slurm's default
    second = cluster(tmp_path_factory, 2)
    try:
        r = srun({**slurm, "SLURM_CONF": str(second / "slurm.conf")}, "-N", "2", "-n", "2", "hostname")
        assert r.returncode == 0 and len(r.stdout.split()) == 2, r.stderr
        assert not (second / "munged.pid").exists()  # the first cluster's munged serves both
    finally:
        down(second)
    assert not second.exists()
    r = srun(slurm, "-n", "1", "hostname")
    assert r.returncode == 0, r.stderr  # the first cluster, its munged included, still runs


def test_two_nodes_meet_through_the_node_list(tmp_path_factory, slurm):
    """A cluster of two fake nodes of its own, beside the module's one-node cluster (which it leaves
    running: the tests after it use it)."""
    d = cluster(tmp_path_factory, 2)
    try:
        env = {**slurm, "SLURM_CONF": str(d / "slurm.conf")}
        work = tmp_path_factory.mktemp("srun")
        r = srun(env, "-N", "2", "-n", "2", str(BIN / "commbench"), "p2p-latency", "-m", "8,64K", "-i", "200",
                 "--validate", "-o", str(work / "store.jsonl"))
        assert r.returncode == 0, r.stderr
        assert "hosts: n1, n2" in r.stdout  # one rank on each node
        assert [row[-1] for row in table_rows(r.stdout)] == ["0", "0"]
        (run,) = read_runs(work / "store.jsonl")  # no PMIx: the ranks met through rank 0's store
        assert run.meta["wireup"]["via"] == "store" and run.meta["wireup"]["store_requests"] > 0, run.meta
        # pmix on fake nodes: each node's slurmd makes its step directory under its own TmpFS
        for transport in ("tcp", "mpi"):  # the launcher's exchange carried the wire-up: rank 0's store answered none
            r = srun(env, "-N", "2", "-n", "2", "--mpi=pmix", str(BIN / "commbench"), "p2p-latency", "-t", transport,
                     "-m", "8:8", "-i", "200", "-o", str(work / f"pmix_{transport}.jsonl"))
            assert r.returncode == 0, r.stderr
            assert "hosts: n1, n2" in r.stdout and len(table_rows(r.stdout)) == 1
            (run,) = read_runs(work / f"pmix_{transport}.jsonl")
            assert run.meta["wireup"]["via"] == "pmix" and run.meta["wireup"]["store_requests"] == 0, run.meta
        # the recipe in slurm/, submitted for real
        work = tmp_path_factory.mktemp("sbatch")
        job = subprocess.run(["sbatch", "--wait", "-o", str(work / "out.txt"),
                              f"--export=ALL,COMMBENCH={BIN / 'commbench'},TRANSPORTS=tcp,SIZES=8,1M,4M,EXTRA=-i 50",
                              str(ROOT / "slurm" / "compare.sbatch")],
                             capture_output=True, text=True, env=env, cwd=work, timeout=600)
        out = (work / "out.txt").read_text()
        assert job.returncode == 0, job.stderr + out
        assert "hosts: n1, n2" in out
        summary = out[out.index("# commbench compare"):]
        assert table_rows(summary)[0][:2] == ["tcp", "blocking"]
        assert len(list(work.glob("commbench-compare-*/*.jsonl"))) == 2
        # the cluster evaluation, one task per node, over tcp and mpi
        job = subprocess.run(["sbatch", "--wait", "-N", "2", "-o", str(work / "cluster.txt"),
                              f"--export=ALL,COMMBENCH={BIN / 'commbench'},OUT={work / 'cl'},EXTRA=--bw-size 64K "
                              "-i 100 --bw-time 0.2 --cuts 1", str(ROOT / "slurm" / "cluster.sbatch")],
                             capture_output=True, text=True, env=env, cwd=work, timeout=600)
        out = (work / "cluster.txt").read_text()
        assert job.returncode == 0, job.stderr + out
        for t in ("tcp", "mpi"):
            (run,) = read_runs(work / "cl" / f"cluster_{t}.jsonl")
            pairs = [x for x in run.rows if x["test"] == "pairwise"]
            assert [(x["a"], x["b"]) for x in pairs] == [("n1", "n2")] and pairs[0]["mb_s"] > 0, run.rows
            assert {x["test"] for x in run.rows} >= {"ring-ordered", "ring-random", "bisection", "summary"}
            verdict = (work / "cl" / f"findings_{t}.txt").read_text()  # commbench findings, for a health check
            assert "derived again from" in verdict and "no outliers" in verdict, verdict
            assert (work / "cl" / f"drain_{t}.txt").read_text() == ""  # nothing to drain: an empty hostlist
        assert (work / "cl" / "report" / "report.html").exists() and "# findings (2 endpoints" in out
    finally:
        down(d)


def test_a_stopped_rank_does_not_hold_the_step(slurm, tmp_path):
    """srun waits for every task: a rank stopped (SIGSTOP) mid-run would hold the allocation until its
    time limit. The survivor names it within --timeout, and ends the step (scancel) a moment later."""
    from conftest import signal_a_rank

    out = tmp_path / "r.jsonl"
    took, r, out_s = signal_a_rank(["srun", "-n", "2", str(BIN / "commbench"), "p2p-latency", "-m", "8:8", "-i",
                                    "10000000", "--timeout", "5", "-o", str(out)], slurm, 1, signal.SIGSTOP, out)
    print(f"the survivor was out {out_s:.1f} s and srun ended {took:.1f} s after rank 1 was stopped (--timeout 5)")
    assert out_s < 5 + 2, r.err
    assert r.code != 0
    assert "rank 1 " in r.err, r.err
    assert took < 5 + 4, r.err


def test_srun_mpi_starts_every_time(slurm):
    """Start-up under srun with MPI (PMIx), again and again: one run in six once hung 180 s before
    "lost the rendezvous ... timed out". Every one of ten must finish, each within 60 s."""
    times = []
    for _ in range(10):
        t0 = time.monotonic()
        r = srun(slurm, "-n", "2", "--mpi=pmix", str(BIN / "commbench"), "p2p-latency", "-t", "mpi", "-m", "8",
                 "-i", "100", "--timeout", "20", timeout=60)
        times.append(round(time.monotonic() - t0, 1))
        assert r.returncode == 0, (times, r.stderr)
    print("srun start-ups (s):", times)
