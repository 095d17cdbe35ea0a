"""commbench's verbs transport against perftest (ib_send_lat, ib_write_lat, ib_send_bw, ib_write_bw)
on the same RDMA device, interleaved. Where there is no RDMA hardware, run it in the Soft-RoCE guest:

    bash launchers/rxe-guest.sh env COMMBENCH_GID_INDEX=1 .venv/bin/python bench/vs_perftest.py [--rounds 2]

Each round runs, one after another: perftest's latency tools (send and write, busy-polling, and
send with completion events, -e) at each size, then `commbench p2p-latency -t verbs` with the same
op and completion mode; perftest's bandwidth tools, busy-polling and (send) with events (-e), and
`commbench p2p-bandwidth -t verbs` with the same op and completion mode, size by size, the same
number of messages each (--bw-messages, 200 at 1 MiB; commbench in windows of 64, as osu_bw;
perftest's default tx depth 128). `--only latency|bandwidth` runs one half, `--sizes 65536` one size. Latency: one-way,
median (perftest's t_typical, commbench's p50), us. Bandwidth: MB/s = 10^6 B/s (perftest's
MB/sec are 2^20 B/s, converted). Prints medians over rounds and the ratio commbench / perftest, the
median of each round's ratio (the guest's speed drifts between rounds; a round's two runs are close
in time; the tools take each place in turn over the rounds, so that a drift cancels: bench/common.py),
with every round's ratio (latency: above 1 = commbench slower; bandwidth: below 1 = commbench slower).
perftest runs with -F (a VM has no stable CPU clock); the header says how far perftest's cycles-to-microseconds rate is
from the TSC's measured rate (``perftest_clock``). Goals: >= 64 KiB within 0.9-1.1x of perftest for latency and
bandwidth. Under QEMU's software CPU (the rxe guest) every number is a software number: read the
ratios, not the microseconds.

``--floor`` adds a third tool to the send rows: bench/pyverbs_floor.py, perftest's own loops
(ib_send_lat's ping-pong, ib_send_bw's stream) in bare pyverbs, with nothing of commbench. A second
table gives fl/pt (what Python and pyverbs cost over C) and cb/fl (what commbench's own code costs
over that); the three take each place in the order in turn over the rounds.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import pyverbs_floor  # bench/ is on sys.path
from common import Comparison, commbench_rows, exact, free_port, imported, matched_env

BIN = Path(sys.executable).parent
DEV = os.environ.get("COMMBENCH_IB_DEV", "rxe0")
GID = os.environ.get("COMMBENCH_GID_INDEX", "1")
SIZES = [8, 65536, 1 << 20]
LAT = [("send", "busy", "ib_send_lat", []), ("write", "busy", "ib_write_lat", []),
       ("send", "blocking", "ib_send_lat", ["-e"])]
BW = [("send", "busy", "ib_send_bw", []), ("send", "blocking", "ib_send_bw", ["-e"]),
      ("write", "busy", "ib_write_bw", [])]  # ib_write_bw has no -e: "Events feature not available on WRITE verb"


def bw_messages(size: int, messages: int) -> int:
    """Messages per bandwidth point: --bw-messages, fewer for large ones (about 130 MB, at least 200)."""
    return max(200, min(messages, messages * 65536 // size))


def perftest(tool: str, size: int, iters: int, extra: list[str]) -> dict:
    """Run a perftest server and its client on this host; the client's result row, read by commbench's
    importer (commbench import: p50_us from t_typical, mb_s in 10^6 B/s)."""
    port = str(free_port())
    common = [tool, "-d", DEV, "-x", GID, "-F", "-s", str(size), "-n", str(iters), "-p", port, *extra]
    srv = subprocess.Popen(common, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(60):  # until the server listens for the exchange (slow to start under TCG)
            time.sleep(0.5)
            p = subprocess.run([*common, "127.0.0.1"], capture_output=True, text=True, timeout=600)
            if p.returncode == 0 or "Couldn't connect" not in p.stdout + p.stderr:
                break
    finally:
        srv.kill()
        srv.wait()
    rows = [r for r in imported("perftest", p.stdout).rows if r["size"] == size] if p.returncode == 0 else []
    if not rows:
        raise SystemExit(f"vs_perftest: no result line from {tool} -s {size}:\n{p.stdout}{p.stderr}")
    return rows[0]


def commbench(bench: str, args: list[str], sizes: list[int] = SIZES) -> dict[int, dict]:
    rows = commbench_rows([bench, "-t", "verbs", "--ib-dev", DEV, "--gid-index", GID, *args, "-m", exact(sizes)])
    return {int(r["size"]): r for r in rows}


def perftest_clock() -> str:
    """How far perftest's clock is off here. perftest turns cycle counts (rdtsc) into microseconds with
    /proc/cpuinfo's "cpu MHz", unless that is more than 2 % from a rate it samples itself (get_clock.c):
    so it is up to 2 % wrong, unnoticed, where the kernel's boot-time calibration is off (a guest under
    TCG calibrates against an emulated timer). Compared here with the TSC's rate against CLOCK_MONOTONIC
    (bench/tsc_rate.c, built with cc, about one second)."""
    if os.uname().machine != "x86_64" or not shutil.which("cc"):
        return "not checked (needs x86-64 and cc)"
    proc = next((float(line.split(":")[1]) for line in Path("/proc/cpuinfo").read_text().splitlines()
                 if line.startswith("cpu MHz")), None)
    if proc is None:
        return "not checked (no cpu MHz in /proc/cpuinfo)"
    with tempfile.TemporaryDirectory() as d:
        exe = Path(d) / "tsc_rate"
        built = subprocess.run(["cc", "-O2", "-o", str(exe), str(Path(__file__).with_name("tsc_rate.c"))],
                               capture_output=True, text=True)
        if built.returncode:
            return f"not checked (cc failed: {(built.stderr.strip().splitlines() or ['?'])[-1]})"
        tsc = float(subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout)
    off = proc / tsc - 1
    used = "perftest samples its own rate instead" if abs(off) > 0.02 else \
        f"perftest's microseconds are {abs(off) * 100:.3f} % {'short' if off > 0 else 'long'}"
    return f"/proc/cpuinfo {proc:.3f} MHz, TSC {tsc:.3f} MHz against CLOCK_MONOTONIC: {used}"


def perftest_latency(tool: str, extra: list[str], sizes: list[int], iters: int) -> dict[int, float]:
    """perftest's one-way median (t_typical), us, per size."""
    return {size: perftest(tool, size, iters, extra)["p50_us"] for size in sizes}


def commbench_latency(op: str, poll: str, sizes: list[int], iters: int) -> dict[int, float]:
    """commbench's one-way p50, us, per size (one run over all sizes)."""
    rows = commbench("p2p-latency", ["--verbs-op", op, "--poll", poll, "-i", str(iters),
                                     "-x", str(max(1, iters // 10))], sizes)
    return {size: rows[size]["p50_us"] for size in sizes}


def floor_latency(poll: str, sizes: list[int], iters: int) -> dict[int, float]:
    """bench/pyverbs_floor.py's one-way p50, us, per size: a bare pyverbs ping-pong (send only)."""
    return {size: pyverbs_floor.run(DEV, int(GID), size, poll == "blocking", iters, max(1, iters // 10))["p50_us"]
            for size in sizes}


def floor_bandwidth(poll: str, size: int, messages: int) -> float:
    """bench/pyverbs_floor.py's stream (ib_send_bw's loop in Python), MB/s."""
    return pyverbs_floor.run(DEV, int(GID), size, poll == "blocking", messages=messages)["mb_s"]


def perftest_bandwidth(tool: str, extra: list[str], size: int, messages: int) -> float:
    """perftest's bandwidth, MB/s (its MiB/s converted)."""
    return perftest(tool, size, messages, extra)["mb_s"]


def commbench_bandwidth(op: str, poll: str, size: int, messages: int) -> float:
    """commbench's osu_bw-style bandwidth, MB/s, over about ``messages`` messages in windows of 64."""
    rows = commbench("p2p-bandwidth", ["--verbs-op", op, "--poll", poll, "-i", str(max(2, messages // 64)),
                                       "-x", "1", "-W", "64"], [size])
    return rows[size]["mb_s"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("-i", "--iterations", type=int, default=200, help="latency iterations (default 200: TCG is slow)")
    ap.add_argument("--bw-messages", type=int, default=2000,
                    help="messages per bandwidth point, both tools (default 2000; 200 at 1 MiB)")
    ap.add_argument("--only", choices=("latency", "bandwidth"), help="run one half")
    ap.add_argument("--floor", action="store_true",
                    help="send latency and bandwidth also from bench/pyverbs_floor.py, perftest's loops in bare "
                         "pyverbs: what Python and pyverbs cost, apart from commbench's own code")
    ap.add_argument("--raw", type=Path, help="raw values to this JSONL file (default: in the cache directory)")
    ap.add_argument("--sizes", type=lambda v: [int(x) for x in v.split(",")], default=SIZES, metavar="N,N",
                    help="message sizes in bytes (default 8,65536,1048576)")
    a = ap.parse_args()
    sizes = a.sizes
    if not shutil.which("ib_send_lat"):
        sys.exit("vs_perftest: perftest is not installed (apt-get install perftest)")
    clock = perftest_clock()
    os.environ.update(matched_env())  # every tool's processes: the allocator settings commbench's ranks use
    points = [("lat", op, poll, size) for op, poll, _, _ in (LAT if a.only != "bandwidth" else []) for size in sizes]
    points += [("bw", op, poll, size) for op, poll, _, _ in (BW if a.only != "latency" else []) for size in sizes]
    tool_of = {(k, op, poll): (tool, extra) for k, rows in (("lat", LAT), ("bw", BW)) for op, poll, tool, extra in rows}

    def measure(who: str, point: tuple) -> float | None:
        kind, op, poll, size = point
        tool, extra = tool_of[(kind, op, poll)]
        if who == "floor" and not (a.floor and op == "send"):
            return None
        if kind == "lat":
            fn = {"perftest": partial(perftest_latency, tool, extra), "commbench": partial(commbench_latency, op, poll),
                  "floor": partial(floor_latency, poll)}[who]
            return fn([size], a.iterations)[size]
        n = bw_messages(size, a.bw_messages)  # the same number of messages for all (commbench: windows of 64)
        run = {"perftest": partial(perftest_bandwidth, tool, extra),
               "commbench": partial(commbench_bandwidth, op, poll), "floor": partial(floor_bandwidth, poll)}[who]
        return run(size, n)

    cmp = Comparison("vs_perftest", ("perftest", "floor", "commbench"), a.rounds, a.raw,
                     {"device": DEV, "gid_index": GID, "points": points, "clock": clock})
    cmp.run(points, measure)
    print(f"# commbench verbs vs perftest on {DEV} (GID {GID}), {a.rounds} rounds (order rotating), medians; "
          "latency one-way p50 us, bandwidth MB/s; cb/pt = median of the rounds' ratios")
    print(f"# perftest's clock: {clock}")
    print(f"{'test':24s} {'size':>8s} {'perftest':>10s} {'commbench':>10s} {'cb/pt':>7s}  rounds")
    floor_rows = []
    for kind, rows, fmt in (("lat", LAT if a.only != "bandwidth" else [], ".2f"),
                            ("bw", BW if a.only != "latency" else [], ".1f")):
        for op, poll, tool, extra in rows:
            for size in sizes:
                pt = (kind, op, poll, size)
                p, c = cmp.of("perftest", pt), cmp.of("commbench", pt)
                ratios = cmp.per_round("commbench", "perftest", pt)
                name = f"{tool}{' -e' if extra else ''}"
                print(f"{name:24s} {size:8d} {statistics.median(p):10{fmt}} {statistics.median(c):10{fmt}} "
                      f"{statistics.median(ratios):7.2f}  {' '.join(f'{r:.2f}' for r in ratios)}")
                if cmp.has("floor", pt):
                    floor_rows.append((name, size, p, cmp.of("floor", pt), c, fmt))
    if floor_rows:
        print("# the floor: bench/pyverbs_floor.py, perftest's loop in bare pyverbs (what Python and pyverbs cost); "
              "fl/pt its ratio to perftest, cb/fl commbench's to it (medians of the rounds' ratios)")
        print(f"{'test':24s} {'size':>8s} {'perftest':>10s} {'floor':>10s} {'commbench':>10s} {'fl/pt':>7s} "
              f"{'cb/fl':>7s}  rounds fl/pt | cb/fl")
        for name, size, p, f, c, fmt in floor_rows:
            fp = [y / x for x, y in zip(p, f, strict=True)]
            cf = [y / x for x, y in zip(f, c, strict=True)]
            print(f"{name:24s} {size:8d} {statistics.median(p):10{fmt}} {statistics.median(f):10{fmt}} "
                  f"{statistics.median(c):10{fmt}} {statistics.median(fp):7.2f} {statistics.median(cf):7.2f}  "
                  f"{' '.join(f'{r:.2f}' for r in fp)} | {' '.join(f'{r:.2f}' for r in cf)}")
    print("# goals: >= 64 KiB within 0.9-1.1x of perftest (latency and bandwidth)")


if __name__ == "__main__":
    main()
