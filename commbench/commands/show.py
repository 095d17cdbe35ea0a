"""``commbench show FILE``: print a saved results file as the table the run printed."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
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
    kinds = presentation.presentations()
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
        lines += run_lines(path, run.meta, run.rows)
    return lines


def run_lines(path: str, meta: dict, rows: Iterable[dict]) -> Iterator[str]:
    """A benchmark run's table as ``show`` prints it, a line at a time (rows as they come)."""
    from commbench import benchmarks

    cls = benchmarks.registry().get(str(meta.get("bench")))
    if cls is None:
        raise UsageError(f"{path}: unknown benchmark {meta.get('bench')!r} in the metadata row")
    columns = [cls.size_column(meta), *cls.columns]
    yield from cls.header(meta)
    yield header_line(columns)
    for r in rows:
        yield row_line(columns, r)


def show(o: ShowOptions) -> int:
    for path in results_files(o.files):
        print("\n".join(render(path)))
    return 0
