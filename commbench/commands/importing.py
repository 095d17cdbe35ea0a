"""``commbench import FILE... [--from TOOL] [-o OUT]``: other tools' output as commbench results.

Each file's tool is detected from its text (or named with --from), read by its importer
(commbench/importers/), checked against the benchmark's declared schema and written as any run's
rows are (-o), or printed as ``show`` prints a file.
"""

from __future__ import annotations

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
    from commbench.commands.show import render
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
        try:
            imp = parser_of(tool).parse(text, path, ranks=o.ranks, size=o.size)
        except (ValueError, IndexError, KeyError, TypeError) as exc:  # a line that looked like a result, was not
            raise UsageError(f"{path}: not {tool} output as commbench reads it ({str(exc)[:80]}); "
                             "was it cut short or edited?") from None
        if not imp.rows:
            raise UsageError(f"{path}: no result lines in this {tool} output (cut short before its first size?)")
        meta = meta_of(imp, path, text)
        runs.append((meta, rows_of(imp, meta, path)))
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
