"""LLNL mpiGraph output (``srun -n N ./mpiGraph SIZE TIMES WINDOW > mpiGraph.out``): every pair's
bandwidth, as `commbench cluster` pairwise rows, so ``findings``, ``diff`` and ``report`` read an
earlier mpiGraph run as they read a cluster run (a baseline of it, too).

The text: a header (``MsgSize``, ``Times``, ``Window``, ``Procs`` lines, tab-separated), then a ``Send``
table (a header row of ``host:rank`` names, then a row per rank, ``host:rank to``, with the bandwidth
it sent to each rank) and a ``Recv`` table the same way (``host:rank from``). mpiGraph's MB/sec are
2^20 bytes per second; commbench's MB/s are 10^6. mpiGraph measures in a shift pattern (at step d
every rank sends to rank + d while receiving from rank - d): all ranks stream at once, like a
tournament round. A pair's row is the mean of its two directions from the Send table; the ``note``
keeps both.
"""

from __future__ import annotations

import re

from commbench.core.errors import UsageError
from commbench.importers.base import Imported, Rows

MIB = 1.048576  # MB/s (10^6 B/s) per mpiGraph MB/sec (2^20 B/s)
START = re.compile(r"^START mpiGraph v?([\w.]+)", re.M)


def looks_like(text: str) -> bool:
    return START.search(text[:4096]) is not None


def _table(lines: list[str], start: int, word: str, path: str) -> tuple[list[str], list[list[float]], int]:
    """The table whose header row starts with ``word`` at line ``start``: (column names, rows, next line)."""
    names = [c for c in lines[start].split("\t")[1:] if c.strip()]
    rows: list[list[float]] = []
    i = start + 1
    while i < len(lines) and len(rows) < len(names):
        cells = [c for c in lines[i].split("\t") if c.strip()]
        if not cells:
            break
        if len(cells) != len(names) + 1:
            raise UsageError(f"{path} line {i + 1}: a {word} table row of {len(cells) - 1} values for {len(names)} "
                             "ranks (cut short or edited?)")
        rows.append([float(c) for c in cells[1:]])
        i += 1
    if len(rows) != len(names):
        raise UsageError(f"{path}: the {word} table has {len(rows)} rows for {len(names)} ranks (cut short?)")
    return names, rows, i


def parse(text: str, path: str, ranks: int = 0, size: int = 0) -> Imported:
    head = START.search(text)
    if head is None:
        raise UsageError(f"{path}: no 'START mpiGraph' line: not mpiGraph output")
    params = dict(re.findall(r"^(MsgSize|Times|Window|Procs)\t(\d+)\s*$", text, re.M))
    lines = text.splitlines()
    at = next((i for i, x in enumerate(lines) if x.startswith("Send\t")), None)
    if at is None or "MsgSize" not in params:
        raise UsageError(f"{path}: mpiGraph output without its MsgSize line or Send table (cut short?)")
    names, send, _ = _table(lines, at, "Send", path)
    hosts = [n.rsplit(":", 1)[0] for n in names]
    labels = hosts if len(set(hosts)) == len(hosts) else [f"{h}/r{r}" for r, h in enumerate(hosts)]
    msg = int(params["MsgSize"])
    n = len(names)

    def rows():
        for a in range(n):
            for b in range(a + 1, n):
                ab, ba = send[a][b] * MIB, send[b][a] * MIB
                if ab < 0 or ba < 0:
                    raise UsageError(f"{path}: a negative bandwidth between {labels[a]} and {labels[b]}: edited?")
                yield {"size": msg, "test": "pairwise", "round": (b - a) % n, "a": labels[a], "b": labels[b],
                       "a_rank": a, "b_rank": b, "mb_s": (ab + ba) / 2,
                       "note": f"{labels[a]} -> {labels[b]} {ab:.1f}, back {ba:.1f} MB/s"}

    imp = Imported("cluster", "mpiGraph", "mpi", f"mpiGraph {head.group(1)}", Rows(rows), head.group(1), ranks=n)
    imp.notes.append(f"message {msg} B, {params.get('Times', '?')} times a window of {params.get('Window', '?')}; "
                     "every rank streams at once (shift pattern); a pair: the mean of its two directions")
    return imp
