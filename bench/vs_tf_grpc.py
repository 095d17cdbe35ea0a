"""commbench's grpc transport against TensorFlow's own gRPC runtime (the tf-grpc transport), same run.

    .venv/bin/python bench/vs_tf_grpc.py [--rounds 3]

One-way latency (p50) at 8 B and 4 MiB (p2p-latency) and bandwidth at 4 MiB (p2p-bandwidth, window
64) for grpc raw/unary, grpc raw/stream, grpc-cpp unary and tf-grpc, the C++ gRPC unary
ping-pong of bench/vs_grpc_cpp.py, and a plain TensorFlow script doing what the tf-grpc transport
does (bench/tf_pingpong.py: as many round trips per tf.function, and 4x as many to show TF's
per-transfer cost alone) (latency only); latency with the same counts for commbench and the C++
reference (300 iterations, 30 warm-up), the same allocator settings, in an order that rotates over
the rounds (bench/common.py), raw values to a JSONL file; medians are printed with the ratios
tf-grpc / each (latency: above 1 means TF is slower; bandwidth: above 1 means TF moves more).
Goals: tf-grpc 8 B <= 1.1x the plain TF script (commbench adds nothing to TF's cost) and <= 3x the
C++ reference (what TF itself costs per transfer; TF's, not commbench's).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

from common import Comparison, commbench_rows, matched_env
from vs_grpc_cpp import build, pingpong  # the C++ gRPC reference ping-pong (bench/ is on sys.path)

from commbench.core.measure.message import Message
from commbench.transports.tf_grpc import rounds_per_function

CPP = "C++ gRPC unary"
SCRIPT, SCRIPT4 = "TF script", "TF script x4"  # bench/tf_pingpong.py: the transport's round trips per function, 4x
LAT_COUNTS = (300, 30)  # iterations, warm-up: commbench's and the C++ reference's

CONFIGS = {"grpc raw/unary": ["-t", "grpc", "--grpc-call", "unary"],
           "grpc raw/stream": ["-t", "grpc", "--grpc-call", "stream"],
           "grpc-cpp unary": ["-t", "grpc-cpp", "--grpc-call", "unary"], "tf-grpc": ["-t", "tf-grpc"]}
POINTS = [("lat", 8), ("lat", 4 << 20), ("bw", 4 << 20)]


def tf_script(size: int, times: int) -> float:
    """bench/tf_pingpong.py's one-way p50 (us) with `times` x the transport's round trips per function."""
    k = times * rounds_per_function(Message((size,)))
    iters = max(10, 5000 // k)
    out = subprocess.run([sys.executable, str(Path(__file__).with_name("tf_pingpong.py")), str(size), str(k),
                          str(iters), str(max(2, iters // 10))], check=True, capture_output=True, text=True,
                         timeout=600).stdout.split()
    return float(out[2])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--raw", type=Path, help="raw values to this JSONL file (default: in the cache directory)")
    a = ap.parse_args()
    exe = build()
    refs = [CPP, SCRIPT, SCRIPT4]
    os.environ.update(matched_env())

    def measure(name: str, point: tuple) -> float | None:
        what, size = point
        if name in CONFIGS:
            if what == "lat":
                n, w = LAT_COUNTS
                return commbench_rows(["p2p-latency", *CONFIGS[name], "-m", f"{size}:{size}", "-i", str(n), "-x",
                                       str(w)])[0]["p50_us"]
            return commbench_rows(["p2p-bandwidth", *CONFIGS[name], "-m", f"{size}:{size}", "-i", "10"])[0]["mb_s"]
        if what == "bw":
            return None
        if name == CPP:
            return pingpong([str(exe), "server"], [str(exe), "client"], [], "unary", [size], LAT_COUNTS)[size]
        return tf_script(size, 1 if name == SCRIPT else 4)

    cmp = Comparison("vs_tf_grpc", (*CONFIGS, *refs), a.rounds, a.raw, {"points": POINTS})
    cmp.run(POINTS, measure)
    lat = {k: {size: cmp.of(k, ("lat", size)) for size in (8, 4 << 20)} for k in (*CONFIGS, *refs)}
    bw = {k: cmp.of(k, ("bw", 4 << 20)) for k in CONFIGS}
    med = statistics.median
    print(f"{'transport':18s} {'lat 8B us':>10s} {'lat 4MiB us':>12s} {'bw 4MiB MB/s':>13s}")
    for name in [*CONFIGS, *refs]:
        bws = f"{med(bw[name]):13.1f}" if bw.get(name) else f"{'-':>13s}"
        print(f"{name:18s} {med(lat[name][8]):10.1f} {med(lat[name][4 << 20]):12.1f} {bws}")
    tf = "tf-grpc"
    for ref in ("grpc raw/unary", "grpc raw/stream", "grpc-cpp unary", CPP, SCRIPT, SCRIPT4):
        bws = f", bandwidth 4 MiB x{med(bw[tf]) / med(bw[ref]):.2f}" if bw.get(ref) else ""
        print(f"tf-grpc / {ref}: latency 8 B x{med(lat[tf][8]) / med(lat[ref][8]):.2f}, "
              f"latency 4 MiB x{med(lat[tf][4 << 20]) / med(lat[ref][4 << 20]):.2f}{bws}")
    print("# goals: tf-grpc 8 B <= 1.1x the TF script (commbench's share); <= 3x the C++ reference (TF's own "
          "cost per transfer: compare the TF script x4)")


if __name__ == "__main__":
    main()
