"""``commbench import FILE... [--from TOOL] [-o OUT]``: other tools' output as commbench results.

One module per tool reads its text into an ``Imported``: the commbench benchmark it corresponds to,
what it measured (transport and mode), the tool with its version and command line where the text
gives them, and rows in commbench's schema and units (one-way latency in us, MB/s = 10^6 B/s, GB/s
busbw). The rows are checked against the benchmark's declared schema and written as any run's are,
so ``show``, ``summary``, ``report --compare`` and pandas read them alike; without ``-o`` they are
printed as ``show`` prints a file.
"""

from __future__ import annotations

import argparse
import hashlib
import platform
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from commbench.core.errors import UsageError

NUM = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"  # a number as the tools print them
ANSI = re.compile(r"\x1b\[[0-9;]*m")  # colours some tools print (sockperf)
TOOLS = ("osu", "perftest", "nccl-tests", "sockperf", "iperf3", "mpigraph")


@dataclass
class Imported:
    """One run of another tool, as commbench results."""

    bench: str  # the commbench benchmark its numbers correspond to
    tool: str  # the program, e.g. osu_latency
    transport: str  # what it measured: mpi, verbs, tcp, nccl
    mode: str  # e.g. "OMB 7.4", "send, rxe0"
    rows: list[dict]
    version: str | None = None
    command: list[str] | None = None
    poll: str = "busy"
    ranks: int = 2
    notes: list[str] = field(default_factory=list)  # what the text said about how it ran
    metric: dict | None = None  # the main metric where it is not the benchmark's ({"key", "better"})


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

    digest = hashlib.sha256(text.encode(errors="replace")).hexdigest()
    options = {"transport": imp.transport, "mode": imp.mode, "ranks": imp.ranks, "loops": "the tool's own",
               "validate": None}
    meta = run_metadata(imp.bench, options, [platform.node()], [])
    meta["versions"][imp.tool] = imp.version or "unknown"
    meta.update(run_id=f"import-{digest[:6]}", command=imp.command or [imp.tool],
                **({"metric": imp.metric} if imp.metric else {}),
                imported={"tool": imp.tool, "version": imp.version, "command": imp.command, "file": str(path),
                          "sha256": digest, "notes": imp.notes})
    return meta


def rows_of(imp: Imported, meta: dict) -> list[dict]:
    """The rows with the runner's keys, checked against the benchmark's declared keys."""
    from commbench.presentation import declared_keys

    known = declared_keys(imp.bench)
    out = []
    for r in imp.rows:
        row = {"bench": imp.bench, "run_id": meta["run_id"], "transport": imp.transport,
               "mode": imp.mode, "poll": imp.poll, "payload": str(r["size"]), "buffers": 1, **r}
        bad = sorted(k for k in row if k not in known)
        if bad:
            raise AssertionError(f"{imp.tool} import made undeclared keys {bad}")
        out.append(row)
    return out


def add_parser(sub) -> None:
    p = sub.add_parser("import", help="other tools' output (OSU, perftest, nccl-tests and its -J JSON, sockperf, "
                                      "iperf3 -J, mpiGraph) as commbench results",
                       description=__doc__.split("\n\n")[0].replace("``", ""))
    p.add_argument("files", nargs="+", metavar="FILE", help="a tool's output, as it printed it")
    p.add_argument("--from", dest="tool", choices=TOOLS, help="the tool (default: detected from the text)")
    p.add_argument("-o", "--output", metavar="FILE", help="write results here (.jsonl appends, .csv replaces); "
                                                          "default: print them as `show` does")
    p.add_argument("--ranks", type=int, default=0, metavar="N",
                   help="ranks of a collective run (osu_allreduce does not print them; needed for busbw)")
    p.add_argument("--size", type=int, default=0, metavar="B",
                   help="message size of a tool that does not print it (sockperf: its -m)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from commbench.core.output.results import check_output_path, read_text_file
    from commbench.show import render

    if args.ranks < 0 or args.size < 0:
        raise UsageError(f"--ranks {args.ranks} --size {args.size}: give the ranks the collective ran on and the "
                         "message size in bytes (positive numbers)")
    out = check_output_path(args.output) if args.output else None
    if out is not None and out.suffix == ".csv" and len(args.files) > 1:
        raise UsageError("a .csv holds one run: import one file into it, or write .jsonl")
    runs = []
    for path in args.files:
        text = ANSI.sub("", read_text_file(path, f"{args.tool or 'tool'} output file"))
        tool = args.tool or detect(text)
        if tool is None:
            raise UsageError(f"{path}: not the output of a tool commbench imports ({', '.join(TOOLS)}); "
                             "give --from TOOL if it is")
        try:
            imp = parser_of(tool).parse(text, path, ranks=args.ranks, size=args.size)
        except (ValueError, IndexError, KeyError, TypeError) as exc:  # a line that looked like a result, was not
            raise UsageError(f"{path}: not {tool} output as commbench reads it ({str(exc)[:80]}); "
                             "was it cut short or edited?") from None
        if not imp.rows:
            raise UsageError(f"{path}: no result lines in this {tool} output (cut short before its first size?)")
        meta = meta_of(imp, path, text)
        runs.append((meta, rows_of(imp, meta)))
    if out is None:
        import tempfile

        with tempfile.TemporaryDirectory() as d:
            f = Path(d) / "imported.jsonl"
            _write(f, runs)
            print("\n".join(render(str(f))))
        return 0
    _write(out, runs)
    print(f"# {sum(len(r) for _, r in runs)} rows from {len(runs)} file(s) written to {out}")
    return 0


def _write(path: Path, runs) -> None:
    from commbench.core.output.results import ResultsWriter
    from commbench.presentation import declared_keys

    for meta, rows in runs:
        w = ResultsWriter(path, meta, list(declared_keys(meta["bench"])))
        for row in rows:
            w.row(row)
        w.close()
