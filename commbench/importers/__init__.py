"""Other tools' output as commbench results (the command: ``commbench import``, commands/importing.py).

One module per tool reads its text into an ``Imported``: the commbench benchmark it corresponds to,
what it measured (transport and mode), the tool with its version and command line where the text
gives them, and rows in commbench's schema and units (one-way latency in us, MB/s = 10^6 B/s, GB/s
busbw). The rows are checked against the benchmark's declared schema and written as any run's are,
so ``show``, ``summary``, ``report --compare`` and pandas read them alike; without ``-o`` they are
printed as ``show`` prints a file.
"""

from __future__ import annotations

import hashlib
import platform
from collections.abc import Iterator

from commbench.importers.base import Imported

TOOLS = ("osu", "perftest", "nccl-tests", "sockperf", "iperf3", "mpigraph")


def parser_of(tool: str):
    from commbench.importers import iperf3, mpigraph, nccl, osu, perftest, sockperf

    return {"osu": osu, "perftest": perftest, "nccl-tests": nccl, "sockperf": sockperf, "iperf3": iperf3,
            "mpigraph": mpigraph}[tool]


def detect(text: str) -> str | None:
    """The tool whose output this is, from its text."""
    for tool in TOOLS:
        if parser_of(tool).looks_like(text):
            return tool
    return None


def meta_of(imp: Imported, path: str, text: str) -> dict:
    """A run's metadata row (``run_metadata``), saying where the numbers came from: the tool's command
    and version instead of this one's, and a run id from the text's digest."""
    from commbench.core.output.results import run_metadata

    h = hashlib.sha256()
    for at in range(0, len(text), 1 << 20):  # a piece at a time: no second copy of a large text
        h.update(text[at:at + (1 << 20)].encode(errors="replace"))
    digest = h.hexdigest()
    options = {"transport": imp.transport, "mode": imp.mode, "ranks": imp.ranks, "loops": "the tool's own",
               "validate": None}
    meta = run_metadata(imp.bench, options, [platform.node()], [])
    meta["versions"][imp.tool] = imp.version or "unknown"
    meta.update(run_id=f"import-{digest[:6]}", command=imp.command or [imp.tool],
                **({"metric": imp.metric} if imp.metric else {}),
                imported={"tool": imp.tool, "version": imp.version, "command": imp.command, "file": str(path),
                          "sha256": digest, "notes": imp.notes})
    return meta


def rows_of(imp: Imported, meta: dict, path: str = "") -> Iterator[dict]:
    """The rows with the runner's keys, one at a time, checked against the benchmark's declared keys; a
    measured value that is negative or not finite (an edited or broken output) is refused, naming the
    file."""
    from commbench.core.errors import UsageError
    from commbench.core.output.table import value_problem
    from commbench.presentation import declared_keys

    known = declared_keys(imp.bench)
    for r in imp.rows:
        row = {"bench": imp.bench, "run_id": meta["run_id"], "transport": imp.transport,
               "mode": imp.mode, "poll": imp.poll, "payload": str(r["size"]), "buffers": 1, **r}
        bad = sorted(k for k in row if k not in known)
        if bad:
            raise AssertionError(f"{imp.tool} import made undeclared keys {bad}")
        for k, v in row.items():
            why = value_problem(v, known[k].unit) if known[k].unit and v is not None else ""
            if why or (known[k].unit and isinstance(v, (int, float)) and v < 0):
                raise UsageError(f"{path}: {imp.tool} reports {k} = {v} at size {row.get('size')}: not a measurement "
                                 f"({why or 'negative'}); was the output edited?")
        yield row
