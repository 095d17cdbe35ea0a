"""nccl-tests output (all_reduce_perf, all_gather_perf, alltoall_perf, broadcast_perf).

The documented table: ``size count type redop root`` then time (us), algbw and busbw (GB/s = 10^9
B/s) and #wrong, out-of-place then in-place (releases before 2.10 have no root column and an
``error`` column, the largest difference, instead of #wrong); commbench reads the out-of-place half, as its own
collectives are. Ranks are the ``#  Rank`` lines; the test is named by a ``Collective test starting``
line, the file's name, or (all-reduce, broadcast) the redop and root columns.
"""

from __future__ import annotations

import re
from pathlib import Path

from commbench.core.errors import UsageError
from commbench.importers import Imported

HEAD = re.compile(r"^#\s+size\s+count\s+type\s+redop\s+(root\s+)?time\s+algbw\s+busbw\s+(#wrong|error)", re.M)
TESTS = {"all_reduce": "allreduce", "all_gather": "allgather", "alltoall": "alltoall", "broadcast": "broadcast"}
DTYPES = {"float": "float32", "half": "float16", "double": "float64", "int32": "int32", "int8": "int8"}


def looks_like(text: str) -> bool:
    return HEAD.search(text) is not None


def _test(text: str, path: str, first: list[str]) -> str:
    named = re.search(r"Collective test starting: (\w+?)_perf", text)
    for hint in (named.group(1) if named else "", Path(path).name):
        for test, bench in TESTS.items():
            if test in hint:
                return bench
    redop, root = first[3], int(first[4])
    if redop != "none" and root == -1:
        return "allreduce"
    if redop == "none" and root >= 0:
        return "broadcast"
    raise UsageError(f"{path}: cannot tell which nccl-tests collective this is; name the file after it "
                     "(e.g. all_gather_perf.txt)")


def parse(text: str, path: str, ranks: int = 0, size: int = 0) -> Imported:
    head = HEAD.search(text)
    if head is None:
        raise UsageError(f"{path}: no nccl-tests table header (# size count type redop root ...): "
                         "not nccl-tests output")
    rooted, counted = head.group(1) is not None, head.group(2) == "#wrong"
    rows, first = [], None
    for line in text[head.end():].splitlines():
        f = line.split()
        if not rooted and len(f) >= 4:
            f.insert(4, "-1")  # no root column: every collective these releases print is rootless but broadcast
        if len(f) < 9 or not f[0].isdigit() or not f[1].isdigit():
            continue
        try:
            time_us, algbw, busbw, root = float(f[5]), float(f[6]), float(f[7]), int(f[4])
        except ValueError:
            continue
        first = first or f
        rows.append({"size": int(f[0]), "count": int(f[1]), "dtype": DTYPES.get(f[2], f[2]), "redop": f[3],
                     "root": root, "time_us": time_us, "algbw": algbw, "busbw": busbw,
                     "wrong": int(f[8]) if counted and f[8].isdigit() else None, "algorithm": "nccl"})
    bench = _test(text, path, first) if first else "allreduce"
    n = len(re.findall(r"^#\s+Rank\s+\d+", text, re.M)) or ranks or 2
    iters = re.search(r"warmup iters:\s*\d+\s+iters:\s*(\d+)", text)
    for row in rows:
        if iters:
            row["iterations"] = int(iters.group(1))
    version = re.search(r"nccl-tests version ([\w.]+)", text)
    lib = re.search(r"nccl-library=(\d+)", text)
    imp = Imported(bench, f"{next(k for k, v in TESTS.items() if v == bench)}_perf", "nccl",
                   f"NCCL {lib.group(1)}" if lib else "NCCL", rows, version.group(1) if version else None, ranks=n)
    gpus = re.findall(r"device\s+\d+\s+\[[^\]]*\]\s+(.+)$", text, re.M)
    if gpus:
        imp.notes.append(f"devices: {sorted(set(g.strip() for g in gpus))}")
    return imp
