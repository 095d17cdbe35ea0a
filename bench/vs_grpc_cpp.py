"""commbench's grpc transport against a C++ gRPC ping-pong and a plain grpcio script, interleaved.

    .venv/bin/python bench/vs_grpc_cpp.py [--rounds 3] [--sizes 8,64K,1M,4M]

Builds bench/grpc_pingpong.cc (gRPC's C++ async API, generic raw-bytes methods, as TensorFlow's
runtime uses gRPC) with g++ and pkg-config's grpc++ into a cache directory outside the repository
(installs Debian's libgrpc++-dev with apt-get if missing and running as root). Each round runs, for
unary calls and for a bidi stream: the C++ reference, bench/grpcio_pingpong.py (a plain grpcio
script: what grpcio can do from Python) and `commbench p2p-latency -t grpc --grpc-call ...`, one after
another. Prints medians over rounds of the one-way p50 (us; and MB/s = size / one-way time at the
largest size) with the ratios commbench / C++ and commbench / script (medians of per-round ratios).
Goals: commbench grpc <= 1.1x the plain script of the same call type.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent
HERE = Path(__file__).resolve().parent
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "commbench" / "grpc-ref"
KINDS = ("unary", "stream")


def parse_size(text: str) -> int:
    mult = {"K": 1 << 10, "M": 1 << 20}.get(text[-1:].upper(), 1)
    return int(text[:-1] if mult > 1 else text) * mult


def loops(size: int) -> tuple[int, int]:
    """(iterations, warm-up): OSU's by size, fewer for the slow large ones."""
    return (3000, 300) if size <= 8192 else (1000, 100) if size <= 1 << 20 else (200, 20)


def build() -> Path:
    exe = CACHE / "grpc_pingpong"
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
    CACHE.mkdir(parents=True, exist_ok=True)
    p = subprocess.run(["g++", "-O2", "-std=c++17", str(src), "-o", str(exe), *flags], capture_output=True, text=True)
    if p.returncode:
        sys.exit(f"vs_grpc_cpp: building {src.name} failed:\n{p.stderr[-3000:]}")
    return exe


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pingpong(server: list[str], client: list[str], kind: str, sizes: list[int]) -> dict[int, float]:
    """Start a server, run the client once per size; {size: one-way p50 us}."""
    port = str(free_port())
    srv = subprocess.Popen([*server, port], stdout=subprocess.PIPE, text=True)
    try:
        if srv.stdout.readline().strip() != "listening":
            sys.exit(f"vs_grpc_cpp: {server[0]} did not start")
        out = {}
        for size in sizes:
            n, w = loops(size)
            line = subprocess.run([*client, f"127.0.0.1:{port}", kind, str(size), str(n), str(w)],
                                  capture_output=True, text=True, timeout=600, check=True).stdout.split()
            out[size] = float(line[1])
        return out
    finally:
        srv.kill()
        srv.wait()


def commbench(kind: str, sizes: list[int]) -> dict[int, float]:
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "r.jsonl"
        subprocess.run([str(BIN / "commbench"), "p2p-latency", "-t", "grpc", "--grpc-call", kind, "-m",
                        ",".join(map(str, sizes)), "-o", str(f)], check=True, stdout=subprocess.DEVNULL)
        rows = [json.loads(x) for x in f.read_text().splitlines() if '"row"' in x]
    return {int(r["size"]): float(r["p50_us"]) for r in rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sizes", default="8,64K,1M,4M")
    a = ap.parse_args()
    sizes = [parse_size(s) for s in a.sizes.split(",")]
    exe = build()
    py = [sys.executable, str(HERE / "grpcio_pingpong.py")]
    tools = {"C++": ([str(exe), "server"], [str(exe), "client"]), "grpcio": ([*py, "server"], [*py, "client"])}
    rounds = []
    t0 = time.monotonic()
    for r in range(a.rounds):
        got = {}
        for kind in KINDS:
            for name, (srv, cli) in tools.items():
                got[(name, kind)] = pingpong(srv, cli, kind, sizes)
            got[("commbench", kind)] = commbench(kind, sizes)
        rounds.append(got)
        print(f"round {r + 1}/{a.rounds} done ({time.monotonic() - t0:.0f} s)", file=sys.stderr, flush=True)
    print(f"# gRPC ping-pong, one-way p50 us (MB/s at the largest size = size / one-way), {a.rounds} interleaved "
          "rounds, medians; ratios: medians of per-round ratios")
    print(f"{'call':7s} {'size':>8s} {'C++':>10s} {'grpcio':>10s} {'commbench':>10s} {'cb/C++':>8s} {'cb/grpcio':>9s}")
    for kind in KINDS:
        for size in sizes:
            v = {t: [rd[(t, kind)][size] for rd in rounds] for t in ("C++", "grpcio", "commbench")}
            med = {t: statistics.median(x) for t, x in v.items()}
            rc = statistics.median(c / o for c, o in zip(v["commbench"], v["C++"], strict=True))
            rp = statistics.median(c / o for c, o in zip(v["commbench"], v["grpcio"], strict=True))
            print(f"{kind:7s} {size:8d} {med['C++']:10.2f} {med['grpcio']:10.2f} {med['commbench']:10.2f} "
                  f"{rc:8.2f} {rp:9.2f}")
        big = max(sizes)
        mbs = {t: big / statistics.median(rd[(t, kind)][big] for rd in rounds) for t in ("C++", "grpcio", "commbench")}
        print(f"{kind:7s} {'MB/s':>8s} {mbs['C++']:10.1f} {mbs['grpcio']:10.1f} {mbs['commbench']:10.1f}")
    print("# goal: commbench grpc <= 1.1x the plain grpcio script of the same call type")


if __name__ == "__main__":
    main()
