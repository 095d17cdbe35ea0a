"""Memory over a long run: does any rank's resident set grow with the run's length?

Runs one commbench command (by default the issue-39 soak, ``ps-throughput --payload resnet50 --workers 2
--ps 1 --rpc tf --time 1800``), samples every rank's VmRSS every ``--every`` seconds from /proc (ranks
are the command's descendant processes whose environment carries COMMBENCH_RANK), and writes each sample
to a JSONL file as it is taken. At the end it prints, per rank, the RSS at the minutes asked (1, 10, 30)
and the slope of a least-squares line through each minute's peak after the warm-up minute (the
envelope: a rank that frees and re-touches buffers dips between peaks, and dips are not growth),
against the target (0.1 MB/min); the slope through every sample is printed beside it. The reference
in the same run is the rank's own RSS at minute 1: the growth after it is what the run length costs.
``--summarize FILE`` prints the table again from a samples file.

    python bench/soak.py                       # 30 minutes, the issue's command
    python bench/soak.py --minutes 3 -- ps-throughput --payload resnet50 --workers 2 --ps 1 --rpc tf --time 180
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
from common import BIN, CACHE, rank_processes

TARGET_MB_PER_MIN = 0.1
DEFAULT = "ps-throughput --payload resnet50 --workers 2 --ps 1 --rpc tf --time {seconds}"


def ranks_of(root: psutil.Process) -> dict[int, psutil.Process]:
    """The command's rank processes by rank (their environment names it)."""
    return rank_processes(under=root)


def rss_mb(p: psutil.Process) -> float | None:
    try:
        return p.memory_info().rss / 2**20
    except psutil.Error:
        return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--every", type=float, default=10.0, help="seconds between samples")
    ap.add_argument("--warmup", type=float, default=1.0, help="minutes left out of the slope")
    ap.add_argument("--raw", type=Path, default=None, help="JSONL of the samples")
    ap.add_argument("--summarize", type=Path, default=None, help="a samples file: print its table, run nothing")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- the commbench arguments")
    a = ap.parse_args()
    if a.summarize:
        samples: dict[int, list[tuple[float, float]]] = {}
        for line in a.summarize.read_text().splitlines()[1:]:
            x = json.loads(line)
            samples.setdefault(x["rank"], []).append((x["minute"], x["rss_mb"]))
        return table(samples, a.minutes, a.warmup)
    args = [x for x in a.command if x != "--"] or shlex.split(DEFAULT.format(seconds=int(a.minutes * 60)))
    raw = a.raw or CACHE / "bench" / f"soak-{time.strftime('%Y%m%d-%H%M%S')}.jsonl"
    raw.parent.mkdir(parents=True, exist_ok=True)
    out = raw.with_suffix(".rows.jsonl")
    cmd = [str(BIN / "commbench"), *args, "-o", str(out)]
    print("#", shlex.join(cmd), "\n# samples:", raw, flush=True)
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    root = psutil.Process(proc.pid)
    t0 = time.monotonic()
    samples: dict[int, list[tuple[float, float]]] = {}
    with raw.open("w") as f:
        f.write(json.dumps({"command": cmd, "every_s": a.every, "host": psutil.os.uname().nodename}) + "\n")
        while proc.poll() is None:
            minute = (time.monotonic() - t0) / 60
            for rank, p in sorted(ranks_of(root).items()):
                mb = rss_mb(p)
                if mb is not None:
                    samples.setdefault(rank, []).append((minute, mb))
                    f.write(json.dumps({"minute": round(minute, 3), "rank": rank, "rss_mb": round(mb, 2)}) + "\n")
            f.flush()
            time.sleep(a.every)
    rc = proc.wait()
    print(f"# commbench exited {rc}; rows: {out}")
    return table(samples, a.minutes, a.warmup) or rc


def table(samples: dict[int, list[tuple[float, float]]], minutes: float, warmup: float) -> int:
    marks = [m for m in (1, 10, 30) if m <= minutes] or [minutes]
    print("rank  " + "  ".join(f"{m:>4g} min MB" for m in marks) +
          "  peak MB  slope of minute peaks MB/min  (all samples)  target  verdict")
    worst = 0.0
    for rank, pts in sorted(samples.items()):
        t, mb = np.array(pts).T
        at = [mb[np.argmin(abs(t - m))] for m in marks]
        keep = t >= warmup
        minute = np.floor(t[keep])
        tops = [(m, mb[keep][minute == m].max()) for m in np.unique(minute)]
        slope = float(np.polyfit(*np.array(tops).T, 1)[0]) if len(tops) >= 3 else float("nan")
        every = float(np.polyfit(t[keep], mb[keep], 1)[0]) if keep.sum() >= 3 else float("nan")
        worst = max(worst, abs(slope))
        verdict = "met" if abs(slope) < TARGET_MB_PER_MIN else "MISSED"
        cells = "  ".join(f"{v:>11.1f}" for v in at)
        print(f"{rank:>4}  {cells}  {mb[keep].max():>7.1f}  {slope:>28.4f}  {every:>13.4f}  {TARGET_MB_PER_MIN:>6}  "
              f"{verdict}")
    return 0 if worst < TARGET_MB_PER_MIN else 1


if __name__ == "__main__":
    sys.exit(main())
