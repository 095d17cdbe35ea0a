"""``commbench import FILE... [--from TOOL] [-o OUT]``: other tools' output as commbench results.

Each file's tool is detected from its text (or named with --from), read by its importer
(commbench/importers/), checked against the benchmark's declared schema and written as any run's
rows are (-o), or printed as ``show`` prints a file.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from commbench.commands import command
from commbench.core.config.argtypes import integer
from commbench.core.config.options import Options, opt
from commbench.core.errors import UsageError
from commbench.importers import TOOLS, detect, meta_of, parser_of, rows_of
from commbench.importers.base import ANSI


@dataclass(frozen=True)
class ImportOptions(Options):
    files: list[str] = opt((), "files", nargs="+", metavar="FILE", help="a tool's output, as it printed it")
    tool: str | None = opt(None, "--from", choices=TOOLS, help="the tool (default: detected from the text)")
    output: str | None = opt(None, "-o", "--output", metavar="FILE",
                             help="write results here (.jsonl appends, .csv replaces); default: print them as `show` "
                                  "does")
    ranks: int = opt(0, type=integer(0, 1 << 24), metavar="N",
                     help="ranks of a collective run (osu_allreduce does not print them; needed for busbw)")
    size: int = opt(0, type=integer(0, 1 << 40), metavar="B",
                    help="message size of a tool that does not print it (sockperf: its -m)")


def add_parser(sub) -> None:
    command(sub, "import", ImportOptions, run, help="other tools' output (OSU, perftest, nccl-tests and its -J JSON, "
                                                    "sockperf, iperf3 -J, mpiGraph) as commbench results",
            description=__doc__.split("\n\n")[0].replace("``", ""))


def run(o: ImportOptions) -> int:
    from commbench.commands.show import run_lines
    from commbench.core.output.results import check_output_path, read_text_file

    if o.ranks < 0 or o.size < 0:
        raise UsageError(f"--ranks {o.ranks} --size {o.size}: give the ranks the collective ran on and the "
                         "message size in bytes (positive numbers)")
    out = check_output_path(o.output) if o.output else None
    if out is not None and out.suffix == ".csv" and len(o.files) > 1:
        raise UsageError("a .csv holds one run: import one file into it, or write .jsonl")
    runs = []
    for path in o.files:
        text = ANSI.sub("", read_text_file(path, f"{o.tool or 'tool'} output file"))
        tool = o.tool or detect(text)
        if tool is None:
            raise UsageError(f"{path}: not the output of a tool commbench imports ({', '.join(TOOLS)}); "
                             "give --from TOOL if it is")
        with _as_usage(path, tool):
            imp = parser_of(tool).parse(text, path, ranks=o.ranks, size=o.size)
            meta = meta_of(imp, path, text)
            if not sum(1 for _ in rows_of(imp, meta, path)):  # every row made and checked, none kept
                raise UsageError(f"{path}: no result lines in this {tool} output (cut short before its first size?)")
        runs.append((path, tool, imp, meta))
    if out is None:  # printed as show prints a file, a row at a time
        for path, tool, imp, meta in runs:
            with _as_usage(path, tool):
                for line in run_lines(path, meta, rows_of(imp, meta, path)):
                    print(line)
        return 0
    print(f"# {_write(out, runs)} rows from {len(runs)} file(s) written to {out}")
    return 0


@contextlib.contextmanager
def _as_usage(path: str, tool: str) -> Iterator[None]:
    """A line of the tool's text that looked like a result and was not: one line naming the file."""
    try:
        yield
    except (ValueError, IndexError, KeyError, TypeError) as exc:
        raise UsageError(f"{path}: not {tool} output as commbench reads it ({str(exc)[:80]}); "
                         "was it cut short or edited?") from None


def _write(path: Path, runs) -> int:
    """Each run's rows appended to ``path`` as they are made; how many."""
    from commbench.core.output.results import ResultsWriter
    from commbench.presentation import declared_keys

    n = 0
    for src, tool, imp, meta in runs:
        w = ResultsWriter(path, meta, list(declared_keys(meta["bench"])))
        with _as_usage(src, tool):
            for row in rows_of(imp, meta, src):
                w.row(row)
                n += 1
        w.close()
    return n
