"""Python's floor under the gaps bench/vs_*.py leave: each reference beside its own loop in plain
Python, every iteration timed as commbench times it (bench/floor_loops.py), and commbench, in one run,
interleaved (bench/common.py: rounds, rotating order, raw values as measured).

    .venv/bin/python bench/floors.py [--rounds 5] [--only tcp-lat,tcp-bw,mpi-bw,allreduce]

- tcp-lat: 64 B TCP ping-pong on loopback, mean one-way us: sockperf ping-pong (C) | the plain loop
  (sendall, recv_into with MSG_WAITALL; blocking, TCP_NODELAY) | commbench p2p-latency -t tcp (blocking);
- tcp-bw: 4 MiB messages over one TCP connection for 3 s after 1 s of warm-up, MB/s: iperf3 -l 1M (C,
  a stream) | osu_bw's loop in plain Python (windows of 64 sendall, a 4 B ack) | commbench
  p2p-bandwidth -t tcp --time 3;
- mpi-bw: osu_bw at 8 B (windows of 64, OSU's 100 + 10), MB/s: OMB-Py (one clock read around the whole
  loop) | OMB-Py's loop with each window timed | commbench p2p-bandwidth -t mpi;
- allreduce: 4 ranks (two cores: oversubscribed, as in vs_osu.py), MPI_Allreduce of float32 at 4 B and
  64 KiB, mean us over ranks: OMB-Py | its loop with each call timed | commbench allreduce -a native.

Per figure: commbench / plain (commbench's own cost over the plain loop: near 1, commbench stands on
Python's floor) and plain / reference (what Python, or timing each iteration, costs against the
reference: the part of the gap no Python tool that keeps per-iteration samples can close). Medians of
per-round ratios.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from common import BIN, Comparison, commbench_rows, free_port, matched_env, need, osu_loops
from vs_osu import ENV, TARBALL, build, measure, mpiexec, mpiexec_cmd
from vs_reference import iperf3_mbs, sockperf_latency

HERE = Path(__file__).resolve().parent
LOOPS = str(HERE / "floor_loops.py")
FIGURES = {"tcp-lat": [("tcp-lat", 64)], "tcp-bw": [("tcp-bw", 4 << 20)], "mpi-bw": [("bw", 8)],
           "allreduce": [("allreduce", 4), ("allreduce", 65536)]}
TOOLS = ("reference", "plain", "commbench")
SECONDS = 3  # sockperf's run; the plain loop and commbench run OSU's 10,000 + 100


def plain_tcp(size: int, stream: bool = False) -> float:
    port = free_port()
    srv = subprocess.Popen([sys.executable, LOOPS, "tcp-sink" if stream else "tcp-server", str(port)])
    args = ["tcp-stream", str(port), str(size), str(SECONDS)] if stream else \
        ["tcp-client", str(port), str(size), *map(str, osu_loops("latency", size))]
    try:
        for _ in range(50):  # until it listens
            time.sleep(0.1)
            try:
                out = subprocess.run([sys.executable, LOOPS, *args], capture_output=True, text=True, check=True,
                                     timeout=300).stdout
                return float(out.split()[0])
            except subprocess.CalledProcessError:
                continue
        sys.exit("floors: the plain tcp loop's server never listened")
    finally:
        srv.kill()
        srv.wait()


def value(src: Path, a: argparse.Namespace, env: dict, env_py: dict, tool: str, point: tuple) -> float:
    name, size = point
    if name == "tcp-bw":
        if tool == "reference":
            return iperf3_mbs(SECONDS, "1M")
        if tool == "plain":
            return plain_tcp(size, stream=True)
        rows = commbench_rows(["p2p-bandwidth", "-t", "tcp", "-m", f"{size}:{size}", "--time", str(SECONDS),
                               "--warmup-time", "1"], env)
        return float(rows[0]["mb_s"])
    if name == "tcp-lat":
        if tool == "reference":
            return sockperf_latency(size, SECONDS)
        if tool == "plain":
            return plain_tcp(size)
        iters, warmup = osu_loops("latency", size)
        rows = commbench_rows(["p2p-latency", "-t", "tcp", "-m", f"{size}:{size}", "-i", str(iters), "-x",
                               str(warmup)], env)
        return float(rows[0]["avg_us"])
    if tool == "plain":
        n = 4 if name == "allreduce" else 2
        iters, warmup = osu_loops("collective" if name == "allreduce" else "bw", size)
        what = "allreduce" if name == "allreduce" else "mpi-bw"
        return float(mpiexec(n, [sys.executable, LOOPS, what, str(size), str(iters), str(warmup)], env).split()[0])
    return measure(src, a, env, env_py, "omb_py" if tool == "reference" else "commbench", point)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--only", default=",".join(FIGURES), help="figures, comma-separated: " + ", ".join(FIGURES))
    ap.add_argument("--raw", type=Path, help="raw values to this JSONL file (default: in the cache directory)")
    a = ap.parse_args()
    a.hugepages = "off"
    figures = [f for f in a.only.split(",") if f]
    if unknown := set(figures) - set(FIGURES):
        sys.exit(f"floors: unknown figure(s) {', '.join(sorted(unknown))}; choose from {', '.join(FIGURES)}")
    for figure, tool in (("tcp-lat", "sockperf"), ("tcp-bw", "iperf3")):
        if figure in figures:
            need(tool)
    src = build(TARBALL) if set(figures) - {"tcp-lat", "tcp-bw"} else Path()
    env = matched_env("off", ENV)
    env_py = dict(env, PYTHONPATH=str(src / "python"))
    points = [p for f in figures for p in FIGURES[f]]
    cmp = Comparison("floors", TOOLS, a.rounds, a.raw, {"points": points, "mpiexec": mpiexec_cmd(2),
                                                         "python": str(BIN / "python")})
    cmp.run(points, lambda tool, point: value(src, a, env, env_py, tool, point))
    print(f"# Python's floor under the gaps: {a.rounds} rounds (order rotating), medians; ratios: medians of "
          "per-round ratios")
    print("# tcp-lat: mean one-way us (sockperf); tcp-bw: MB/s (iperf3 -l 1M); bw: MB/s (OMB-Py osu_bw); allreduce: "
          "mean us over 4 ranks (OMB-Py osu_allreduce)")
    print(f"{'figure':10s} {'size':>6s} {'reference':>10s} {'plain':>10s} {'commbench':>10s} {'cb/plain':>9s} "
          f"{'plain/ref':>9s} {'cb/ref':>7s}")
    for p in points:
        med = {t: cmp.median(t, p) for t in TOOLS}
        print(f"{p[0]:10s} {p[1]:6d} {med['reference']:10.2f} {med['plain']:10.2f} {med['commbench']:10.2f} "
              f"{cmp.ratio('commbench', 'plain', p):9.3f} {cmp.ratio('plain', 'reference', p):9.3f} "
              f"{cmp.ratio('commbench', 'reference', p):7.3f}")
    print("# tcp-bw and bw are higher-better: there a ratio below 1 is the slower; elsewhere above 1 is")


if __name__ == "__main__":
    main()
