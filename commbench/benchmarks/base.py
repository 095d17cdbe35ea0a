"""What a benchmark is: a name, its columns and units, who talks to whom, and one function per point.

The runner (runner.py) owns the world, the transport, the table and the results file; the
harness (core/harness.py) owns loops and statistics. A benchmark file is short.
"""

from __future__ import annotations

import argparse
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

from commbench.core.harness import Loops
from commbench.core.message import Message, Pattern
from commbench.core.payload import Payload
from commbench.core.table import Column
from commbench.core.world import World
from commbench.transports.base import Link, Transport

SIZE = Column("size", "Size", -14)
PAYLOAD = Column("payload", "Payload", -30)
WRONG = Column("wrong", "#wrong", 7, "{:d}")


@dataclass
class Context:
    """Everything a benchmark's point function may use."""

    world: World
    transport: Transport
    links: dict[int, Link]
    args: argparse.Namespace
    loops: Loops
    validate: bool
    seed: int
    corrupt_every: int = 0  # test hook: flip a byte in every Nth outgoing message (validation tests)

    def pattern(self, payload: Payload) -> Pattern | None:
        return Pattern(payload.sizes, self.seed) if self.validate else None


class Benchmark(ABC):
    name: ClassVar[str]
    help: ClassVar[str]
    units: ClassVar[str]
    columns: ClassVar[list[Column]]
    loop_source: ClassVar[str] = "OSU"  # whose default iteration counts the benchmark uses

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        """The benchmark's own flags."""

    @classmethod
    def ranks(cls, args: argparse.Namespace) -> int:
        return 2

    @classmethod
    def plan_points(cls, args: argparse.Namespace) -> tuple[list[Payload], str | None] | None:
        """The points to measure, if this benchmark plans its own (None: the common -m / --payload)."""
        return None

    @abstractmethod
    def peers(self, world: World) -> list[int]:
        """The ranks this rank exchanges messages with."""

    @abstractmethod
    def run_point(self, ctx: Context, payload: Payload) -> dict | None:
        """Measure one point; rank 0 returns the row (column key -> value), others None."""

    def header(self, meta: dict) -> list[str]:
        """The '#' lines above the table, built from the run's metadata only (so `show` can redo them)."""
        o = meta["options"]
        lines = [f"# commbench {self.name} v{meta['versions']['commbench']}: {self.help}",
                 f"# transport: {o['transport']} ({o['mode']})   ranks: {o['ranks']}   "
                 f"hosts: {', '.join(sorted(set(meta['hosts'])))}",
                 f"# loops: {o['loops']}   validate: {'on (timings include checking)' if o['validate'] else 'off'}",
                 f"# units: {self.units}"]
        if o.get("payload_spec"):
            lines.insert(2, f"# payload: {o['payload_spec']}")
        return lines

    def size_column(self, meta: dict) -> Column:
        return PAYLOAD if meta["options"].get("payload_spec") else SIZE


class Checker:
    """``--validate``: counts received messages that differ from the pattern (nccl-tests' #wrong).

    ``send`` wraps a send so that, under the test hook ``corrupt_every``, every Nth outgoing
    message carries one flipped byte, which the receiving end must count.
    """

    def __init__(self, pattern: Pattern, corrupt_every: int = 0) -> None:
        self.pattern = pattern
        self.corrupt_every = corrupt_every
        self.wrong = 0
        self.sent = 0

    def check(self, msg: Message) -> None:
        """After a receive: count a mismatch, then clear so a receive that writes nothing fails next time."""
        if not msg.matches(self.pattern):
            self.wrong += 1
        msg.clear()

    def send(self, send, msg: Message, *args) -> None:
        self.sent += 1
        bad = self.corrupt_every and self.sent % self.corrupt_every == 0
        if bad:
            for arr in msg.arrays:
                if len(arr):
                    arr[len(arr) // 2] ^= 0xFF
                    break
        send(msg, *args)
        if bad:
            msg.fill(self.pattern)
