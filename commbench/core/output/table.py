"""OSU-style terminal tables: '#' header lines naming test, transport, mode, payload and units,
then fixed-width rows printed one by one as they are measured (so widths cannot depend on data).

A ``Column`` is also a results key's declaration (its unit and meaning): what a benchmark writes is
its columns and its ``key``s (width 0: in the file, not on the terminal); docs/reference/results.md
is generated from them."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass


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
