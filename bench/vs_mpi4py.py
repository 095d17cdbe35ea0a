"""commbench's mpi transport against ``python -m mpi4py.bench pingpong`` on the same MPI, same run.

    .venv/bin/python bench/vs_mpi4py.py [--rounds 5]

- one-way 8 B latency: commbench p2p-latency -t mpi vs mpi4py.bench (target ratio <= 1.05)
- 1 MiB bandwidth, ping-pong (bytes / one-way time, as mpi4py.bench reports it), target >= 0.95;
  commbench's osu_bw-style p2p-bandwidth at 1 MiB is printed beside it for reference
At 1 MiB mpi4py.bench runs with ``--array none``: bytearray buffers, which CPython zero-fills, so
their pages exist. Its default numpy.empty buffers are never written, so its sends read the kernel's
shared zero page (measured here at 1 MiB: 14.7-16.2 GB/s with them against 12.4-13.5 GB/s with
bytearray), while commbench writes every buffer before measuring. At 8 B it keeps its default.
Rounds interleave the two tools. The verdict uses the median of per-round ratios (the two runs of a
round are seconds apart, so they share the machine's quiet or busy phase); the ratio of the medians
is printed too. Uses the mpiexec next to this Python.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from commbench.launch.local import mpiexec_env

BIN = Path(sys.executable).parent
MIB = 1 << 20


def mpiexec(*args: str) -> str:
    with mpiexec_env() as env:
        return subprocess.run([str(BIN / "mpiexec"), "-n", "2", *args], capture_output=True, text=True,
                              check=True, env=env).stdout


def mpi4py_bench(size: int, array: str = "numpy") -> tuple[float, float]:
    """(one-way mean us, MB/s) from mpi4py.bench pingpong at one size."""
    out = mpiexec(sys.executable, "-m", "mpi4py.bench", "pingpong", "--array", array, "-m", str(size),
                  "-n", str(size))
    m = re.search(rf"^\s*{size}\s+([\d.]+)\s*\|\s*([\d.e+-]+)", out, re.M)
    return float(m.group(2)) * 1e6, float(m.group(1))


def commbench(bench: str, size: int, *flags: str) -> dict:
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "r.jsonl"
        mpiexec(str(BIN / "commbench"), bench, "-t", "mpi", "-m", f"{size}:{size}", "-o", str(out), *flags)
        return next(json.loads(line) for line in out.read_text().splitlines() if '"row"' in line)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    s: dict[str, list[float]] = {k: [] for k in ("m8", "c8", "mbw", "cbw", "cosu")}
    for r in range(a.rounds):
        s["m8"].append(mpi4py_bench(8)[0])
        s["c8"].append(commbench("p2p-latency", 8, "-i", "10000", "-x", "100")["avg_us"])
        s["mbw"].append(mpi4py_bench(MIB, "none")[1])  # mpi4py.bench's default loop for huge sizes
        s["cbw"].append(MIB / commbench("p2p-latency", MIB, "-i", "1000", "-x", "10")["avg_us"])
        s["cosu"].append(commbench("p2p-bandwidth", MIB)["mb_s"])
        print(f"round {r + 1}/{a.rounds} done", file=sys.stderr)
    med = {k: statistics.median(v) for k, v in s.items()}
    rows = [("mpi4py.bench 8 B one-way (us)", "m8"), ("commbench mpi 8 B one-way (us)", "c8"),
            ("mpi4py.bench 1 MiB ping-pong (MB/s)", "mbw"), ("commbench mpi 1 MiB ping-pong (MB/s)", "cbw"),
            ("commbench mpi 1 MiB osu_bw window (MB/s)", "cosu")]
    print(f"# commbench mpi vs mpi4py.bench pingpong, {a.rounds} interleaved rounds; medians")
    for label, k in rows:
        print(f"{label:44s} {med[k]:10.3f}   rounds: {', '.join(f'{x:.3f}' for x in s[k])}")
    lat = statistics.median(c / m for c, m in zip(s["c8"], s["m8"], strict=True))
    bw = statistics.median(c / m for c, m in zip(s["cbw"], s["mbw"], strict=True))
    print(f"ratio of medians: 8 B latency {med['c8'] / med['m8']:.3f}, 1 MiB bandwidth {med['cbw'] / med['mbw']:.3f}")
    print(f"8 B latency, median paired ratio (commbench / mpi4py.bench):    {lat:5.3f}  target <= 1.05  "
          f"{'MET' if lat <= 1.05 else 'MISSED'}")
    print(f"1 MiB bandwidth, median paired ratio (commbench / mpi4py.bench): {bw:5.3f}  target >= 0.95  "
          f"{'MET' if bw >= 0.95 else 'MISSED'}")


if __name__ == "__main__":
    main()
