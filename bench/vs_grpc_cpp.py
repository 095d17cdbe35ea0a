"""commbench's grpc transport against a C++ gRPC ping-pong and a plain grpcio script, interleaved.

    .venv/bin/python bench/vs_grpc_cpp.py [--rounds 3] [--sizes 8,64K,1M,4M]

Builds bench/grpc_pingpong.cc (gRPC's C++ async API, generic raw-bytes methods, as TensorFlow's
runtime uses gRPC) with g++ and pkg-config's grpc++ into a cache directory outside the repository
(installs Debian's libgrpc++-dev with apt-get if missing and running as root). Each round runs, for
unary calls and for a bidi stream: the C++ reference, bench/grpcio_pingpong.py (a plain grpcio
script: what grpcio can do from Python) and `commbench p2p-latency -t grpc --grpc-call ...`, one after
another, in an order that rotates over the rounds (bench/common.py), each at one size with the same
iteration and warm-up counts (``loops``; commbench's -i/-x, never cut by its point cap) and the same
allocator settings; raw values go to a JSONL file as measured. Prints medians over rounds of the
one-way p50 (us; and MB/s = size / one-way time at the largest size) with the ratios
commbench / C++ and commbench / script (medians of per-round ratios).
Also commbench's grpc-cpp transport (gRPC's C++ API through commbench's extension). Goals: grpc-cpp
8 B <= 1.15x the C++ reference, and its 4 MiB bandwidth >= 0.95x the reference that receives into
memory of its own (C++copy): gRPC's C++ API hands a received message over in its own slices, so
whoever receives into the caller's buffers, as commbench's transports and TensorFlow do
(TensorResponse::ParseTensorSubmessage copies the tensor content out of gRPC's byte buffer), pays that
copy; the ratio to the reference that keeps gRPC's slices is printed too. commbench grpc <= 1.1x the
plain script of the same call type. The references run with the allocator settings commbench's ranks
set for themselves (GLIBC_TUNABLES = commbench.core.measure.buffers.MALLOC_TUNABLES).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

from common import CACHE, Comparison, commbench_rows, free_port, matched_env, parse_size

HERE = Path(__file__).resolve().parent
REF = CACHE / "grpc-ref"
KINDS = ("unary", "stream")


def loops(size: int) -> tuple[int, int]:
    """(iterations, warm-up): OSU's by size, fewer for the slow large ones."""
    return (3000, 300) if size <= 8192 else (1000, 100) if size <= 1 << 20 else (200, 20)


def build() -> Path:
    exe = REF / "grpc_pingpong"
    src = HERE / "grpc_pingpong.cc"
    if exe.exists() and exe.stat().st_mtime > src.stat().st_mtime:
        return exe
    if subprocess.run(["pkg-config", "--exists", "grpc++"], capture_output=True).returncode:
        if os.geteuid() != 0 or not shutil.which("apt-get"):
            sys.exit("vs_grpc_cpp: gRPC's C++ development files are missing: apt-get install libgrpc++-dev pkg-config")
        subprocess.run(["apt-get", "install", "-y", "-q", "libgrpc++-dev", "pkg-config"], check=True,
                       stdout=subprocess.DEVNULL)
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "grpc++"], capture_output=True, text=True,
                           check=True).stdout.split()
    REF.mkdir(parents=True, exist_ok=True)
    p = subprocess.run(["g++", "-O2", "-std=c++17", str(src), "-o", str(exe), *flags], capture_output=True, text=True)
    if p.returncode:
        sys.exit(f"vs_grpc_cpp: building {src.name} failed:\n{p.stderr[-3000:]}")
    return exe


def pingpong(server: list[str], client: list[str], extra: list[str], kind: str, sizes: list[int],
             counts: tuple[int, int] | None = None) -> dict[int, float]:
    """Start a server, run the client once per size (``counts``: iterations and warm-up, else ``loops``);
    {size: one-way p50 us}."""
    port = str(free_port())
    env = matched_env()  # the allocator commbench's ranks run with
    srv = subprocess.Popen([*server, port, *extra], stdout=subprocess.PIPE, text=True, env=env)
    try:
        if srv.stdout.readline().strip() != "listening":
            sys.exit(f"vs_grpc_cpp: {server[0]} did not start")
        out = {}
        for size in sizes:
            n, w = counts or loops(size)
            line = subprocess.run([*client, f"127.0.0.1:{port}", kind, str(size), str(n), str(w), *extra],
                                  capture_output=True, text=True, timeout=600, check=True, env=env).stdout.split()
            out[size] = float(line[1])
        return out
    finally:
        srv.kill()
        srv.wait()


def commbench(transport: str, kind: str, size: int) -> float:
    n, w = loops(size)
    rows = commbench_rows(["p2p-latency", "-t", transport, "--grpc-call", kind, "-m", f"{size}:{size}", "-i", str(n),
                           "-x", str(w)], matched_env())
    return float(rows[0]["p50_us"])


TOOLS = ("C++", "C++copy", "grpc-cpp", "grpcio", "grpciocopy", "grpc")  # references, -t grpc-cpp, scripts, -t grpc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sizes", default="8,64K,1M,4M")
    ap.add_argument("--raw", type=Path, help="raw values to this JSONL file (default: in the cache directory)")
    a = ap.parse_args()
    sizes = [parse_size(s) for s in a.sizes.split(",")]
    exe = build()
    subprocess.run([sys.executable, "-m", "commbench.transports._grpc_cpp"], check=True, stdout=subprocess.DEVNULL)
    py = [sys.executable, str(HERE / "grpcio_pingpong.py")]
    tools = {"C++": ([str(exe), "server"], [str(exe), "client"], []),
             "C++copy": ([str(exe), "server"], [str(exe), "client"], ["copy"]),
             "grpcio": ([*py, "server"], [*py, "client"], []),
             "grpciocopy": ([*py, "server"], [*py, "client"], ["copy"])}
    points = [(kind, size) for kind in KINDS for size in sizes]
    cmp = Comparison("vs_grpc_cpp", TOOLS, a.rounds, a.raw, {"points": points})
    cmp.run(points, lambda name, p: pingpong(*tools[name], p[0], [p[1]])[p[1]] if name in tools else
            commbench(name, *p))

    def ratio(kind: str, size: int, num: str, den: str) -> float:
        return cmp.ratio(num, den, (kind, size))

    print(f"# gRPC ping-pong, one-way p50 us (MB/s at the largest size = size / one-way), {a.rounds} rounds "
          "(order rotating), medians; ratios: medians of per-round ratios")
    print("# C++: bench/grpc_pingpong.cc; C++copy: the same, copying each received message into its own buffer "
          "(as grpc-cpp receives into the caller's); grpc-cpp: commbench -t grpc-cpp; grpcio: "
          "bench/grpcio_pingpong.py; grpciocopy: the same building each message from a buffer and copying each "
          "reply into one (as -t grpc must); grpc: commbench -t grpc")
    print(f"{'call':7s} {'size':>8s} " + " ".join(f"{t[:10]:>10s}" for t in TOOLS) +
          f" {'cpp/C++':>8s} {'cpp/copy':>8s} {'grpc/py':>8s} {'grpc/pyc':>8s}")
    for kind in KINDS:
        for size in sizes:
            med = {t: cmp.median(t, (kind, size)) for t in TOOLS}
            print(f"{kind:7s} {size:8d} " + " ".join(f"{med[t]:10.2f}" for t in TOOLS) +
                  f" {ratio(kind, size, 'grpc-cpp', 'C++'):8.2f} {ratio(kind, size, 'grpc-cpp', 'C++copy'):8.2f}"
                  f" {ratio(kind, size, 'grpc', 'grpcio'):8.2f} {ratio(kind, size, 'grpc', 'grpciocopy'):8.2f}")
        big = max(sizes)
        mbs = {t: big / cmp.median(t, (kind, big)) for t in TOOLS}
        print(f"{kind:7s} {'MB/s':>8s} " + " ".join(f"{mbs[t]:10.1f}" for t in TOOLS) +
              f" {1 / ratio(kind, big, 'grpc-cpp', 'C++'):8.2f} {1 / ratio(kind, big, 'grpc-cpp', 'C++copy'):8.2f}"
              f" {1 / ratio(kind, big, 'grpc', 'grpcio'):8.2f} {1 / ratio(kind, big, 'grpc', 'grpciocopy'):8.2f}")
    print("# goals: grpc-cpp 8 B <= 1.15x C++; grpc <= 1.1x the grpcio script of the same call type; "
          "grpc-cpp MB/s at the largest size >= 0.95x C++copy (the MB/s rows give bandwidth ratios)")


if __name__ == "__main__":
    main()
