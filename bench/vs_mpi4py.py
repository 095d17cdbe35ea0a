"""commbench's mpi transport against ``python -m mpi4py.bench pingpong`` on the same MPI, same run.

    .venv/bin/python bench/vs_mpi4py.py [--rounds 5]

- one-way 8 B latency: commbench p2p-latency -t mpi vs mpi4py.bench (target ratio <= 1.05)
- 1 MiB bandwidth, ping-pong (bytes / one-way time, as mpi4py.bench reports it), target >= 0.95;
  commbench's osu_bw-style p2p-bandwidth at 1 MiB is printed beside it for reference
At 1 MiB mpi4py.bench runs with ``--array none``: bytearray buffers, which CPython zero-fills, so
their pages exist. Its default numpy.empty buffers are never written, so its sends read the kernel's
shared zero page (measured here at 1 MiB: 14.7-16.2 GB/s with them against 12.4-13.5 GB/s with
bytearray), while commbench writes every buffer before measuring. At 8 B it keeps its default.
Both run OSU's loop counts for the size (handed to each explicitly), with the same allocator settings,
in an order that rotates over the rounds (bench/common.py); raw values go to a JSONL file. The
verdict uses the median of per-round ratios (the two runs of a round are seconds apart, so they share
the machine's quiet or busy phase); the ratio of the medians is printed too. Uses the mpiexec next to
this Python.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

from common import BIN, Comparison, commbench_rows, matched_env, osu_loops

from commbench.launch.local import mpiexec_env

MIB = 1 << 20
POINTS = [("latency", 8), ("pingpong", MIB), ("osu_bw", MIB)]


def mpiexec(*args: str) -> str:
    with mpiexec_env(matched_env()) as env:
        return subprocess.run([str(BIN / "mpiexec"), "-n", "2", *args], capture_output=True, text=True,
                              check=True, env=env).stdout


def mpi4py_bench(size: int, array: str = "numpy") -> tuple[float, float]:
    """(one-way mean us, MB/s) from mpi4py.bench pingpong at one size, with OSU's loop counts for it."""
    n, w = map(str, osu_loops("latency", size))
    out = mpiexec(sys.executable, "-m", "mpi4py.bench", "pingpong", "--array", array, "-m", str(size),
                  "-n", str(size), "-s", w, "-l", n, "--skip-large", w, "--loop-large", n, "--skip-huge", w,
                  "--loop-huge", n)
    m = re.search(rf"^\s*{size}\s+([\d.]+)\s*\|\s*([\d.e+-]+)", out, re.M)
    return float(m.group(2)) * 1e6, float(m.group(1))


def commbench(bench: str, size: int) -> dict:
    n, w = osu_loops("bw" if bench == "p2p-bandwidth" else "latency", size)
    rows = commbench_rows([bench, "-t", "mpi", "-m", f"{size}:{size}", "-i", str(n), "-x", str(w)], matched_env(),
                          [str(BIN / "mpiexec"), "-n", "2"])
    return rows[0]


def measure(tool: str, point: tuple) -> float | None:
    what, size = point
    if tool == "mpi4py.bench":
        return None if what == "osu_bw" else mpi4py_bench(size, "none" if size >= MIB else "numpy")[what != "latency"]
    if what == "osu_bw":
        return commbench("p2p-bandwidth", size)["mb_s"]
    us = commbench("p2p-latency", size)["avg_us"]
    return us if what == "latency" else size / us


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--raw", type=Path, help="raw values to this JSONL file (default: in the cache directory)")
    a = ap.parse_args()
    cmp = Comparison("vs_mpi4py", ("mpi4py.bench", "commbench"), a.rounds, a.raw, {"points": POINTS})
    cmp.run(POINTS, measure)
    rows = [("mpi4py.bench 8 B one-way (us)", "mpi4py.bench", POINTS[0]),
            ("commbench mpi 8 B one-way (us)", "commbench", POINTS[0]),
            ("mpi4py.bench 1 MiB ping-pong (MB/s)", "mpi4py.bench", POINTS[1]),
            ("commbench mpi 1 MiB ping-pong (MB/s)", "commbench", POINTS[1]),
            ("commbench mpi 1 MiB osu_bw window (MB/s)", "commbench", POINTS[2])]
    print(f"# commbench mpi vs mpi4py.bench pingpong, {a.rounds} rounds (order rotating); medians")
    for label, tool, p in rows:
        print(f"{label:44s} {cmp.median(tool, p):10.3f}   rounds: {', '.join(f'{x:.3f}' for x in cmp.of(tool, p))}")
    lat, bw = cmp.ratio("commbench", "mpi4py.bench", POINTS[0]), cmp.ratio("commbench", "mpi4py.bench", POINTS[1])
    of_medians = [cmp.median("commbench", p) / cmp.median("mpi4py.bench", p) for p in POINTS[:2]]
    print(f"ratio of medians: 8 B latency {of_medians[0]:.3f}, 1 MiB bandwidth {of_medians[1]:.3f}")
    print(f"8 B latency, median paired ratio (commbench / mpi4py.bench):    {lat:5.3f}  target <= 1.05  "
          f"{'MET' if lat <= 1.05 else 'MISSED'}")
    print(f"1 MiB bandwidth, median paired ratio (commbench / mpi4py.bench): {bw:5.3f}  target >= 0.95  "
          f"{'MET' if bw >= 0.95 else 'MISSED'}")


if __name__ == "__main__":
    main()
