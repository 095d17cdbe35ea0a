"""What an importer makes of a tool's text: an ``Imported`` run, and the patterns every importer reads."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# A number as the tools print them, matched once (an atomic group): a pattern repeating it never tries the
# other ways of splitting a run of digits, which made a line of a few long numbers take exponential time.
NUM = r"(?>[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)"
ANSI = re.compile(r"\x1b\[[0-9;]*m")  # colours some tools print (sockperf)


@dataclass
class Imported:
    """One run of another tool, as commbench results."""

    bench: str  # the commbench benchmark its numbers correspond to
    tool: str  # the program, e.g. osu_latency
    transport: str  # what it measured: mpi, verbs, tcp, nccl
    mode: str  # e.g. "OMB 7.4", "send, rxe0"
    rows: list[dict]
    version: str | None = None
    command: list[str] | None = None
    poll: str = "busy"
    ranks: int = 2
    notes: list[str] = field(default_factory=list)  # what the text said about how it ran
    metric: dict | None = None  # the main metric where it is not the benchmark's ({"key", "better"})
