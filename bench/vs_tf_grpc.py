"""commbench's grpc transport against TensorFlow's own gRPC runtime (the tf-grpc transport), same run.

    .venv/bin/python bench/vs_tf_grpc.py [--rounds 3]

One-way latency (p50) at 8 B and 4 MiB (p2p-latency) and bandwidth at 4 MiB (p2p-bandwidth, window
64) for grpc raw/unary, grpc raw/stream, grpc-cpp unary and tf-grpc, and the C++ gRPC unary
ping-pong of bench/vs_grpc_cpp.py (latency only); rounds interleave them and medians are printed
with the ratios tf-grpc / each (latency: above 1 means TF is slower; bandwidth: above 1 means TF
moves more). Goal: tf-grpc 8 B <= 3x the C++ reference.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from vs_grpc_cpp import build, pingpong  # the C++ gRPC reference ping-pong (bench/ is on sys.path)

CPP = "C++ gRPC unary"

CONFIGS = {"grpc raw/unary": ["-t", "grpc", "--grpc-call", "unary"],
           "grpc raw/stream": ["-t", "grpc", "--grpc-call", "stream"],
           "grpc-cpp unary": ["-t", "grpc-cpp", "--grpc-call", "unary"], "tf-grpc": ["-t", "tf-grpc"]}


def rows(bench: str, args: list[str], extra: list[str]) -> list[dict]:
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "r.jsonl"
        subprocess.run([sys.executable, "-m", "commbench", bench, *args, *extra, "-o", str(out)], check=True,
                       capture_output=True, text=True)
        return [r for r in map(json.loads, out.read_text().splitlines()) if r.get("type") == "row"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    exe = build()
    lat: dict[str, dict[int, list[float]]] = {k: {8: [], 4 << 20: []} for k in [*CONFIGS, CPP]}
    bw: dict[str, list[float]] = {k: [] for k in CONFIGS}
    for r in range(a.rounds):
        for name, args in CONFIGS.items():
            for row in rows("p2p-latency", args, ["-m", "8,4M", "-i", "300", "-x", "30"]):
                lat[name][row["size"]].append(row["p50_us"])
            bw[name] += [row["mb_s"] for row in rows("p2p-bandwidth", args, ["-m", "4M:4M", "-i", "10"])
                         if row["size"] == 4 << 20]
        for size, us in pingpong([str(exe), "server"], [str(exe), "client"], [], "unary", [8, 4 << 20]).items():
            lat[CPP][size].append(us)
        print(f"round {r + 1}/{a.rounds} done", file=sys.stderr)
    med = statistics.median
    print(f"{'transport':18s} {'lat 8B us':>10s} {'lat 4MiB us':>12s} {'bw 4MiB MB/s':>13s}")
    for name in [*CONFIGS, CPP]:
        bws = f"{med(bw[name]):13.1f}" if bw.get(name) else f"{'-':>13s}"
        print(f"{name:18s} {med(lat[name][8]):10.1f} {med(lat[name][4 << 20]):12.1f} {bws}")
    tf = "tf-grpc"
    for ref in ("grpc raw/unary", "grpc raw/stream", "grpc-cpp unary", CPP):
        bws = f", bandwidth 4 MiB x{med(bw[tf]) / med(bw[ref]):.2f}" if bw.get(ref) else ""
        print(f"tf-grpc / {ref}: latency 8 B x{med(lat[tf][8]) / med(lat[ref][8]):.2f}, "
              f"latency 4 MiB x{med(lat[tf][4 << 20]) / med(lat[ref][4 << 20]):.2f}{bws}")
    print("# goal: tf-grpc 8 B <= 3x the C++ reference")


if __name__ == "__main__":
    main()
