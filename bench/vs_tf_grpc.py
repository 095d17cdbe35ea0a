"""commbench's grpc transport against TensorFlow's own gRPC runtime (the tf-grpc transport), same run.

    .venv/bin/python bench/vs_tf_grpc.py [--rounds 3]

One-way latency at 8 B and 4 MiB (p2p-latency) and bandwidth at 4 MiB (p2p-bandwidth, window 64)
for grpc raw/unary, grpc raw/stream and tf-grpc; rounds interleave the transports and medians are
printed with the ratio tf-grpc / grpc (latency: above 1 means TF is slower; bandwidth: above 1
means TF moves more). No target: TF is the reference here, not the bar.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CONFIGS = {"grpc raw/unary": ["-t", "grpc", "--grpc-call", "unary"],
           "grpc raw/stream": ["-t", "grpc", "--grpc-call", "stream"], "tf-grpc": ["-t", "tf-grpc"]}


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
    lat: dict[str, dict[int, list[float]]] = {k: {8: [], 4 << 20: []} for k in CONFIGS}
    bw: dict[str, list[float]] = {k: [] for k in CONFIGS}
    for r in range(a.rounds):
        for name, args in CONFIGS.items():
            for row in rows("p2p-latency", args, ["-m", "8,4M", "-i", "300", "-x", "30"]):
                lat[name][row["size"]].append(row["avg_us"])
            bw[name] += [row["mb_s"] for row in rows("p2p-bandwidth", args, ["-m", "4M:4M", "-i", "10"])
                         if row["size"] == 4 << 20]
        print(f"round {r + 1}/{a.rounds} done", file=sys.stderr)
    med = statistics.median
    print(f"{'transport':18s} {'lat 8B us':>10s} {'lat 4MiB us':>12s} {'bw 4MiB MB/s':>13s}")
    for name in CONFIGS:
        print(f"{name:18s} {med(lat[name][8]):10.1f} {med(lat[name][4 << 20]):12.1f} {med(bw[name]):13.1f}")
    tf = "tf-grpc"
    for ref in ("grpc raw/unary", "grpc raw/stream"):
        print(f"tf-grpc / {ref}: latency 8 B x{med(lat[tf][8]) / med(lat[ref][8]):.2f}, "
              f"latency 4 MiB x{med(lat[tf][4 << 20]) / med(lat[ref][4 << 20]):.2f}, "
              f"bandwidth 4 MiB x{med(bw[tf]) / med(bw[ref]):.2f}")


if __name__ == "__main__":
    main()
