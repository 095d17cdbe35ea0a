"""commbench cluster: the schedule (every pair once, disjoint rounds), the endpoints, robust outliers,
bad input, runs on loopback, a rank killed mid-run (a finding, the run goes on), a run killed
mid-way (its rows kept), and, as root, the planted slow host found on 8 emulated hosts over tcp,
mpi and grpc-cpp, and a rack uplink seen by bisection but not by the pairs inside a rack."""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
from conftest import BIN, ENV, commbench, grpc_cpp, mpi_env
from wire import settled

from commbench.benchmarks.cluster import Cluster
from commbench.benchmarks.runner import RUNNER_KEYS
from commbench.core.output.results import read_runs

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces and tc need root")
QUICK = ["--bw-size", "64K", "-W", "8", "--bw-time", "0.1", "-i", "200", "-x", "20", "--cuts", "2"]


@pytest.mark.parametrize("args,word", [
    (["--hosts", "1"], "--hosts 1"), (["--np", "4", "--hosts", "4", "--per-host", "1"], "--per-host 1"),
    (["--per-host", "second"], "second"), (["--tests", "pairwise,mesh"], "mesh"), (["--np", "1"], "--np"),
    (["--bw-size", "0"], "--bw-size"), (["--bw-time", "nan"], "--bw-time"), (["-m", "8"], "--lat-size"),
    (["--payload", "resnet50"], "--payload"), (["--slow-pct", "100"], "--slow-pct"),
    (["--topology", "/nonexistent/topology.conf"], "cannot read topology file"),
    (["--transports", "tcp,carrier-pigeon"], "no transport 'carrier-pigeon'"),
    (["--transports", "tcp,mpi"], "give -t mpi"),
    (["--budget", "0"], "--budget"), (["--budget", "10 minutes"], "90s, 10m"), (["--budget", "8d"], "a week"),
    (["--resume", "/nonexistent/run.jsonl"], "/nonexistent/run.jsonl"),
    (["--tests", "bisection", "--cuts", "0"], "--cuts 0"),
])
def test_bad_cluster_input_is_one_line(args, word):
    r = commbench("cluster", *args, timeout=60)
    assert r.code == 2 and r.err.count("\n") == 1 and word in r.err and "Traceback" not in r.err, r.err
    assert r.out == ""


def test_one_host_with_per_host_first_is_one_line():
    """Known only once the ranks run (they report their hosts): rank 0 says it, the others end quietly."""
    r = commbench("cluster", "--np", "3", "--per-host", "first", *QUICK, timeout=120)
    assert r.code == 2 and r.err.count("\n") == 1 and "one endpoint" in r.err and "--per-host all" in r.err, r.err


@pytest.mark.parametrize("hosts_args", [
    ["hosts", "up", "8", "--rate-of", "8=100mbit"], ["hosts", "up", "8", "--rate-of", "five=1gbit"],
    ["hosts", "up", "8", "--rate-of", "3=fast"], ["hosts", "up", "6", "--racks", "4"],
    ["hosts", "up", "4", "--uplink", "1gbit"], ["hosts", "up", "4", "--set", "Bad-Set"],
    ["hosts", "up", "8", "--racks", "2", "--uplink-of", "2=1gbit"], ["hosts", "up", "4", "--uplink-of", "0=1gbit"],
    ["hosts", "up", "4", "--cable", "1-1=1gbit"], ["hosts", "up", "4", "--cable", "1-4=1gbit"],
    ["hosts", "up", "4", "--cable", "1=1gbit"], ["hosts", "up", "4", "--cable", "1-2=fast"],
])
def test_bad_hosts_input_is_one_line(hosts_args):
    r = commbench(*hosts_args)
    assert r.code == 2 and r.err.count("\n") == 1 and "Traceback" not in r.err, r.err


def cluster_rows(path: Path) -> tuple[dict, list[dict]]:
    (run,) = read_runs(path)
    return run.meta, run.rows


@pytest.mark.slow
@pytest.mark.parametrize("transport", [["-t", "tcp"], ["-t", "mpi"], grpc_cpp()])
def test_cluster_on_loopback_measures_every_pair_ring_and_cut(tmp_path, transport):
    out = tmp_path / "c.jsonl"
    r = commbench("cluster", "--np", "4", *transport, *QUICK, "-o", str(out), timeout=240)
    assert r.code == 0, r.err
    meta, rows = cluster_rows(out)
    pairs = [x for x in rows if x["test"] == "pairwise"]
    assert sorted((x["a_rank"], x["b_rank"]) for x in pairs) == [(a, b) for a in range(4) for b in range(a + 1, 4)]
    assert {c.key for c in Cluster.columns} <= set(pairs[0])
    loss = {"tcp_retrans", "tcp_data_segs"} if transport == ["-t", "tcp"] else set()  # the kernel's TCP counters
    assert set(pairs[0]) == set(RUNNER_KEYS) | {"test", "round", "a", "b", "a_rank", "b_rank", "lat_us", "lat_p99_us",
                                                "mb_s", "wrong", "note"} | loss
    declared = set(RUNNER_KEYS) | set(Cluster.row_keys())  # every row, findings and summary too
    assert all(set(x) <= declared for x in rows), [sorted(set(x) - declared) for x in rows]
    assert all(x["mb_s"] > 0 and x["lat_us"] > 0 and x["wrong"] == 0 and not x.get("error") for x in pairs), pairs
    rings = [x for x in rows if x["test"].startswith("ring")]
    assert len(rings) == 8 and all(x["mb_s"] > 0 for x in rings), rings
    cuts = [x for x in rows if x["test"] == "bisection-cut"]
    assert len(cuts) == 2 and all(c["pairs"] == 2 and c["failed"] == 0 and c["mb_s"] > 0 for c in cuts)
    assert "# findings (4 endpoints" in r.out and "#   pairwise: reference" in r.out, r.out  # (loopback: no verdict)
    assert [x for x in rows if x["test"] == "summary"]  # the findings are in the file too


@pytest.mark.slow
def test_twelve_endpoints_meet_in_eleven_rounds(tmp_path):
    """Rank indices of two digits: every round's results are read before they are dropped (a prefix
    that dropped 'round/1' took 'round/10'... with it, and the run waited for them forever)."""
    out = tmp_path / "twelve.jsonl"
    r = commbench("cluster", "--np", "12", "--tests", "pairwise", *QUICK, "-o", str(out), timeout=300)
    assert r.code == 0, r.err
    _, rows = cluster_rows(out)
    pairs = sorted((x["a_rank"], x["b_rank"]) for x in rows if x["test"] == "pairwise")
    assert pairs == [(a, b) for a in range(12) for b in range(a + 1, 12)]
    assert {x["round"] for x in rows if x["test"] == "pairwise"} == set(range(1, 12))
    cost = re.search(r"pair rounds: (\d+) \((\d+) pairs\) took ([\d.]+) s, ([\d.]+) s of it their longest pair's "
                     r"measuring: (\d+) ms a round, (\d+) ms a pair beyond its measurements", r.out)
    assert cost, r.out  # what the rounds cost beyond measuring: at least the 11 rounds' 66 pairs
    rounds, pairs, wall, measuring = int(cost[1]), int(cost[2]), float(cost[3]), float(cost[4])
    assert rounds >= 11 and pairs >= 66 + rounds - 11 and 0 < measuring <= wall, r.out  # and a pair a recheck


def rank_pids(launcher: int) -> dict[int, int]:
    """The local launcher's ranks: rank -> pid (from their environment)."""
    out = {}
    for child in subprocess.run(["pgrep", "-P", str(launcher)], capture_output=True, text=True).stdout.split():
        try:
            env = Path(f"/proc/{child}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        for kv in env:
            if kv.startswith(b"COMMBENCH_RANK="):
                out[int(kv.split(b"=", 1)[1])] = int(child)
    return out


def wait_rows(path: Path, n: int, proc: subprocess.Popen, limit: float = 120) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline and proc.poll() is None:
        if path.exists() and path.read_text().count('"type": "row"') >= n:
            return
        time.sleep(0.1)
    raise AssertionError(f"fewer than {n} rows in {path} after {limit} s (rc {proc.poll()})")


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSTOP], ids=["killed", "stopped"])
def test_a_rank_that_dies_mid_run_is_a_finding_and_the_run_goes_on(tmp_path, sig):
    """Killed, or stopped (silent: found when its heartbeat is --timeout + 2 s old, and killed by the local
    launcher at --timeout): lost after one missed deadline, given no more work, one finding for it."""
    out = tmp_path / "dies.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "commbench", "cluster", "--np", "8", *QUICK, "--tests",
                             "pairwise,ring", "--bw-time", "0.8", "--timeout", "10", "-o", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    wait_rows(out, 4, proc)  # round 1 is in
    os.kill(rank_pids(proc.pid)[4], sig)
    t0 = time.monotonic()
    stdout, stderr = proc.communicate(timeout=240)
    print(f"the run went on {time.monotonic() - t0:.1f} s after rank 4 got {sig.name}")
    assert proc.returncode == 1, stderr  # the launcher reports the killed rank
    assert "rank 4" in stderr and "Traceback" not in stderr, stderr
    killed = [ln for ln in stderr.splitlines() if "killing" in ln]  # the stopped rank alone, at --timeout
    assert len(killed) == (sig == signal.SIGSTOP) and all("rank 4" in ln for ln in killed), stderr
    _, rows = cluster_rows(out)
    pairs = [x for x in rows if x["test"] == "pairwise"]
    assert len(pairs) == 28  # every pair has its row, measured or failed
    failed = [x for x in pairs if x.get("error")]
    assert failed and all(4 in (x["a_rank"], x["b_rank"]) for x in failed), failed
    assert all(x["mb_s"] > 0 for x in pairs if 4 not in (x["a_rank"], x["b_rank"]))  # the others measured
    assert all("rank 4" in x["error"] for x in failed), failed
    ring = [x for x in rows if x["test"] == "ring-ordered"]
    assert len(ring) == 7 and all(x["mb_s"] > 0 for x in ring), ring  # the ring of the seven left alive
    said = [ln for ln in stdout.splitlines() if ln.startswith("#   ") and "/r4" in ln and "lost" not in ln[:12]]
    assert len(said) == 1 and re.search(r"failed: \S+/r4 lost: \d+ pair\(s\) failed or not measured", said[0]), said


@pytest.mark.slow
def test_an_mpi_rank_killed_mid_run_under_ulfm_is_a_finding_and_the_run_goes_on(tmp_path):
    """cluster -t mpi under mpiexec with Open MPI's fault tolerance (ULFM) and failure detector: rank 4
    killed after round 1; its pair fails, MPI's world is shrunk around it, the other pairs and the ring
    of the seven left are measured over MPI, and the run exits 1 naming it. The detector's timeout is
    60 s: with its default 10 s it took ranks left idle by the serial rechecks for dead, and the run hung."""
    out = tmp_path / "ulfm.jsonl"
    proc = subprocess.Popen([str(BIN / "mpiexec"), "--with-ft", "ulfm", "--mca", "mpi_ft_detector", "true", "--mca",
                             "mpi_ft_detector_timeout", "60",
                             "--oversubscribe", "-n", "8", str(BIN / "commbench"), "cluster", "-t", "mpi", "--tests",
                             "pairwise,ring", *QUICK, "--bw-time", "0.8", "--timeout", "10", "-o", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=mpi_env(tmp_path))
    wait_rows(out, 4, proc)
    ranks = {}
    for child in psutil.Process(proc.pid).children(recursive=True):
        with contextlib.suppress(psutil.Error):
            rank = child.environ().get("OMPI_COMM_WORLD_RANK")
            if rank is not None and child.cmdline()[1:2] == [str(BIN / "commbench")]:  # not a rank's guard (sh)
                ranks[int(rank)] = child
    ranks[4].kill()
    try:
        stdout, stderr = proc.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        proc.terminate()  # mpiexec ends its ranks on SIGTERM: none is left behind
        try:
            stdout, stderr = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
        raise AssertionError(f"the run hung once rank 4 was killed; it said: {stderr[-3000:]}") from None
    assert proc.returncode != 0 and "Traceback" not in stderr, stderr
    _, rows = cluster_rows(out)
    pairs = [x for x in rows if x["test"] == "pairwise"]
    assert sorted((x["a_rank"], x["b_rank"]) for x in pairs) == [(a, b) for a in range(8) for b in range(a + 1, 8)]
    failed = [x for x in pairs if x.get("error")]
    # rank 4's pairs fail; the rank whose pair with 4 was making its MPI communicator as 4 died can be lost
    # too (Open MPI's MPI_Comm_create_group then crashed, or waited until its guard ended it): named so
    lost = {int(r) for r in re.findall(r"failed: vm/r(\d+)(?: lost)?:", stdout)}
    assert 4 in lost and len(lost) <= 2 and any(4 in (x["a_rank"], x["b_rank"]) for x in failed), (lost, failed)
    assert all(lost & {x["a_rank"], x["b_rank"]} for x in failed), failed
    assert all(x["mb_s"] > 0 for x in pairs if not lost & {x["a_rank"], x["b_rank"]})
    ring = [x for x in rows if x["test"] == "ring-ordered"]
    assert len(ring) == 8 - len(lost) and all(x["mb_s"] > 0 for x in ring), ring  # over the shrunk world
    assert "MPI's world shrunk around it (ULFM)" in stdout, stdout


@pytest.mark.slow
def test_a_run_killed_mid_way_keeps_its_completed_rows(tmp_path):
    out = tmp_path / "killed.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "commbench", "cluster", "--np", "6", *QUICK, "-o", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
                            start_new_session=True)
    wait_rows(out, 7, proc)
    os.killpg(proc.pid, signal.SIGKILL)  # the launcher and every rank at once
    proc.communicate(timeout=30)
    lines = out.read_text().splitlines()
    rows = [json.loads(x) for x in lines[1:]]  # every line whole
    assert json.loads(lines[0])["type"] == "meta" and len(rows) >= 7
    assert [x["round"] for x in rows[:6]] == [1, 1, 1, 2, 2, 2] and all(x["mb_s"] > 0 for x in rows[:6])
    # --resume continues it in the same file: the matrix completes, each pair measured once
    other = commbench("cluster", "--np", "6", *QUICK, "--bw-size", "1M", "--resume", str(out), "-o", str(out))
    assert other.code == 2 and "resume with the options it was started with" in other.err, other.err
    r = commbench("cluster", "--np", "6", *QUICK, "--resume", str(out), "-o", str(out), timeout=300)
    assert r.code == 0, r.err
    runs = read_runs(out)
    killed, resumed = runs[-2], runs[-1]
    kept = {(x["a"], x["b"]): x for x in killed.rows if x["test"] == "pairwise" and not x.get("error")}
    assert resumed.meta["resumed"] == {"file": str(out), "run_id": killed.meta["run_id"],
                                       "rows": len([x for x in killed.rows if not x.get("error")])}
    pairs = [x for x in resumed.rows if x["test"] == "pairwise"]
    assert sorted((x["a_rank"], x["b_rank"]) for x in pairs) == [(a, b) for a in range(6) for b in range(a + 1, 6)]
    again = {(x["a"], x["b"]): x for x in pairs if x.get("resumed")}
    assert again.keys() == kept.keys() and all(again[k]["mb_s"] == kept[k]["mb_s"] for k in kept)  # kept as they were
    assert all(x["mb_s"] > 0 for x in pairs) and f"resumed {out}" in r.out, r.out


# -- emulated clusters (root) ------------------------------------------------------------
@pytest.fixture
def host_set():
    """A set of emulated hosts of this test's own: no other test's or user's hosts are touched."""
    s = "c" + secrets.token_hex(2)[:3]
    yield s
    commbench("hosts", "down", "--set", s)


def findings(rows: list[dict]) -> list[dict]:
    return [x for x in rows if x["test"] == "finding"]


@ROOT_ONLY
@pytest.mark.root
@pytest.mark.slow
@pytest.mark.parametrize("transport", [["-t", "tcp"], ["-t", "tcp", "--serial", "--tests", "pairwise"],
                                       ["-t", "mpi", "--tests", "pairwise"],
                                       grpc_cpp("--tests", "pairwise")])
def test_the_slow_host_of_eight_is_found_and_no_other(host_set, tmp_path, transport):
    """Hosts at 200 Mbit/s, one at 50 Mbit/s (6.25 MB/s): low enough that the links, not 8 emulated
    hosts on 2 shared cores, are what limits a pair (at 1 Gbit/s, on a machine running other jobs, pairs
    were CPU-bound at 7-115 MB/s and the 25 MB/s host did not stand out); a busy stretch that makes a
    host look slow is cleared when it is measured again beside a control pair."""
    up = commbench("hosts", "up", "8", "--rate", "200mbit", "--rate-of", "5=50mbit", "--set", host_set)
    assert up.code == 0 and f"cbh5.{host_set} at 50mbit" in up.out, up.err
    out = tmp_path / "c.jsonl"

    def evaluate():
        out.unlink(missing_ok=True)
        r = commbench("cluster", "--hosts", "8", "--host-set", host_set, *transport, "--bw-size", "256K",
                      "-o", str(out), timeout=400)
        assert r.code == 0, r.err
        meta, rows = cluster_rows(out)
        return r, meta, [x for x in findings(rows) if x["kind"].startswith("slow")]

    r, meta, slow = settled(evaluate, lambda got: [(x["kind"], x["a"]) for x in got[2]] ==
                            [("slow-host", f"cbh5.{host_set}")] and 5 < got[2][0]["mb_s"] < 6.6)
    assert sorted(set(meta["hosts"])) == sorted(f"cbh{i}.{host_set}" for i in range(8))
    assert [(x["kind"], x["a"]) for x in slow] == [("slow-host", f"cbh5.{host_set}")], (slow, r.out)
    assert 5 < slow[0]["mb_s"] < 6.6, slow  # 50 Mbit/s = 6.25 MB/s
    assert f"slow-host: cbh5.{host_set}" in r.out


@ROOT_ONLY
@pytest.mark.root
@pytest.mark.slow
def test_a_rack_uplink_shows_in_bisection_not_in_the_pairs_inside_a_rack(host_set, tmp_path):
    """2 racks of 4 hosts at 100 Mbit/s (R = 12.5 MB/s), joined by 100 Mbit/s uplinks: a cut's pairs
    that cross the racks share R; a pair inside a rack has its hosts' rate. At 100 Mbit/s the links,
    not 2 loaded cores, are what limits 4 pairs at once (at 400 Mbit/s, a machine running other jobs
    held pairs inside a rack under half their rate). A cut never moves more across an uplink than it
    carries: every pair sends the same count after one barrier (osu_mbw_mr's rule; rates each timed
    over a pair's own window, starting apart, can sum past the uplink)."""
    rate = 12.5
    up = commbench("hosts", "up", "8", "--rate", "100mbit", "--racks", "2", "--uplink", "100mbit", "--set", host_set)
    assert up.code == 0 and "in 2 racks" in up.out, up.err
    out = tmp_path / "racks.jsonl"
    rack = {f"cbh{i}.{host_set}": i // 4 for i in range(8)}

    def evaluate() -> list[dict]:
        out.unlink(missing_ok=True)
        r = commbench("cluster", "--hosts", "8", "--host-set", host_set, "--serial", "--tests", "pairwise,bisection",
                      "--cuts", "10", "--bw-time", "1", "-o", str(out), timeout=400)
        assert r.code == 0, r.err
        return cluster_rows(out)[1]

    def problems(rows: list[dict]) -> list:
        """What is not as the racks make it (on 2 shared cores a busy moment can look like a slow link)."""
        found = []
        inside = [x["mb_s"] for x in rows if x["test"] == "pairwise" and rack[x["a"]] == rack[x["b"]]]
        if not (len(inside) == 12 and min(inside) > 0.8 * rate):  # serial: one pair, its hosts' rate
            found.append(("inside", inside))
        by_cut: dict[int, list[dict]] = {}
        for x in rows:
            if x["test"] == "bisection":
                by_cut.setdefault(x["round"], []).append(x)
        for cut, pairs in by_cut.items():
            local = [x["mb_s"] for x in pairs if rack[x["a"]] == rack[x["b"]]]
            if not all(v > 0.5 * rate for v in local):  # what stays in a rack is not held to an uplink's share
                found.append((cut, local))  # (half of it where two pairs cross one way)
        return found

    def over_the_uplink(rows: list[dict]) -> list:
        """Cuts whose pairs crossing one way moved more than the uplink carries: every pair sends the same
        count after one barrier, so their bytes over the slowest one's time are k x its rate (osu_mbw_mr)."""
        over = []
        for cut in {x["round"] for x in rows if x["test"] == "bisection"}:
            pairs = [x for x in rows if x["test"] == "bisection" and x["round"] == cut]
            for way in ((0, 1), (1, 0)):  # what crosses one way shares that way's uplink (links are duplex)
                cross = [x["mb_s"] for x in pairs if (rack[x["a"]], rack[x["b"]]) == way]
                if cross and len(cross) * min(cross) > 1.05 * rate:
                    over.append((cut, way, cross))
        return over

    rows = settled(evaluate, lambda got: not problems(got))
    assert not problems(rows), problems(rows)
    assert not over_the_uplink(rows), over_the_uplink(rows)  # never, busy machine or not: not settled
    worst = min(x["mb_s"] for x in rows if x["test"] == "bisection-cut")
    assert worst < 0.8 * 4 * rate, worst  # a cut sends two pairs or more one way across (P = 1 - 0.43^10)


@ROOT_ONLY
@pytest.mark.root
@pytest.mark.slow
def test_a_budgeted_run_finds_the_slow_host_in_part_of_the_time(host_set, tmp_path):
    """12 hosts at 200 Mbit/s, one at 50: a run given half the full run's measuring time keeps the
    tournament rounds that fit (every host meets about half the others), still names the slow host,
    ends within its budget, and says what it left out."""
    up = commbench("hosts", "up", "12", "--rate", "200mbit", "--rate-of", "5=50mbit", "--set", host_set)
    assert up.code == 0, up.err
    args = ["cluster", "--hosts", "12", "--host-set", host_set, "--tests", "pairwise", "--bw-size", "256K"]

    def run(*extra):
        out = tmp_path / f"run{len(extra)}.jsonl"
        out.unlink(missing_ok=True)
        r = commbench(*args, *extra, "-o", str(out), timeout=600)
        assert r.code == 0, r.err
        rows = cluster_rows(out)[1]
        notes = [x["note"] for x in rows if x["test"] == "summary"]
        took = float(re.match(r"([\d.]+) s;", notes[0]).group(1))
        return took, [(x["kind"], x["a"]) for x in findings(rows) if x["kind"].startswith("slow")], notes, rows

    full = settled(run, lambda got: got[1] == [("slow-host", f"cbh5.{host_set}")])
    assert full[1] == [("slow-host", f"cbh5.{host_set}")], full[2]
    budget = full[0] / 2
    got = settled(lambda: run("--budget", f"{budget:.1f}"), lambda got: got[1] == full[1] and got[0] <= budget + 3)
    print(f"full: {full[0]:.1f} s; --budget {budget:.1f}: {got[0]:.1f} s; {got[2]}")
    assert got[1] == full[1] and got[0] <= budget + 3, got[2]  # a step begun before the end may run past it
    fit = [n for n in got[2] if "tournament rounds fit" in n]
    assert fit and re.search(r"budget [\d.]+ s: \d+ of 11 tournament rounds fit", fit[0]), got[2]
    pairs = [x for x in got[3] if x["test"] == "pairwise"]
    assert len(pairs) < 66 and all(x["mb_s"] > 0 for x in pairs)  # fewer pairs, each measured


@ROOT_ONLY
@pytest.mark.root
@pytest.mark.slow
def test_a_host_whose_link_goes_down_is_dropped_and_the_rounds_left_planned_again(host_set, tmp_path):
    """12 emulated hosts, host 5's link taken down once round 2 is in: its process lives but answers
    nothing. Its pair of that round fails within the timeout, rank 0 drops it once its heartbeat is
    stale and plans the rounds left over the 11 others (its pairs written as not measured, not each
    waited for); the findings say when and what; every other pair is measured; the run ends."""
    up = commbench("hosts", "up", "12", "--rate", "1gbit", "--set", host_set)
    assert up.code == 0, up.err
    out = tmp_path / "down.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "commbench", "cluster", "--hosts", "12", "--host-set", host_set,
                             "--tests", "pairwise", *QUICK, "--timeout", "5", "-o", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    wait_rows(out, 12, proc)  # rounds 1 and 2
    subprocess.run(["ip", "link", "set", f"cb{host_set}v5", "down"], check=True)
    t0 = time.monotonic()
    stdout, stderr = proc.communicate(timeout=300)
    print(f"the run ended {time.monotonic() - t0:.1f} s after host 5's link went down\n{stdout[-1500:]}\n{stderr}")
    assert proc.returncode == 1 and "Traceback" not in stderr, stderr  # host 5's rank gave up, naming rank 0
    _, rows = cluster_rows(out)
    pairs = [x for x in rows if x["test"] == "pairwise"]
    assert sorted((x["a_rank"], x["b_rank"]) for x in pairs) == [(a, b) for a in range(12) for b in range(a + 1, 12)]
    failed = [x for x in pairs if x.get("error")]
    assert failed and all(5 in (x["a_rank"], x["b_rank"]) for x in failed), failed
    assert all(x["mb_s"] > 0 for x in pairs if 5 not in (x["a_rank"], x["b_rank"]))  # every other pair measured
    skipped = [x for x in failed if x["error"].startswith("not measured")]
    assert len(skipped) >= 11 - 4, failed  # at most its rounds 1-4 were tried; the rest not waited for
    lost = [x["note"] for x in rows if x["test"] == "summary" and x["note"].startswith("lost ")]
    assert len(lost) == 1 and "stopped responding" in lost[0] and "planned again over the 11 endpoints left" \
        in lost[0], lost
    assert lost[0].startswith("lost cbh5") and "pairwise round 3 of 11" in lost[0], lost


@ROOT_ONLY
@pytest.mark.root
@pytest.mark.slow
def test_a_degraded_uplink_is_named_as_its_switchs_uplink_not_as_its_hosts(host_set, tmp_path):
    """3 racks of 4 hosts at 200 Mbit/s, uplinks at 200 Mbit/s but rack 1's at 100: with the topology
    `hosts up` writes, the finding is rack1's uplink (its pairs inside the rack are fine), confirmed
    alone against a control pair; the tournament's crossing pairs that share a healthy uplink are
    cleared when measured alone."""
    up = commbench("hosts", "up", "12", "--rate", "200mbit", "--racks", "3", "--uplink", "200mbit", "--uplink-of",
                   "1=100mbit", "--set", host_set)
    assert up.code == 0 and "rack1's uplink at 100mbit" in up.out, up.err
    topo = f"/run/commbench-hosts.{host_set}.topology.conf"
    assert f"topology {topo}" in up.out and "SwitchName=rack1 Nodes=cbh[4-7]." in Path(topo).read_text()
    out = tmp_path / "up.jsonl"

    def evaluate():
        out.unlink(missing_ok=True)
        r = commbench("cluster", "--hosts", "12", "--host-set", host_set, "--tests", "pairwise", "--bw-size", "256K",
                      "--topology", topo, "-o", str(out), timeout=400)
        assert r.code == 0, r.err
        return r, [x for x in findings(cluster_rows(out)[1]) if x["kind"].startswith("slow")]

    r, slow = settled(evaluate, lambda got: [(x["kind"], x["a"]) for x in got[1]] == [("slow-uplink", "rack1")])
    assert [(x["kind"], x["a"]) for x in slow] == [("slow-uplink", "rack1")], r.out
    assert slow[0]["ratio_lo"] < 0.6, slow  # in the tournament: 100 of 200 Mbit/s, shared by the pairs crossing it
    alone = [int(x) for x in re.findall(r"again alone [\d.]+ MB/s, a control pair [\d.]+ \((\d+) %\)", slow[0]["note"])]
    assert alone and all(40 <= x <= 62 for x in alone), slow  # alone: 100 of 200 Mbit/s, on a busy machine too
    again = commbench("findings", str(out))
    assert again.code == 1 and "slow-uplink: rack1:" in again.out, again.err  # the same verdict from the file


@ROOT_ONLY
@pytest.mark.root
@pytest.mark.slow
def test_a_slow_host_hidden_by_the_tournaments_own_load_is_found_alone(host_set, tmp_path):
    """Ten hosts at 1 Gbit/s, one at 330 Mbit/s: five pairs at once on 2 shared cores hold every pair
    near the slow host's rate (the tournament named nothing). The best pair alone shows the rounds were
    load-bound, every host is measured alone beside the best, and the slow one is named."""
    up = commbench("hosts", "up", "10", "--rate", "1gbit", "--rate-of", "4=330mbit", "--set", host_set)
    assert up.code == 0, up.err
    out = tmp_path / "lb.jsonl"

    def evaluate():
        out.unlink(missing_ok=True)
        r = commbench("cluster", "--hosts", "10", "--host-set", host_set, "--tests", "pairwise", "-o", str(out),
                      timeout=400)
        assert r.code == 0, r.err
        rows = cluster_rows(out)[1]
        return r, rows, [(x["kind"], x["a"]) for x in findings(rows) if x["kind"].startswith("slow")]

    r, rows, slow = settled(evaluate, lambda got: got[2] == [("slow-host", f"cbh4.{host_set}")])
    assert slow == [("slow-host", f"cbh4.{host_set}")], r.out
    alone = [x for x in rows if x["test"] == "alone"]
    if "own load held its pairs" in r.out:  # load-bound (as on the 2-core VM): each host alone beside the best
        assert len(alone) == 8 and min(alone, key=lambda x: x["mb_s"])["b"] == f"cbh4.{host_set}", alone
    else:
        assert not alone


@pytest.mark.slow
def test_every_pair_over_two_transports_in_the_same_round(tmp_path):
    """-t mpi --transports mpi,tcp: each pairwise row of -t's transport has its twin over tcp (via), and
    the report draws the two side by side."""
    out = tmp_path / "two.jsonl"
    r = commbench("cluster", "--np", "4", "-t", "mpi", "--transports", "mpi,tcp", *QUICK, "--tests", "pairwise",
                  "-o", str(out), timeout=240)
    assert r.code == 0, r.err
    rows = cluster_rows(out)[1]
    mpi = {(x["a"], x["b"]) for x in rows if x["test"] == "pairwise" and not x.get("via")}
    tcp = {(x["a"], x["b"]) for x in rows if x["test"] == "pairwise" and x.get("via") == "tcp"}
    assert len(mpi) == 6 and mpi == tcp, (mpi, tcp)
    assert all(x["mb_s"] > 0 for x in rows if x["test"] == "pairwise")
    rep = commbench("report", str(out), "-o", str(tmp_path / "rep"))
    assert rep.code == 0 and {p.name for p in (tmp_path / "rep").glob("*-pairs.png")} == {
        "cluster-mpi-pairs.png", "cluster-tcp-pairs.png"}, rep.err


@ROOT_ONLY
@pytest.mark.root
@pytest.mark.slow
def test_a_fault_in_one_transports_stack_is_named_as_that_transports(host_set, tmp_path):
    """Six hosts at 200 Mbit/s; host 3's tcp data ports (--port 20480: 20481 + rank) shaped to 50 Mbit/s
    both ways with a tc filter, MPI's ports not: over -t mpi --transports mpi,tcp the finding is host 3
    over tcp only (its stack), confirmed over tcp alone against a control pair."""
    assert commbench("hosts", "up", "6", "--rate", "200mbit", "--set", host_set).code == 0
    inner, outer = f"cb{host_set}e3", f"cb{host_set}v3"
    for pre, dev in ((["ip", "netns", "exec", f"cbh3.{host_set}"], inner), ([], outer)):
        for cmd in (["qdisc", "replace", "dev", dev, "root", "handle", "1:", "htb", "default", "1", "r2q", "100"],
                    ["class", "add", "dev", dev, "parent", "1:", "classid", "1:1", "htb", "rate", "200mbit"],
                    ["class", "add", "dev", dev, "parent", "1:", "classid", "1:2", "htb", "rate", "50mbit"],
                    *(["filter", "add", "dev", dev, "parent", "1:", "protocol", "ip", "prio", "1", "u32", "match",
                       "ip", way, "20480", "0xff80", "flowid", "1:2"] for way in ("dport", "sport"))):
            subprocess.run([*pre, "tc", *cmd], check=True, capture_output=True)
    out = tmp_path / "stack.jsonl"

    def evaluate():
        out.unlink(missing_ok=True)
        r = commbench("cluster", "--hosts", "6", "--host-set", host_set, "-t", "mpi", "--transports", "mpi,tcp",
                      "--port", "20480", "--tests", "pairwise", "--bw-size", "256K", "-o", str(out), timeout=400)
        assert r.code == 0, r.err
        found = [x for x in findings(cluster_rows(out)[1]) if x["kind"].startswith("slow")]
        return r, [(x["kind"], x["a"], x.get("via")) for x in found]

    r, slow = settled(evaluate, lambda got: got[1] == [("slow-host", f"cbh3.{host_set}", "tcp")])
    assert slow == [("slow-host", f"cbh3.{host_set}", "tcp")], r.out
    assert "over tcp only (not mpi)" in r.out


def test_the_findings_of_a_saved_run_are_derived_again_the_same(tmp_path):
    """`commbench findings FILE` reads a cluster run's rows and gives its findings (exit 1), or none
    (exit 0); bad input is one line (exit 2)."""
    from commbench.commands.findings import derive

    names = [f"h{i}" for i in range(6)]
    rows = [{"type": "row", "bench": "cluster", "test": "pairwise", "round": 1, "a": names[a], "b": names[b],
             "a_rank": a, "b_rank": b, "mb_s": 5.0 if 2 in (a, b) else 20.0, "lat_us": 9.0}
            for a in range(6) for b in range(a + 1, 6)]
    meta = {"type": "meta", "bench": "cluster", "run_id": "x", "options": {"slow_pct": 25.0, "transport": "tcp"},
            "hosts": names}
    path = tmp_path / "c.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in [meta, *rows]) + "\n")
    lines, count, _, _ = derive(str(path))
    assert count == 1 and any("slow-host: h2:" in x and "not measured again" in x for x in lines), lines
    r = commbench("findings", str(path))
    assert r.code == 1 and "slow-host: h2" in r.out, r.err
    topo = tmp_path / "t.csv"
    topo.write_text("host,switch\n" + "".join(f"{n},s{i // 3}\n" for i, n in enumerate(names)))
    lines, count, _, _ = derive(str(path), topo_file=str(topo))
    assert count == 1 and any("switch s0: 3 hosts" in x for x in lines)
    healthy = tmp_path / "ok.jsonl"
    healthy.write_text("\n".join(json.dumps(x) for x in [meta, *({**x, "mb_s": 20.0} for x in rows)]) + "\n")
    assert commbench("findings", str(healthy)).code == 0
    topo.write_text("host,switch\nother1,s0\n")
    other = tmp_path / "p2p.jsonl"
    other.write_text(json.dumps({**meta, "bench": "p2p-latency"}) + "\n" + json.dumps({"type": "row", "size": 8}))
    for args, word, target in ((["--topology", str(topo)], "places none of this run's hosts", path),
                               ([], "not a commbench", topo), ([], "no commbench cluster run", other),
                               (["--slow-pct", "0"], "--slow-pct", path)):
        r = commbench("findings", str(target), *args)
        assert r.code == 2 and r.err.count("\n") == 1 and word in r.err and "Traceback" not in r.err, r.err


def _run_file(path: Path, names: list[str], rate, start: str = "2026-11-30T02:00:00+00:00",
              rechecks: dict | None = None) -> Path:
    """A cluster run's file: every pair at ``rate(a, b)`` MB/s; ``rechecks``: suspect -> (probe, control)
    MB/s, both passes, as a live run measures its suspects again."""
    meta = {"type": "meta", "bench": "cluster", "run_id": path.stem, "start": start,
            "options": {"slow_pct": 25.0, "transport": "tcp"}, "hosts": names, "endpoints": names}
    rng = np.random.default_rng(len(path.stem))
    rows = [{"type": "row", "bench": "cluster", "test": "pairwise", "round": 1, "a": names[a], "b": names[b],
             "a_rank": a, "b_rank": b, "mb_s": rate(a, b) * (1 + rng.normal(0, 0.02)), "lat_us": 9.0}
            for a in range(len(names)) for b in range(a + 1, len(names))]
    rows += [{"type": "row", "bench": "cluster", "test": "recheck", "round": 1, "a": names[0], "b": names[1],
              "suspect": suspect, "role": role + n, "mb_s": float(v)}
             for suspect, (probe, control) in (rechecks or {}).items() for n in ("", "-2")
             for role, v in (("probe", probe), ("control", control))]
    path.write_text("\n".join(json.dumps(x) for x in [meta, *rows]) + "\n")
    return path


def test_a_baseline_diff_names_the_link_that_lost_and_the_host_newly_slow(tmp_path):
    """`commbench diff OLD NEW` (findings --baseline): a cable that lost 40 % between two runs is named
    with both figures and the baseline's date, a host slow now and not before is new; the same run
    against itself changes nothing; a baseline of other hosts is one line, exit 2."""
    names = [f"cbh{i}" for i in range(8)]
    old = _run_file(tmp_path / "old.jsonl", names, lambda a, b: 24.0)
    new = _run_file(tmp_path / "new.jsonl", names, lambda a, b: 14.4 if (a, b) == (3, 7) else
                    6.0 if 5 in (a, b) else 24.0, start="2026-12-02T02:00:00+00:00",
                    rechecks={"cable cbh3 - cbh7": (14.4, 24.0)})  # the live run's: one pair measured again
    r = commbench("diff", str(old), str(new))
    assert r.code == 1, r.err
    assert "lost-link: cable cbh3 - cbh7 lost 4" in r.out and "since 2026-11-30" in r.out, r.out
    assert "-> 14." in r.out and "lost-host: host cbh5 lost 75 %" in r.out, r.out
    assert "new: slow-host cbh5 (not in the baseline of 2026-11-30)" in r.out, r.out
    same = commbench("findings", str(old), "--baseline", str(old))
    assert same.code == 0 and "lost" not in same.out and "no outliers" in same.out, same.out
    other = _run_file(tmp_path / "other.jsonl", [f"node{i}" for i in range(8)], lambda a, b: 24.0)
    bad = commbench("diff", str(other), str(new))
    assert bad.code == 2 and bad.err.count("\n") == 1 and "another cluster" in bad.err, bad.err


def test_a_reference_file_warns_in_its_halo_and_fails_beyond_its_band(tmp_path):
    names = [f"cbh{i}" for i in range(6)]
    run = _run_file(tmp_path / "run.jsonl", names, lambda a, b: 22.0)
    ref = tmp_path / "ref.csv"
    for expected, code, state in (("23", 0, "warn"), ("22.2", 0, "pass"), ("30", 1, "fail")):
        ref.write_text(f"link,metric,expected,warn_pct,fail_pct\n# 200 Mbit/s\nany,mb_s,{expected},3,10\n")
        r = commbench("findings", str(run), "--reference", str(ref))
        assert r.code == code and f": {state};" in r.out, (expected, r.out)
    for text, word in (("link,metric,expected,warn_pct,fail_pct\nany,mb/s,23,3,10\n", "not mb_s or lat_us"),
                       ("link,metric,expected,warn_pct,fail_pct\nrack,mb_s,23,3,10\n", "not inside, across"),
                       ("link,metric,expected,warn_pct,fail_pct\nany,mb_s,23,10,3\n", "warn_pct < fail_pct"),
                       ("link,metric,expected,warn_pct,fail_pct\nany,mb_s,2x3,1,3\n", "are numbers"),
                       ("any,mb_s,23,3,10\n", "header")):
        ref.write_text(text)
        r = commbench("findings", str(run), "--reference", str(ref))
        assert r.code == 2 and r.err.count("\n") == 1 and word in r.err and "Traceback" not in r.err, r.err


@ROOT_ONLY
@pytest.mark.root
@pytest.mark.slow
def test_a_lossy_host_is_named_by_its_retransmissions_though_its_rate_is_fine(host_set, tmp_path):
    """8 hosts at 200 Mbit/s, host 5's link dropping 1 % of its frames each way: at these round-trip
    times TCP keeps the rate (no slow-* finding), but the kernel's counters show 1 % of the segments
    through it sent again: lossy-host, confirmed against a control pair, on the drain list and in
    --host-status as lossy."""
    up = commbench("hosts", "up", "8", "--rate", "200mbit", "--loss-of", "5=1%", "--set", host_set)
    assert up.code == 0, up.err
    out = tmp_path / "lossy.jsonl"

    def evaluate():
        out.unlink(missing_ok=True)
        r = commbench("cluster", "--hosts", "8", "--host-set", host_set, "--tests", "pairwise", "--bw-size", "256K",
                      "-o", str(out), timeout=400)
        assert r.code == 0, r.err
        return r, [(x["kind"], x["a"]) for x in findings(cluster_rows(out)[1]) if x["kind"].startswith("lossy")]

    r, lossy = settled(evaluate, lambda got: got[1] == [("lossy-host", f"cbh5.{host_set}")])
    assert lossy == [("lossy-host", f"cbh5.{host_set}")], r.out
    assert "again alone" in r.out and "of its segments sent again" in r.out
    drain, status = tmp_path / "drain", tmp_path / "hosts"
    again = commbench("findings", str(out), "--drain-list", str(drain), "--host-status", str(status))
    assert again.code == 1 and drain.read_text() == f"cbh5.{host_set}\n", again.out
    assert f"cbh5.{host_set}\tlossy" in status.read_text().splitlines()
