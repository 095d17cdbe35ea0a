"""OSU-style terminal tables: '#' header lines naming test, transport, mode, payload and units,
then fixed-width rows printed one by one as they are measured (so widths cannot depend on data)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Column:
    key: str
    header: str
    width: int
    fmt: str = "{}"  # applied to numbers; strings are printed as they are

    def cell(self, value: object) -> str:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            text = self.fmt.format(value)
        else:
            text = "-" if value is None else str(value)
        return text.rjust(self.width) if self.width > 0 else text.ljust(-self.width)


def header_line(columns: Sequence[Column]) -> str:
    cells = [c.header.rjust(c.width) if c.width > 0 else c.header.ljust(-c.width) for c in columns]
    cells[0] = ("# " + columns[0].header).ljust(abs(columns[0].width))
    return " ".join(cells)


def row_line(columns: Sequence[Column], row: dict) -> str:
    return " ".join(c.cell(row.get(c.key)) for c in columns)
