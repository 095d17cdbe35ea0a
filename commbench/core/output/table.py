"""OSU-style terminal tables: '#' header lines naming test, transport, mode, payload and units,
then fixed-width rows printed one by one as they are measured (so widths cannot depend on data).

A ``Column`` is also a results key's declaration (its unit and meaning): what a benchmark writes is
its columns and its ``key``s (width 0: in the file, not on the terminal); docs/reference/results.md
is generated from them."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

MAX_VALUE = 1e15  # beyond any latency (us), bandwidth (MB/s), size (B) or count anything measures
UNSIGNED = frozenset({"us", "MB/s", "GB/s", "B", "KiB", "count", "1/s", "min", "fraction"})  # never below 0


@dataclass(frozen=True)
class Column:
    key: str
    header: str
    width: int
    fmt: str = "{}"  # applied to numbers; strings are printed as they are
    unit: str = ""  # of the value in the results file ("us", "MB/s", "B", ...; "" for none)
    doc: str = ""  # what it is, for the results reference
    optional: bool = False  # rows may lack it (e.g. only with some transports or options)
    many: bool = False  # a list of values (one per shard, ...), not one

    def cell(self, value: object) -> str:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            try:
                text = self.fmt.format(value)
            except ValueError:  # a float where a count was declared (a file edited, another tool's): as it is
                text = f"{value:g}"
        else:
            text = "-" if value is None else str(value)
        return text.rjust(self.width) if self.width > 0 else text.ljust(-self.width)


def value_problem(value: object, unit: str) -> str:
    """Why ``value`` cannot be a measured value in ``unit`` ("" if it can): not a number, not finite,
    beyond MAX_VALUE, or below 0 where the unit has no sign. What a file says goes through this, as a
    command line's numbers go through their declared bounds."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"not a number ({unit})"
    if not (math.isfinite(value) and abs(value) <= MAX_VALUE):
        return f"not finite or beyond {MAX_VALUE:g} ({unit})"
    if value < 0 and unit in UNSIGNED:
        return f"below 0 (no value in {unit} is)"
    return ""


def key(name: str, unit: str = "", doc: str = "", optional: bool = False, many: bool = False) -> Column:
    """A results key that is not printed."""
    return Column(name, "", 0, unit=unit, doc=doc, optional=optional, many=many)


def declared(*groups: Iterable[Column]) -> dict[str, Column]:
    """Keys by name, in order, the first declaration of a name winning."""
    out: dict[str, Column] = {}
    for group in groups:
        for c in group:
            out.setdefault(c.key, c)
    return out


def header_line(columns: Sequence[Column]) -> str:
    cells = [c.header.rjust(c.width) if c.width > 0 else c.header.ljust(-c.width) for c in columns]
    cells[0] = ("# " + columns[0].header).ljust(abs(columns[0].width))
    return " ".join(cells)


def row_line(columns: Sequence[Column], row: dict) -> str:
    return " ".join(c.cell(row.get(c.key)) for c in columns)
