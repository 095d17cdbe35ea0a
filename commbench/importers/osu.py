"""OSU Micro-Benchmarks (C, 5.x-7.x) and OMB-Py output: osu_latency, osu_bw, osu_bibw, osu_allreduce.

The header names the test and version (``# OSU MPI Latency Test v7.4``, ``# OMB Python MPI Latency
Test``) and the datatype (``# Datatype: MPI_FLOAT.``); then ``size value [min max iterations]`` lines.
OSU's latency is one-way (round trip / 2) in us, its bandwidth MB/s = 10^6 B/s: commbench's units.
"""

from __future__ import annotations

import re

from commbench.benchmarks.allreduce import AllReduceBench
from commbench.core.errors import UsageError
from commbench.importers.base import NUM, Imported, Rows, lines

TESTS = {"latency": ("p2p-latency", "osu_latency"), "bandwidth": ("p2p-bandwidth", "osu_bw"),
         "bw": ("p2p-bandwidth", "osu_bw"), "bi-directional bandwidth": ("p2p-bibw", "osu_bibw"),
         "bibw": ("p2p-bibw", "osu_bibw"), "allreduce latency": ("allreduce", "osu_allreduce"),
         "allreduce": ("allreduce", "osu_allreduce")}  # test titles (OMB-Py's vary) -> benchmark, program
TITLE = re.compile(r"^# (OSU|OMB-Py|OMB Python) MPI ([\w -]+?) Test(?: v([\d.]+))?\s*$", re.M)
DTYPES = {"MPI_CHAR": ("char", 1), "MPI_INT": ("int32", 4), "MPI_FLOAT": ("float32", 4)}
LINE = re.compile(rf"^\s*(\d+)\s+({NUM})((?:\s+{NUM})*)\s*$")


def looks_like(text: str) -> bool:
    return TITLE.search(text) is not None


def parse(text: str, path: str, ranks: int = 0, size: int = 0) -> Imported:
    m = TITLE.search(text)
    if m is None:
        raise UsageError(f"{path}: no OSU test title (# OSU MPI ... Test) in it: not OSU output")
    suite, test, version = m.group(1), m.group(2), m.group(3)
    if test.lower() not in TESTS:
        raise UsageError(f"{path}: OSU's {test} test has no commbench benchmark to import it as (these do: "
                         "latency, bandwidth, bi-directional bandwidth, allreduce)")
    bench, tool = TESTS[test.lower()]
    dt = re.search(r"^# Datatype: (MPI_\w+)", text, re.M)
    dt_name = dt.group(1) if dt else "MPI_FLOAT" if suite != "OSU" and bench == "allreduce" else "MPI_CHAR"
    dtype = DTYPES.get(dt_name)
    if dtype is None:
        raise UsageError(f"{path}: datatype {dt_name} is not one commbench reports (MPI_CHAR, MPI_INT, MPI_FLOAT)")
    def rows():
        for line in lines(text, m.end()):
            got = LINE.match(line)
            if got is not None:
                extra = [float(x) for x in got.group(3).split()]
                yield _row(bench, int(got.group(1)), float(got.group(2)), extra, dtype, ranks)

    label = f"OMB {version}" if suite == "OSU" and version else "OMB" if suite == "OSU" else "OMB-Py"
    imp = Imported(bench, tool if suite == "OSU" else f"omb-py {tool}", "mpi", label, Rows(rows), version,
                   ranks=ranks or 2)
    imp.notes.append(f"datatype {dtype[0]}")
    if bench == "p2p-latency":  # OSU gives the mean, not the median commbench's latency rows lead with
        imp.metric = {"key": "avg_us", "better": "lower"}
    if bench == "allreduce" and not ranks:
        imp.notes.append("ranks unknown (give --ranks N): busbw not computed")
        imp.metric = {"key": "time_us", "better": "lower"}
    return imp


def _row(bench: str, size: int, value: float, extra: list[float], dtype: tuple[str, int], ranks: int) -> dict:
    """A row in commbench's keys: OSU -f adds min, max and iterations columns to latency tests."""
    if bench == "p2p-latency":
        row = {"size": size, "avg_us": value}
        if len(extra) >= 3:
            row.update(min_us=extra[0], max_us=extra[1], iterations=int(extra[2]))
        return row
    if bench in ("p2p-bandwidth", "p2p-bibw"):
        return {"size": size, "mb_s": value}
    algbw = size / value / 1e3 if value else None
    coll: dict[str, object] = {"size": size, "time_us": value, "count": size // dtype[1], "dtype": dtype[0],
                               "redop": "sum", "root": -1, "algorithm": "native", "algbw": algbw}
    if len(extra) >= 3:
        coll.update(time_min_us=extra[0], time_max_us=extra[1], iterations=int(extra[2]))
    if ranks >= 2 and algbw is not None:
        coll["busbw"] = algbw * AllReduceBench.bus_factor(ranks)  # as commbench's all-reduce rows
    return coll
