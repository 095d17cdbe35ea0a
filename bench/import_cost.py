"""What `commbench import` costs in time and peak memory against the size of its input.

Writes OSU latency outputs of 1, 10 and 100 MB (a header and result lines, as osu_latency prints them)
and one with a 112-byte line of long numbers (the shape that once backtracked for hours), imports each
with ``-o`` in a process of its own, and reports its wall time and peak RSS beside the reference
measured in the same run: the same interpreter reading the same file into a str (what any importer
must do at least). The goal: time and memory linear in the input, at most 1 s and 50 MB per MB
beyond the reference. ``--print`` imports without ``-o`` (the rows printed as ``show`` prints them);
``--tree DIR`` imports with another checkout (``python -m commbench`` run with DIR as the working
directory), for a before/after.

    python bench/import_cost.py                      # this tree, 1/10/100 MB
    python bench/import_cost.py --tree /tmp/old --sizes 1,10 --limit 120
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

HEAD = "# OSU MPI Latency Test v7.4\n# Datatype: MPI_CHAR.\n# Size       Avg Latency(us)\n"
PEAK = ("import resource, subprocess, sys, time\n"
        "t = time.monotonic()\n"
        "try:\n"
        "    rc = subprocess.run(sys.argv[2:], cwd=sys.argv[1], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,"
        " timeout=float(__import__('os').environ['LIMIT'])).returncode\n"
        "except subprocess.TimeoutExpired:\n"
        "    rc = 'timeout'\n"
        "print(rc, time.monotonic() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n")


def osu_file(path: Path, mb: float, seed: int = 1) -> None:
    rng = random.Random(seed)
    with path.open("w") as f:
        f.write(HEAD)
        n = 0
        while n < mb * 1e6:
            line = f"{rng.randint(1, 1 << 22):<10} {rng.random() * 100:>18.2f}\n"
            f.write(line)
            n += len(line)


def measure(cwd: str, cmd: list[str], limit: float) -> tuple[str, float, float]:
    """(exit status or 'timeout', seconds, peak RSS in MB) of ``cmd`` run in a fresh wrapper process."""
    out = subprocess.run([sys.executable, "-c", PEAK, cwd, *cmd], capture_output=True, text=True,
                         env={**os.environ, "LIMIT": str(limit)}).stdout.split()
    return out[0], float(out[1]), float(out[2]) / 1024


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", default=str(Path(__file__).resolve().parent.parent), help="checkout to import with")
    ap.add_argument("--sizes", default="1,10,100", help="input sizes, MB (comma-separated)")
    ap.add_argument("--limit", type=float, default=600.0, help="seconds an import may take before it is stopped")
    ap.add_argument("--print", action="store_true", help="import without -o: the rows printed as show prints them")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        cases = []
        for mb in (float(x) for x in a.sizes.split(",")):
            f = Path(d) / f"osu-{mb:g}MB.txt"
            osu_file(f, mb)
            cases.append((f"{mb:g} MB", f))
        line = Path(d) / "osu-112B-line.txt"
        line.write_text(HEAD + "1 0.25\n8 " + " ".join(["1" * 20] * 5) + " note\n")  # 112 B: numbers and a word
        cases.append(("112-byte line", line))
        print(f"# commbench import {a.tree} ({'printed' if a.print else '-o FILE'}): OSU latency outputs; reference: "
              "python reading the file into a str")
        print(f"{'input':>14} {'MB':>8} {'status':>8} {'s':>8} {'peak MB':>8} {'ref s':>7} {'ref MB':>7}")
        got = []
        for name, f in cases:
            size = f.stat().st_size / 1e6
            out = Path(d) / "out.jsonl"
            out.unlink(missing_ok=True)
            status, secs, peak = measure(a.tree, [sys.executable, "-m", "commbench", "import", str(f),
                                                  *([] if a.print else ["-o", str(out)])], a.limit)
            _, ref_s, ref_mb = measure(a.tree, [sys.executable, "-c", f"open({str(f)!r}).read()"], a.limit)
            print(f"{name:>14} {size:8.3f} {status:>8} {secs:8.2f} {peak:8.1f} {ref_s:7.2f} {ref_mb:7.1f}")
            sys.stdout.flush()
            if size >= 0.5 and status == "0":
                got.append((size, secs - ref_s, peak - ref_mb))
        if len(got) >= 2:  # the slope between the smallest and the largest: what one more MB costs
            (s0, t0, m0), (s1, t1, m1) = min(got), max(got)
            ts, ms = (t1 - t0) / (s1 - s0), (m1 - m0) / (s1 - s0)
            print(f"# beyond the reference, per MB of input from {s0:g} to {s1:g} MB: {ts:.2f} s, {ms:.1f} MB "
                  f"(goal: at most 1 s and 50 MB): {'met' if ts <= 1 and ms <= 50 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
