"""Emulated hosts (network namespaces + veth + bridge, tc tbf on both ends): up/down on 2 and 3 hosts,
the shaped rate measured by a commbench bandwidth run across them, benchmarks and bad input."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys

import pytest
from conftest import ENV, commbench, table_rows
from wire import settled

from commbench.core.output.results import read_runs
from commbench.profiles.store import load

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces and tc need root")


@pytest.mark.parametrize("rate", ["1gigabit", "fast", "-5mbit", "0mbit", "100 mbit"])
def test_malformed_rate_is_one_line(rate):
    r = commbench("hosts", "up", "2", f"--rate={rate}")
    assert r.code == 2 and r.err.count("\n") == 1 and "tc's notation" in r.err, r.err


def test_hosts_up_without_root():
    p = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-m",
                        "commbench", "hosts", "up", "2", "--rate", "1gbit"], capture_output=True, text=True, env=ENV)
    assert p.returncode == 2 and "needs root" in p.stderr and "sudo" in p.stderr and "Traceback" not in p.stderr


SET = "h" + secrets.token_hex(2)[:3]  # this module's own set of hosts: nobody else's are touched
SET_ENV = {"COMMBENCH_HOSTS_SET": SET}


def cb(*args: str, **kw):
    """commbench with this module's set of hosts."""
    return commbench(*args, env=SET_ENV, **kw)


def name(i: int) -> str:
    return f"cbh{i}.{SET}"


def namespaces() -> str:
    return subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout


@pytest.fixture
def emulated():
    yield lambda *a: cb("hosts", "up", *a)
    cb("hosts", "down")


def bandwidth_mb_s(hosts: int, tmp_path, *extra: str) -> float:
    out = tmp_path / f"bw{hosts}.jsonl"
    out.unlink(missing_ok=True)  # measured again (settled): this run's rows only
    r = cb("p2p-bandwidth", "--hosts", str(hosts), "-m", "1M:1M", "-W", "16", "-i", "8", "-x", "2",
           "--validate", "-o", str(out), *extra, timeout=300)
    assert r.code == 0, r.err
    (run,) = read_runs(out)
    assert sorted(set(run.meta["hosts"])) == [name(i) for i in range(min(hosts, 2))]
    (row,) = run.rows
    assert row["wrong"] == 0
    return row["mb_s"]


@ROOT_ONLY
@pytest.mark.root
@pytest.mark.slow
def test_two_hosts_at_100mbit(emulated, tmp_path):
    r = emulated("2", "--rate", "100mbit")
    assert r.code == 0 and "2 hosts up at 100mbit" in r.out, r.err
    assert emulated("2", "--rate", "100mbit").code == 0  # idempotent: up again replaces it
    ns = namespaces()
    assert name(0) in ns and name(1) in ns and name(2) not in ns
    mb_s = settled(lambda: bandwidth_mb_s(2, tmp_path), lambda x: abs(x - 12.5) / 12.5 < 0.15)
    assert abs(mb_s - 12.5) / 12.5 < 0.15, mb_s  # 100 Mbit/s = 12.5 MB/s
    down = cb("hosts", "down")
    assert down.code == 0 and f"removed {name(0)}, {name(1)}" in down.out
    assert f".{SET}" not in namespaces()


@ROOT_ONLY
@pytest.mark.root
def test_two_sets_of_hosts_never_touch_each_other(emulated):
    """A second set up and down beside the first leaves the first's hosts, links and state alone."""
    assert emulated("2", "--rate", "1gbit").code == 0
    other = "o" + SET[1:]
    try:
        r = commbench("hosts", "up", "3", "--set", other)
        assert r.code == 0 and f"cbh2.{other}" in r.out, r.err
        subnets = {cb("hosts", "status", "--json").out.split('"subnet": ')[1].split(",")[0],
                   commbench("hosts", "status", "--json", "--set", other).out.split('"subnet": ')[1].split(",")[0]}
        assert len(subnets) == 2, subnets  # each set has a subnet of its own
        lines = commbench("hosts", "status", "--set", other).out.splitlines()  # read as a table
        assert lines[0].startswith(f"commbench hosts: set {other}: 3 of 3 hosts up")
        assert lines[1].split() == ["host", "address", "rack", "rate"]
        assert [x.split()[0] for x in lines[2:]] == [f"cbh{i}.{other}" for i in range(3)]
    finally:
        assert commbench("hosts", "down", "--set", other).code == 0
    assert name(0) in namespaces() and name(1) in namespaces() and f".{other}" not in namespaces()
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert f"cb{SET}br0" in links and f"cb{other}" not in links


@ROOT_ONLY
@pytest.mark.root
@pytest.mark.slow
def test_three_hosts_at_300mbit_carry_benchmarks_and_the_ps_emulator(emulated, tmp_path):
    assert emulated("3", "--rate", "300mbit").code == 0
    mb_s = settled(lambda: bandwidth_mb_s(3, tmp_path), lambda x: abs(x - 37.5) / 37.5 < 0.15)
    assert abs(mb_s - 37.5) / 37.5 < 0.15, mb_s
    out = tmp_path / "ps.jsonl"
    r = cb("ps-throughput", "--hosts", "3", "--rpc", "packed", "--workers", "2", "--ps", "1", "--payload",
                  "small_cnn", "-i", "5", "--validate", "--traffic", "-o", str(out), timeout=300)
    assert r.code == 0, r.err
    assert f"{name(0)}, {name(1)}, {name(2)}" in r.out and table_rows(r.out)[0][-1] == "0"
    # --traffic between hosts: captured in the root namespace, where their links meet; a worker-step
    # pushes the model's gradients and pulls its variables (tcp: the bytes and a small frame each)
    traffic = {(x["from"], x["to"]): x for x in read_runs(out)[0].rows if x["bench"] == "ps-throughput-traffic"}
    nbytes = load("small_cnn").nbytes
    assert set(traffic) == {("worker", "ps"), ("ps", "worker")}
    assert all(nbytes <= x["bytes_step"] < 1.01 * nbytes and x["steps"] == 10 for x in traffic.values()), traffic
    r = cb("p2p-latency", "--hosts", "5", "-m", "8")
    assert r.code == 2 and f"--hosts 5: 3 emulated hosts are up in set {SET}" in r.err


@ROOT_ONLY
@pytest.mark.root
def test_a_failed_up_removes_what_it_made(emulated):
    subprocess.run(["ip", "link", "add", f"cb{SET}e1", "type", "bridge"], check=True)  # in host 1's veth's way
    try:
        r = emulated("3", "--rate", "1gbit")
        assert r.code == 2 and r.err.count("\n") == 1 and f"ip link add cb{SET}v1" in r.err, r.err
        assert f".{SET}" not in namespaces()
        links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
        assert f"cb{SET}br0" not in links and f"cb{SET}v0" not in links  # the bridge and host 0's pair are gone too
    finally:
        subprocess.run(["ip", "link", "del", f"cb{SET}e1"], check=False)


@ROOT_ONLY
@pytest.mark.root
def test_up_clears_a_pair_that_outlived_its_host(emulated):
    """A rank still inside a host when it was taken down keeps the namespace, and its veth pair, alive
    without a name; the next up must not fail on the pair's name (it did: 'File exists')."""
    subprocess.run(["ip", "link", "add", f"cb{SET}v0", "type", "veth", "peer", "name", "cbstale0"], check=True)
    try:
        r = emulated("2")
        assert r.code == 0, r.err
        assert cb("hosts", "down").code == 0
        links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
        assert f"cb{SET}v0" not in links and "cbstale0" not in links
    finally:
        subprocess.run(["ip", "link", "del", f"cb{SET}v0"], check=False)


def one_mib_latency_us(tmp_path, name: str) -> float:
    out = tmp_path / f"{name}.jsonl"
    r = cb("p2p-latency", "--hosts", "2", "-m", "1M:1M", "-i", "20", "-x", "3", "-o", str(out), timeout=300)
    assert r.code == 0, r.err
    return read_runs(out)[0].rows[0]["p50_us"]


@ROOT_ONLY
@pytest.mark.root
@pytest.mark.slow
@pytest.mark.parametrize("rate,bps", [("100mbit", 100e6), ("1gbit", 1e9)])
def test_a_shaped_link_delays_a_message_by_its_wire_time(emulated, tmp_path, rate, bps):
    """1 MiB one way over a shaped link takes size / rate on top of the unshaped link's time: at least
    90 % of it (tbf's burst, what passes at once, is too small to hide part of the message) and at most
    120 % (another job's load only adds time: a sender kept off the CPU leaves a 1 Gbit/s link idle,
    +11.5 % seen beside two yes loops and iperf3; idle, within 10 %). Each is the least of up to 3
    measurements (unshaped then shaped, in turn), stopping once they agree."""
    wire = (1 << 20) * 8 / bps * 1e6
    seen: list[tuple[float, float]] = []

    def pair() -> tuple[float, float]:  # the least of every (shaped, unshaped) so far
        assert emulated("2").code == 0  # unshaped
        base = one_mib_latency_us(tmp_path, "base")
        assert emulated("2", "--rate", rate).code == 0
        seen.append((one_mib_latency_us(tmp_path, rate), base))
        return min(s for s, _ in seen), min(b for _, b in seen)

    shaped, base = settled(pair, lambda sb: 0.9 <= sb[0] / (wire + sb[1]) <= 1.2)
    print(f"{rate}: 1 MiB one way {shaped:.0f} us; wire {wire:.0f} + unshaped {base:.0f} us")
    assert 0.9 <= shaped / (wire + base) <= 1.2, (shaped, wire, base)


@pytest.mark.parametrize("item", ["1", "1=0%", "1=100%", "1=lots", "x=1%", "9=1%"])
def test_a_malformed_loss_is_one_line(item):
    r = commbench("hosts", "up", "3", "--loss-of", item)
    assert r.code == 2 and r.err.count("\n") == 1 and "--loss-of" in r.err and "Traceback" not in r.err, r.err


@ROOT_ONLY
@pytest.mark.root
@pytest.mark.slow
def test_a_lossy_host_link_shows_in_the_kernels_retransmissions(emulated, tmp_path):
    """Host 1's link drops 1 % of its frames each way (nftables, offloads off): every pair of a cluster
    run through it has about 1 % of its data segments sent again (TCP_INFO's counters, kept in the
    rows), the pair of the two healthy hosts none to speak of; `down` removes the dropping rules."""
    r = emulated("3", "--rate", "200mbit", "--loss-of", "1=1%")
    assert r.code == 0 and f"{name(1)}'s link at 1% loss" in r.out, r.err
    assert f"{name(1)}'s link drops 1% of its frames each way" in cb("hosts", "status").out
    out = tmp_path / "lossy.jsonl"
    r = cb("cluster", "--hosts", "3", "--tests", "pairwise", "--bw-size", "256K", "-o", str(out), timeout=300)
    assert r.code == 0, r.err
    share = {frozenset((x["a"], x["b"])): x["tcp_retrans"] / x["tcp_data_segs"] for x in read_runs(out)[0].rows
             if x.get("test") == "pairwise"}
    assert len(share) == 3 and share[frozenset((name(0), name(2)))] < 0.001, share
    assert all(0.003 < v < 0.03 for pair, v in share.items() if name(1) in pair), share
    tables = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True).stdout
    assert f"cbloss{SET}" in tables
    assert cb("hosts", "down").code == 0
    assert f"cbloss{SET}" not in subprocess.run(["nft", "list", "tables"], capture_output=True, text=True).stdout
