"""What an importer makes of a tool's text: an ``Imported`` run, and the patterns every importer reads.

Importers read in time and memory linear in the text: lines are taken one at a time (``lines``), and
result rows are made from them when asked (``Rows``), so a large output is never held as a list of
lines or of rows; patterns cannot backtrack (``NUM`` is matched once).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

# A number as the tools print them, matched once (an atomic group): a pattern repeating it never tries the
# other ways of splitting a run of digits, which made a line of a few long numbers take exponential time.
NUM = r"(?>[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)"
ANSI = re.compile(r"\x1b\[[0-9;]*m")  # colours some tools print (sockperf)


def lines(text: str, start: int = 0) -> Iterator[str]:
    """The lines of ``text`` from ``start``, one at a time (no list of them; no copy of the text)."""
    end = len(text)
    while start < end:
        stop = text.find("\n", start)
        if stop < 0:
            stop = end
        yield text[start:stop].rstrip("\r")
        start = stop + 1


class Rows:
    """Result rows made from the text each time they are iterated (checked once, then written once):
    never all held at once."""

    def __init__(self, make: Callable[[], Iterable[dict]]) -> None:
        self._make = make

    def __iter__(self) -> Iterator[dict]:
        return iter(self._make())


@dataclass
class Imported:
    """One run of another tool, as commbench results."""

    bench: str  # the commbench benchmark its numbers correspond to
    tool: str  # the program, e.g. osu_latency
    transport: str  # what it measured: mpi, verbs, tcp, nccl
    mode: str  # e.g. "OMB 7.4", "send, rxe0"
    rows: Iterable[dict]  # a list, or Rows made from the text when iterated
    version: str | None = None
    command: list[str] | None = None
    poll: str = "busy"
    ranks: int = 2
    notes: list[str] = field(default_factory=list)  # what the text said about how it ran
    metric: dict | None = None  # the main metric where it is not the benchmark's ({"key", "better"})
