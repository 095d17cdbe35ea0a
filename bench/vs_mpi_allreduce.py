"""The emulated ring all-reduce on the mpi transport against native MPI_Allreduce, same MPI, same run.

    .venv/bin/python bench/vs_mpi_allreduce.py [--rounds 5] [--ranks 4] [--size 4M]

Prints busbw of both and the ratio emulated / native (target >= 0.7 at 4 MiB and 4 ranks): the
median of per-round ratios over rounds whose order rotates (bench/common.py); both run OSU's
collective loop counts for the size and the same allocator settings; raw values go to a JSONL file.
Uses the mpiexec next to this Python.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from common import BIN, Comparison, commbench_rows, matched_env, osu_loops, parse_size


def busbw(algorithm: str, ranks: int, size: int) -> float:
    n, w = osu_loops("collective", size)
    args = ["allreduce", "-t", "mpi", "-a", algorithm, "-b", str(size), "-e", str(size), "-i", str(n), "-x", str(w)]
    rows = commbench_rows(args, matched_env(), [str(BIN / "mpiexec"), "--oversubscribe", "-n", str(ranks)])
    return rows[0]["busbw"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--size", default="4M")
    ap.add_argument("--raw", type=Path, help="raw values to this JSONL file (default: in the cache directory)")
    a = ap.parse_args()
    point = (a.ranks, parse_size(a.size))
    cmp = Comparison("vs_mpi_allreduce", ("native", "ring"), a.rounds, a.raw, {"ranks": a.ranks, "size": point[1]})
    cmp.run([point], lambda algorithm, p: busbw(algorithm, *p))
    native, ring = cmp.of("native", point), cmp.of("ring", point)
    ratio = cmp.ratio("ring", "native", point)
    print(f"# emulated ring vs MPI_Allreduce, {a.ranks} ranks, {a.size}, {a.rounds} rounds (order rotating); "
          "busbw GB/s")
    for label, tool, got in (("MPI_Allreduce (native) ", "native", native), ("ring over mpi transport", "ring", ring)):
        print(f"{label} {cmp.median(tool, point):8.3f}   rounds: {', '.join(f'{x:.3f}' for x in got)}")
    print(f"ratio ring / native (median of per-round ratios): {ratio:.3f}  target >= 0.7  "
          f"{'MET' if ratio >= 0.7 else 'MISSED'}")


if __name__ == "__main__":
    main()
