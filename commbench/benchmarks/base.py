"""What a benchmark is (nccl-tests' testColl, OSU's per-benchmark file): a name, its columns and units,
its loop defaults, its main metric and which way is better, what it needs of a transport, who talks
to whom, how one rank prepares a point (``prepare`` -> ``Side``), and how rank 0 turns every rank's
report into the row (``row``). Collectives declare less still (collective.py).

The runner (runner.py) owns the session, the transport, the table and the results file; the harness
(core/measure/harness.py) owns warm-up, barriers, timing and statistics; ``measure_point`` here owns
validation and the gathering of every rank's report. A benchmark file is short.
"""

from __future__ import annotations

import argparse
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import ClassVar, Generic, TypeVar, cast

import numpy as np

from commbench.core.config import options
from commbench.core.config.options import NoOptions, Options
from commbench.core.config.run import CommonOptions, RunConfig
from commbench.core.measure import buffers, machine
from commbench.core.measure.harness import LATENCY_LOOPS, LoopDefaults, Loops, Side, Sync, Timing, measure
from commbench.core.measure.message import Message, Pattern
from commbench.core.measure.payload import Payload
from commbench.core.output.presentation import SERIES, Presentation
from commbench.core.output.table import Column, declared, key
from commbench.core.run.world import World
from commbench.transports.base import Link, Transport

SIZE = Column("size", "Size", -14, unit="B", doc="bytes of one message, all its buffers")
PAYLOAD = Column("payload", "Payload", -30, doc="the message: its size, or the scheme or model and its buffers")
WRONG = Column("wrong", "#wrong", 7, "{:d}", "count", "messages (collectives: output elements) that arrived "
               "different from what was sent; counted with --validate, else 0")
POINT_KEYS = [key("huge_kb", "KiB", "rank 0's memory backed by transparent huge pages while the point's buffers "
                                    "existed (AnonHugePages)"),
              key("stop", doc="why the timed loop ended when it was not the count: time (--time), precision or "
                              "max-time (--precision), cap (--point-cap)", optional=True)]


@dataclass
class Context:
    """Everything a benchmark's prepare may use."""

    world: World
    transport: Transport
    links: dict[int, Link]
    config: RunConfig
    loops: Loops
    validate: str | None  # None, "every" (timings include checking) or "untimed" (nccl-tests: one checked round)
    seed: int
    corrupt_every: int = 0  # test hook: flip a byte in every Nth outgoing message (validation tests)
    quiet: Callable[[], AbstractContextManager] = nullcontext  # the run's background work asleep (timed loops)
    traffic: list | None = None  # with --traffic, on rank 0: (payload, window, steps) per point measured

    def checker(self, payload: Payload, origin: int) -> Checker:
        """A checker for messages of this payload sent by rank ``origin``."""
        return Checker(Pattern(payload.sizes, self.seed, origin), self.corrupt_every)

    def sync(self) -> Sync:
        return Sync(self.world.rank, self.transport.barrier, self.world.bcast_json, self.quiet)


OptionsT = TypeVar("OptionsT", bound=Options)  # a benchmark's own options: Benchmark[ItsOptions]


class Benchmark(ABC, Generic[OptionsT]):
    name: ClassVar[str]
    help: ClassVar[str]
    units: ClassVar[str]
    # the units line of another tool's rows (commbench import): the units alone, not how commbench samples
    imported_units: ClassVar[str] = "as the tool computed them, in commbench's units (its own loop and statistics)"
    columns: ClassVar[list[Column]]
    loops: ClassVar[LoopDefaults] = LATENCY_LOOPS
    loop_source: ClassVar[str] = "OSU"  # whose default iteration counts the benchmark uses
    metric: ClassVar[str]  # the row key report and compare read
    better: ClassVar[str] = "lower"  # or "higher"
    tolerant: ClassVar[bool] = False  # a rank that dies is a finding, not the end of the run (cluster)
    size_options: ClassVar[str] = "-m or --payload"  # where its message sizes come from (plan_points' options)
    payloads: ClassVar[bool] = True  # it takes --payload and its options (not: they are left out of its parser)
    keys: ClassVar[list[Column]] = []  # row keys it writes but does not print (columns: those it prints)
    figure: ClassVar[str] = "line"  # how report shows it (core/output/presentation.py)
    x_axis: ClassVar[str] = "size"
    series_keys: ClassVar[tuple[str, ...]] = SERIES

    Options: ClassVar[type[Options]] = NoOptions  # the benchmark's own flags
    common_defaults: ClassVar[dict[str, object]] = {}  # common options' defaults it changes (--payload skew)

    def __init__(self, config: RunConfig) -> None:
        self.config = config
        self.opts: OptionsT = cast(OptionsT, config.bench)  # an instance of its Options
        self.common = config.common

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        """The benchmark's own flags (its Options')."""
        cls.Options.add_to(parser)

    @classmethod
    def presentation(cls) -> Presentation:
        return Presentation(cls.metric, cls.better, cls.figure, cls.x_axis, cls.series_keys, title=cls.name)

    @classmethod
    def row_keys(cls) -> dict[str, Column]:
        """Every key its rows (and conclude's) may hold beyond the runner's, declared."""
        return declared(cls.columns, cls.keys, [WRONG], POINT_KEYS)

    @classmethod
    def default_options(cls) -> options.Options:
        """Its options as a command line without its flags gives them."""
        return cls.Options()

    @classmethod
    def ranks(cls, opts: OptionsT, common: CommonOptions) -> int:
        """How many ranks the options ask for (``--np`` where the benchmark takes any number)."""
        return 2

    @classmethod
    def needs(cls, opts: OptionsT, common: CommonOptions) -> frozenset[str]:
        """The transport capabilities these options use (transports/base.py CAPABILITIES, native:OP)."""
        return frozenset({"call"})

    @classmethod
    def plan_points(cls, opts: OptionsT, common: CommonOptions) -> tuple[list[Payload], str | None] | None:
        """The points to measure, if this benchmark plans its own (None: the common -m / --payload)."""
        return None

    @abstractmethod
    def peers(self, world: World) -> list[int]:
        """The ranks this rank exchanges messages with."""

    def prepare(self, ctx: Context, payload: Payload, checked: bool) -> Side:
        """This rank's part of one point: buffers allocated (and touched), the step or run callables.
        (Every benchmark measured point by point has one; one that overrides ``measure`` may not.)"""
        raise NotImplementedError

    def row(self, payload: Payload, timing: Timing, reports: list[dict]) -> dict:
        """Rank 0: the row's columns from its own timing and every rank's report (n, wall_ns, ...)."""
        raise NotImplementedError

    def measure(self, ctx: Context) -> Iterator[tuple[Payload, dict | None]]:
        """Every point, measured in turn: (payload, its row on rank 0, None elsewhere). A benchmark
        that schedules its own work (cluster: rounds of pairs) yields its rows as it measures them."""
        for payload in self.config.points:
            yield payload, measure_point(ctx, self, payload)

    def progress(self, world: World) -> tuple[int, str]:
        """What the progress bar counts: (total, unit)."""
        return len(self.config.points), "points"

    def metadata(self, world: World) -> dict:
        """Rank 0, before the results file opens: what the benchmark adds to the run's metadata."""
        return {}

    def conclude(self, ctx: Context) -> tuple[list[str], list[dict]]:
        """Rank 0, after the last row: lines to print below the table and rows to add to the results."""
        return [], []

    def failed(self) -> bool:
        """Rank 0, at the end: whether the run lost a rank it went on without (a tolerant run's exit
        status is then 1, whatever the launcher makes of the death)."""
        return False

    def roles(self, world: World) -> list[str]:
        """Each rank's role, as --traffic names the ends of a connection (default: rank0, rank1, ...)."""
        return [f"rank{r}" for r in range(world.size)]

    def traffic_steps(self, timing: Timing) -> int:
        """What --traffic divides by: the timed iterations (a benchmark may count its own steps)."""
        return max(1, timing.n)

    @classmethod
    def header(cls, meta: dict) -> list[str]:
        """The '#' lines above the table, built from the run's metadata only (so `show` can redo them)."""
        o = meta["options"]
        imp = meta.get("imported")
        if isinstance(imp, dict):  # another tool's output (commbench import)
            return [f"# {imp.get('tool')} {imp.get('version') or ''} output imported from {imp.get('file')} "
                    f"as {cls.name} rows".replace("  ", " "),
                    f"# measured: {o.get('transport')} ({o.get('mode')})   ranks: {o.get('ranks')}   "
                    f"command: {' '.join(imp.get('command') or []) or 'not in the output'}",
                    *(f"# {n}" for n in imp.get("notes") or []), f"# units: {cls.imported_units}"]
        check = {None: "off", False: "off", True: "every message (timings include checking)",
                 "every": "every message (timings include checking)",
                 "untimed": "one checked round after the timed loop (timings unchanged, as nccl-tests)"}
        got = meta.get("versions")
        versions: dict = got if isinstance(got, dict) else {}
        validate = o.get("validate")
        validate = check.get(validate, validate) if isinstance(validate, (str, bool, type(None))) else validate
        lines = [f"# commbench {cls.name} v{versions.get('commbench', '?')}: {cls.help}",
                 f"# transport: {o.get('transport', '?')} ({o.get('mode', '?')})   ranks: {o.get('ranks', '?')}   "
                 f"hosts: {', '.join(sorted(set(meta.get('hosts') or [])))}",
                 f"# loops: {o.get('loops', '?')}   validate: {validate}",
                 f"# units: {cls.units}"]
        cpu = meta.get("cpu")
        if isinstance(cpu, dict) and all(isinstance(cpu.get(k), (int, float)) for k in ("busy", "cpus", "spinning")):
            warn = machine.crowded(cpu, int(cpu["spinning"]))
            if warn:
                lines.append(warn)
        mem = meta.get("memory")
        if isinstance(mem, dict):
            lines.insert(3, f"# buffers: touched before each point; huge pages {mem.get('hugepages', '?')} "
                            f"(system THP: {mem.get('system_thp', '?')})")
        if o.get("payload_spec"):
            lines.insert(2, f"# payload: {o['payload_spec']}")
        elif (m := o.get("message_size")) and not any(c in m for c in ":,"):  # OSU's -m MAX surprises
            lines.insert(2, f"# sizes: -m {m} sweeps 0 to {m} in powers of two (OSU's -m MAX); one size alone: "
                            f"-m {m}:{m}")
        return lines

    @classmethod
    def size_column(cls, meta: dict) -> Column:
        return PAYLOAD if meta["options"].get("payload_spec") else SIZE


class Checker:
    """``--validate`` for one direction of one link: fills each outgoing message with the pattern of its
    iteration and counts received messages that differ from theirs (nccl-tests' #wrong).

    Both ends count messages in the order sent, so a stale, repeated or reordered message is wrong.
    Under the test hook ``corrupt_every``, every Nth outgoing message carries one flipped byte.
    """

    def __init__(self, pattern: Pattern, corrupt_every: int = 0) -> None:
        self.pattern = pattern
        self.corrupt_every = corrupt_every
        self.wrong = 0
        self.sent = 0
        self.received = 0

    def prepare(self, msg: Message) -> Message:
        """Fill msg with the next outgoing iteration's content (and corrupt it if the hook says so)."""
        msg.fill(self.pattern, self.sent)
        self.sent += 1
        if self.corrupt_every and self.sent % self.corrupt_every == 0:
            for arr in msg.arrays:
                if len(arr):
                    arr[len(arr) // 2] ^= 0xFF
                    break
        return msg

    def check(self, msg: Message) -> None:
        """After a receive: count it wrong unless it holds the next incoming iteration's content."""
        if not msg.matches(self.pattern, self.received):
            self.wrong += 1
        self.received += 1


def measure_point(ctx: Context, bench: Benchmark, payload: Payload) -> dict | None:
    """One point on this rank: prepare, measure (harness), validate, gather; rank 0 returns the row."""
    sync = ctx.sync()
    before = ctx.transport.counters()
    side = bench.prepare(ctx, payload, ctx.validate == "every")
    timing = measure(sync, ctx.loops, bench.loops, payload.nbytes, side)
    window = sync.window
    wrong = side.wrong()
    if ctx.validate == "untimed":  # nccl-tests: timings unchanged, then one checked round
        checked = bench.prepare(ctx, payload, True)
        sync.barrier()
        checked.go(1)
        wrong += checked.wrong()
    counts = {k: v - before.get(k, 0) for k, v in ctx.transport.counters().items()}  # warm-up included
    mine = {"n": timing.n, "wall_ns": timing.wall_ns, "wrong": wrong, "stop": timing.stop, "window": window,
            "counters": counts, **side.report()}
    if timing.samples is not None:
        mine["mean_ns"] = float(np.mean(timing.samples))
    reports = ctx.world.gather_json(f"{bench.name}-point", mine, patient=True)
    if reports is None:
        return None
    row = bench.row(payload, timing, reports)
    if ctx.traffic is not None:  # every rank's timed loop: the window --traffic sums over
        ctx.traffic.append((payload, [min(r["window"][0] for r in reports), max(r["window"][1] for r in reports)],
                            bench.traffic_steps(timing)))
    row.setdefault("wrong", sum(r["wrong"] for r in reports))
    for k in reports[0]["counters"]:  # the transport's own counts, all ranks summed
        row[k] = sum(r["counters"].get(k, 0) for r in reports)
    row["huge_kb"] = buffers.huge_kb()  # rank 0's page backing, while this point's buffers (side) still exist
    if timing.stop != "count":
        row.setdefault("stop", timing.stop)
    return row
