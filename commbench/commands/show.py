"""``commbench show FILE``: print a saved results file as the table the run printed."""

from __future__ import annotations

from dataclasses import dataclass

from commbench import presentation
from commbench.commands import command
from commbench.core.config.options import Options, opt
from commbench.core.errors import UsageError
from commbench.core.output.results import results_files
from commbench.core.output.table import header_line, row_line


@dataclass(frozen=True)
class ShowOptions(Options):
    files: list[str] = opt((), "files", nargs="+", metavar="FILE", help="results files, or folders of them (compare's)")


def add_parser(sub) -> None:
    command(sub, "show", ShowOptions, show, help="print a results file (.jsonl or .csv) as the run's table")


def render(path: str) -> list[str]:
    from commbench import benchmarks

    reg, kinds = benchmarks.registry(), presentation.presentations()
    lines: list[str] = []
    last = None
    for run in presentation.read_checked(path):
        kind = run.meta.get("bench")
        p = kinds.get(str(kind))
        if p is not None and p.columns:  # one row per run (train, predict): one table for the file
            if kind != last:
                lines += [f"# commbench {kind}: {path}", header_line(p.columns)]
            lines += [row_line(p.columns, r) for r in run.rows if r.get("bench") == kind]
            last = kind
            continue
        last = None
        cls = reg.get(kind)
        if cls is None:
            raise UsageError(f"{path}: unknown benchmark {run.meta.get('bench')!r} in the metadata row")
        columns = [cls.size_column(run.meta), *cls.columns]
        lines += [*cls.header(run.meta), header_line(columns), *(row_line(columns, r) for r in run.rows)]
    return lines


def show(o: ShowOptions) -> int:
    for path in results_files(o.files):
        print("\n".join(render(path)))
    return 0
