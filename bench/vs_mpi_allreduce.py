"""The emulated ring all-reduce on the mpi transport against native MPI_Allreduce, same MPI, same run.

    .venv/bin/python bench/vs_mpi_allreduce.py [--rounds 5] [--ranks 4] [--size 4M]

Prints busbw of both and the ratio emulated / native (target >= 0.7 at 4 MiB and 4 ranks):
the median of per-round ratios over interleaved rounds. Uses the mpiexec next to this Python.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from commbench.launch.local import mpiexec_env

BIN = Path(sys.executable).parent


def busbw(algorithm: str, ranks: int, size: str) -> float:
    with tempfile.TemporaryDirectory() as d, mpiexec_env() as env:
        out = Path(d) / "r.jsonl"
        subprocess.run([str(BIN / "mpiexec"), "--oversubscribe", "-n", str(ranks), str(BIN / "commbench"),
                        "allreduce", "-t", "mpi", "-a", algorithm, "-b", size, "-e", size, "-o", str(out)],
                       check=True, capture_output=True, env=env)
        return next(json.loads(line) for line in out.read_text().splitlines() if '"row"' in line)["busbw"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--size", default="4M")
    a = ap.parse_args()
    native, ring = [], []
    for r in range(a.rounds):
        native.append(busbw("native", a.ranks, a.size))
        ring.append(busbw("ring", a.ranks, a.size))
        print(f"round {r + 1}/{a.rounds} done", file=sys.stderr)
    ratio = statistics.median(x / y for x, y in zip(ring, native, strict=True))
    print(f"# emulated ring vs MPI_Allreduce, {a.ranks} ranks, {a.size}, {a.rounds} interleaved rounds; busbw GB/s")
    print(f"MPI_Allreduce (native)  {statistics.median(native):8.3f}   rounds: {', '.join(f'{x:.3f}' for x in native)}")
    print(f"ring over mpi transport {statistics.median(ring):8.3f}   rounds: {', '.join(f'{x:.3f}' for x in ring)}")
    print(f"ratio ring / native (median of per-round ratios): {ratio:.3f}  target >= 0.7  "
          f"{'MET' if ratio >= 0.7 else 'MISSED'}")


if __name__ == "__main__":
    main()
