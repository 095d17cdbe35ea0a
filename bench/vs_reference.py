"""commbench against the reference tools, measured in the same run, printed as ratios.

    .venv/bin/python bench/vs_reference.py [--rounds 3] [--seconds 3]

- tcp 64 B one-way latency, blocking: commbench vs `sockperf ping-pong --tcp` (target ratio <= 1.25)
- tcp 4 MiB bandwidth: commbench (osu_bw loop) vs `iperf3` (target ratio >= 0.95)
- grpc vs tcp at 8 B (latency) and 4 MiB (bandwidth), each gRPC mode
Every tool runs for the same seconds, with the same allocator settings, in an order that rotates over
the rounds (bench/common.py), so that the machine's slow and quick phases hit all alike; raw values
go to a JSONL file; each ratio is of the medians over rounds. Installs sockperf and iperf3 with
apt-get if missing (root).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import Comparison, free_port, imported, matched_env, need

PY = sys.executable


def server(cmd: list[str]) -> subprocess.Popen:
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    return p


def sockperf_latency(size: int, seconds: float) -> float:
    port = free_port()
    srv = server(["sockperf", "server", "--tcp", "-i", "127.0.0.1", "-p", str(port)])
    try:
        out = subprocess.run(["sockperf", "ping-pong", "--tcp", "-i", "127.0.0.1", "-p", str(port), "-m", str(size),
                              "-t", str(int(seconds))], capture_output=True, text=True, check=True).stdout
    finally:
        srv.kill()
        srv.wait()
    return imported("sockperf", out, size=size).rows[0]["avg_us"]


def iperf3_mbs(seconds: float, length: str | None) -> float:
    port = free_port()
    srv = server(["iperf3", "-s", "-1", "-p", str(port)])
    try:
        cmd = ["iperf3", "-c", "127.0.0.1", "-p", str(port), "-t", str(int(seconds)), "-J"]
        out = subprocess.run([*cmd, *(["-l", length] if length else [])], capture_output=True, text=True,
                             check=True).stdout
    finally:
        srv.wait(10)
    return imported("iperf3", out).rows[0]["mb_s"]


def commbench(bench: str, size: str, seconds: float, *flags: str) -> float:
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "r.jsonl"
        subprocess.run([PY, "-m", "commbench", bench, "-m", f"{size}:{size}", "--time", str(seconds),
                        "--warmup-time", "1", "-o", str(out), *flags], check=True, stdout=subprocess.DEVNULL)
        row = next(json.loads(line) for line in out.read_text().splitlines() if '"row"' in line)
    return row["avg_us"] if bench == "p2p-latency" else row["mb_s"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--raw", type=Path, help="raw values to this JSONL file (default: in the cache directory)")
    a = ap.parse_args()
    for tool in ("sockperf", "iperf3"):
        need(tool)
    s = a.seconds
    probes = {
        "sockperf 64B lat (us)": lambda: sockperf_latency(64, s),
        "commbench tcp 64B lat blocking (us)": lambda: commbench("p2p-latency", "64", s, "-t", "tcp"),
        "commbench tcp 64B lat busy-poll (us)": lambda: commbench("p2p-latency", "64", s, "--poll", "busy"),
        "iperf3 default 128K writes (MB/s)": lambda: iperf3_mbs(s, None),
        "iperf3 -l 1M (MB/s)": lambda: iperf3_mbs(s, "1M"),
        "commbench tcp 4M bw (MB/s)": lambda: commbench("p2p-bandwidth", "4M", s, "-t", "tcp"),
        "commbench tcp 8B lat (us)": lambda: commbench("p2p-latency", "8", s, "-t", "tcp"),
    }
    for mode in ("raw", "proto"):
        for call in ("unary", "stream"):
            flags = ("-t", "grpc", "--grpc-mode", mode, "--grpc-call", call)
            probes[f"commbench grpc {mode}/{call} 8B lat (us)"] = lambda f=flags: commbench("p2p-latency", "8", s, *f)
            probes[f"commbench grpc {mode}/{call} 4M bw (MB/s)"] = lambda f=flags: commbench("p2p-bandwidth", "4M",
                                                                                           s, *f)
    os.environ.update(matched_env())
    cmp = Comparison("vs_reference", tuple(probes), a.rounds, a.raw, {"seconds": s})
    cmp.run([("all",)], lambda name, _: probes[name]())
    samples = {k: cmp.of(k, ("all",)) for k in probes}
    med = {k: statistics.median(v) for k, v in samples.items()}
    print(f"# commbench vs reference tools, {a.rounds} rounds (order rotating) of {s:g} s each; medians")
    for k, v in samples.items():
        print(f"{k:44s} {med[k]:10.2f}   rounds: {', '.join(f'{x:.2f}' for x in v)}")
    iperf = max(med["iperf3 default 128K writes (MB/s)"], med["iperf3 -l 1M (MB/s)"])
    lat_ratio = med["commbench tcp 64B lat blocking (us)"] / med["sockperf 64B lat (us)"]
    bw_ratio = med["commbench tcp 4M bw (MB/s)"] / iperf
    print("# ratios")
    print(f"tcp 64B latency, commbench blocking / sockperf:  {lat_ratio:6.2f}   target <= 1.25  "
          f"{'MET' if lat_ratio <= 1.25 else 'MISSED'}")
    print(f"tcp 64B latency, commbench busy-poll / sockperf: "
          f"{med['commbench tcp 64B lat busy-poll (us)'] / med['sockperf 64B lat (us)']:6.2f}   (not like with like: "
          "sockperf waits in epoll)")
    print(f"tcp 4MiB bandwidth, commbench / best iperf3:     {bw_ratio:6.2f}   target >= 0.95  "
          f"{'MET' if bw_ratio >= 0.95 else 'MISSED'}")
    for mode in ("raw", "proto"):
        for call in ("unary", "stream"):
            lat = med[f"commbench grpc {mode}/{call} 8B lat (us)"] / med["commbench tcp 8B lat (us)"]
            bw = med[f"commbench grpc {mode}/{call} 4M bw (MB/s)"] / med["commbench tcp 4M bw (MB/s)"]
            print(f"grpc {mode}/{call} / tcp: 8B latency x{lat:5.2f}, 4MiB bandwidth x{bw:5.2f}")


if __name__ == "__main__":
    main()
