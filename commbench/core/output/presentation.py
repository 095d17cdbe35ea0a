"""How a kind of result is shown, declared where the result is made (a benchmark's class, train,
predict): its main metric and which way is better, the figure it goes into, its x axis, the row keys
that tell its series apart, and (for commands that write one row per run) the table `show` prints.
``commbench report``, ``show`` and ``summary`` read these; they name no benchmark or transport."""

from __future__ import annotations

from dataclasses import dataclass

from commbench.core.output.table import Column

SERIES = ("transport", "mode", "poll", "payload", "algorithm")  # what tells a sweep's lines apart


@dataclass(frozen=True)
class Presentation:
    metric: str  # the row key report and compare read
    better: str = "lower"  # or "higher"
    figure: str = "line"  # report's figure kind: line (metric over x), pairs (host x host), training, traffic, none
    x: str = "size"  # a line figure's x axis
    series: tuple[str, ...] = SERIES
    columns: tuple[Column, ...] = ()  # one row per run: the table `show` prints for a file of them
    title: str = ""
