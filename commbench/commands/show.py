"""``commbench show FILE``: print a saved results file as the table the run printed."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from commbench import presentation
from commbench.core.errors import UsageError
from commbench.core.output.results import results_files
from commbench.core.output.table import header_line, row_line


def add_parser(sub) -> None:
    p = sub.add_parser("show", help="print a results file (.jsonl or .csv) as the run's table")
    p.add_argument("files", nargs="+", metavar="FILE", help="results files, or folders of them (compare's)")
    p.set_defaults(func=show)


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


def show(args: argparse.Namespace, argv: Sequence[str]) -> int:
    for path in results_files(args.files):
        print("\n".join(render(path)))
    return 0
