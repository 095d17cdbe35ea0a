"""Progress of a long run on rank 0: a rich bar on a terminal (it keeps the table's rows above it),
a plain line on stderr at most every 10 s otherwise (logs, CI), nothing for short runs. Callers
advance it between points or steps, never inside a timed loop."""

from __future__ import annotations

import sys
import time

from commbench.core.errors import say

PLAIN_EVERY = 10.0


class Progress:
    def __init__(self, what: str, total: int, unit: str = "points", enabled: bool = True) -> None:
        self.what, self.total, self.unit, self.done = what, total, unit, 0
        self.start = self.last = time.monotonic()
        self.bar = None
        if enabled and sys.stderr.isatty() and sys.stdout.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
            from rich.progress import Progress as Bar

            self.bar = Bar(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                           TimeElapsedColumn(), TimeRemainingColumn(), console=Console(stderr=True, soft_wrap=True),
                           transient=True, auto_refresh=False)  # no redraw thread while timing: drawn in advance()
            self.task = self.bar.add_task(f"{what} ({unit})", total=total)
            self.bar.start()
            self.bar.refresh()
        self.enabled = enabled

    def advance(self, n: int = 1) -> None:
        self.done += n
        if self.bar is not None:
            self.bar.update(self.task, completed=self.done)
            self.bar.refresh()
            return
        now = time.monotonic()
        if self.enabled and now - self.last >= PLAIN_EVERY and self.done < self.total:
            self.last = now
            took = now - self.start
            left = took / self.done * (self.total - self.done) if self.done else None
            say(f"{self.what}: {self.done}/{self.total} {self.unit} after {took:.0f} s" +
                (f", about {left:.0f} s left" if left is not None else ""))

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None
