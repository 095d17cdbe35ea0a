"""nccl-tests output (all_reduce_perf, all_gather_perf, alltoall_perf, broadcast_perf), as printed or
as its ``-J FILE`` JSON (version 3: ``args``, ``config`` with ``devices``, ``results`` with ``size``,
``count``, ``type``, ``redop``, ``root`` and ``out_of_place`` ``time``/``alg_bw``/``bus_bw``/``nwrong``;
a NaN is written as the string "nan").

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
from commbench.core.output.results import shallow_json
from commbench.importers.base import Imported, Rows, lines

HEAD = re.compile(r"^#\s+size\s+count\s+type\s+redop\s+(root\s+)?time\s+algbw\s+busbw\s+(#wrong|error)", re.M)
TESTS = {"all_reduce": "allreduce", "all_gather": "allgather", "alltoall": "alltoall", "broadcast": "broadcast"}
DTYPES = {"float": "float32", "half": "float16", "double": "float64", "int32": "int32", "int8": "int8"}


def looks_like(text: str) -> bool:
    head = text.lstrip()[:4096]
    return HEAD.search(text) is not None or (head.startswith("{") and '"nccl_version"' in head)


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


def _number(v) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v else None


def parse_json(text: str, path: str, ranks: int = 0) -> Imported:
    """nccl-tests' -J output: the out-of-place half of each result, as the text table is read."""
    try:
        doc = shallow_json(text)
    except (ValueError, RecursionError):
        raise UsageError(f"{path}: not nccl-tests -J output (JSON that does not parse; cut short?)") from None
    results = doc.get("results") if isinstance(doc, dict) else None
    if not isinstance(doc, dict) or not isinstance(results, list):
        raise UsageError(f"{path}: nccl-tests -J output without a results list (the run ended before its table?)")
    args = doc.get("args")
    args = args if isinstance(args, list) else []
    program = Path(str(args[0])).name if args else ""
    config = doc.get("config")
    config = config if isinstance(config, dict) else {}
    rows = []
    for r in results:
        oop = r.get("out_of_place") if isinstance(r, dict) else None
        if not isinstance(oop, dict) or not isinstance(r.get("size"), int) or not isinstance(r.get("count"), int):
            continue
        t, alg, bus = (_number(oop.get(k)) for k in ("time" if "time" in oop else "cpu_time", "alg_bw", "bus_bw"))
        if t is None or alg is None or bus is None or min(t, alg, bus) < 0 or r["size"] < 0:
            continue
        root = str(r.get("root", "-1")).strip()
        wrong = _number(oop.get("nwrong"))
        dtype = str(r.get("type"))
        rows.append({"size": r["size"], "count": r["count"], "dtype": DTYPES.get(dtype, dtype),
                     "redop": str(r.get("redop")), "root": int(root) if re.fullmatch(r"-?\d+", root) else -1,
                     "time_us": t, "algbw": alg, "busbw": bus,
                     "wrong": int(wrong) if wrong is not None else None,
                     "algorithm": "nccl", **({"iterations": config["iterations"]}
                                              if isinstance(config.get("iterations"), int) else {})})
    first = [str(rows[0]["size"]), "", "", rows[0]["redop"], str(rows[0]["root"])] if rows else None
    bench = _test(program, path, first) if first else "allreduce"
    devices = config.get("devices")
    devices = devices if isinstance(devices, list) else []
    lib = doc.get("nccl_version")
    imp = Imported(bench, f"{next(k for k, v in TESTS.items() if v == bench)}_perf", "nccl",
                   f"NCCL {lib}" if isinstance(lib, int) else "NCCL", rows, None, ranks=len(devices) or ranks or 2)
    imp.command = [str(a) for a in args][:64] or None
    names = sorted({str(d.get("device_info", "")).strip() for d in devices if isinstance(d, dict)} - {""})
    if names:
        imp.notes.append(f"devices: {names}")
    return imp


def parse(text: str, path: str, ranks: int = 0, size: int = 0) -> Imported:
    if text.lstrip().startswith("{"):
        return parse_json(text, path, ranks)
    head = HEAD.search(text)
    if head is None:
        raise UsageError(f"{path}: no nccl-tests table header (# size count type redop root ...): "
                         "not nccl-tests output")
    rooted, counted = head.group(1) is not None, head.group(2) == "#wrong"
    iters = re.search(r"warmup iters:\s*\d+\s+iters:\s*(\d+)", text)

    def results():
        for line in lines(text, head.end()):
            f = line.split()
            if not rooted and len(f) >= 4:
                f.insert(4, "-1")  # no root column: every collective these releases print is rootless but broadcast
            if len(f) < 9 or not f[0].isdigit() or not f[1].isdigit():
                continue
            try:
                time_us, algbw, busbw, root = float(f[5]), float(f[6]), float(f[7]), int(f[4])
            except ValueError:
                continue
            yield f, {"size": int(f[0]), "count": int(f[1]), "dtype": DTYPES.get(f[2], f[2]), "redop": f[3],
                      "root": root, "time_us": time_us, "algbw": algbw, "busbw": busbw,
                      "wrong": int(f[8]) if counted and f[8].isdigit() else None, "algorithm": "nccl",
                      **({"iterations": int(iters.group(1))} if iters else {})}

    first = next(results(), (None, None))[0]
    rows = Rows(lambda: (row for _, row in results()))
    bench = _test(text, path, first) if first else "allreduce"
    n = sum(1 for _ in re.finditer(r"^#\s+Rank\s+\d+", text, re.M)) or ranks or 2
    version = re.search(r"nccl-tests version ([\w.]+)", text)
    lib = re.search(r"nccl-library=(\d+)", text)
    imp = Imported(bench, f"{next(k for k, v in TESTS.items() if v == bench)}_perf", "nccl",
                   f"NCCL {lib.group(1)}" if lib else "NCCL", rows, version.group(1) if version else None, ranks=n)
    gpus = {g.group(1).strip() for g in re.finditer(r"device[ \t]+\d+[ \t]+\[[^\]\n]*\][ \t]+(.+)$", text, re.M)}
    if gpus:
        imp.notes.append(f"devices: {sorted(gpus)}")
    return imp
