"""``commbench findings FILE [--slow-pct P] [--topology FILE]``: a cluster run's verdict, derived again
from its results file alone, as the run derived it (benchmarks/cluster_findings.py): the same rows give
the same findings. ``--topology`` judges a run with a topology it was not given; ``--slow-pct`` at
another threshold. Exit status 0: no finding; 1: a finding (a slow host, switch, uplink or cable, or a
failed pair); 2: bad input. A cron job or a Slurm health check can act on it.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from commbench.benchmarks.cluster import findings_lines
from commbench.benchmarks.cluster_findings import from_rows
from commbench.core.analysis import topology
from commbench.core.config.argtypes import number
from commbench.core.errors import UsageError
from commbench.core.output.results import read_runs

VERDICT_ROWS = ("finding", "summary")


def add_parser(sub) -> None:
    p = sub.add_parser("findings", help="a cluster run's findings, derived again from its results file (exit 1: "
                                        "a finding)", description=__doc__.split("\n\n")[0].replace("``", ""))
    p.add_argument("file", metavar="FILE", help="a results file of commbench cluster (.jsonl or .csv)")
    p.add_argument("--slow-pct", type=number(above=0, hi=99, what=" (percent)"),
                   help="the threshold (default: the run's own --slow-pct)")
    p.add_argument("--topology", metavar="FILE", help="Slurm's topology.conf or a host,switch CSV (default: the "
                                                      "run's own, if it had one)")
    p.set_defaults(func=run)


def derive(path: str, slow_pct: float | None = None, topo_file: str | None = None) -> tuple[list[str], int]:
    """(the lines, how many findings) for every cluster run in the file."""
    runs = [r for r in read_runs(path, need_rows=True) if r.meta.get("bench") == "cluster"]
    if not runs:
        raise UsageError(f"{path}: no commbench cluster run in this file; findings reads what `commbench cluster "
                         "-o FILE` wrote")
    lines, count = [], 0
    for run in runs:
        pct = slow_pct if slow_pct is not None else run.meta["options"].get("slow_pct", 25.0)
        if not isinstance(pct, (int, float)) or not 0 < pct < 100:
            raise UsageError(f"{path}: the run's slow_pct is {str(pct)[:20]!r}, not a percentage; give --slow-pct")
        meta = dict(run.meta)
        rows = [r for r in run.rows if r.get("test") not in VERDICT_ROWS]
        ev = from_rows(meta, rows, path)
        if topo_file:
            ev.topology = topology.load(topo_file).for_hosts(ev.names)
        found, cleared = ev.findings(float(pct))
        summary = [f"derived again from {path} (run {run.meta.get('run_id', '?')}, "
                   f"{run.meta.get('options', {}).get('transport', '?')})", *ev.summary(), *cleared]
        lines += findings_lines(len(ev.names), float(pct), summary, found)
        count += len(found)
    return lines, count


def run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    lines, count = derive(args.file, args.slow_pct, args.topology)
    print("\n".join(lines))
    return 1 if count else 0
