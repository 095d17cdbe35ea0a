"""What a collective benchmark is (nccl-tests' testColl): the operation's name, its bus factor, the
algorithms it emulates over any transport's links, how many input elements one output needs, and
what each rank's output must hold. This base owns the rest, once for every collective:

- points: ``-b`` to ``-e`` by factor ``-f`` (bytes of float32 output), or ``--payload`` (one
  collective per tensor); counts rounded to whole blocks where the output has one per rank;
- buffers: touched, from core/measure/buffers.py; ``native`` is the transport's own collective (MPI);
- validation: rank r's input at iteration i is ``base x (r + 1) + i mod 64`` (base = 1..7 repeating,
  so every sum is exact in float32); output and scratch are set to NaN before each checked round;
  #wrong counts output elements that differ from ``expect``;
- the row: time per collective, each rank's mean averaged over ranks with the fastest and slowest
  rank's (nccl-tests' default), algbw = bytes / time, busbw = algbw x bus factor (GB = 10^9 B).

A new collective is one file: a subclass naming ``name``, ``help``, ``op``, ``algorithms``, and
defining ``bus_factor``, ``plan`` and ``expect`` (``in_count`` and ``blocks`` where not 1:1).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from commbench.benchmarks.base import WRONG, Benchmark, Context
from commbench.core.config.argtypes import RANKS, integer
from commbench.core.config.options import Options, opt
from commbench.core.config.run import CommonOptions
from commbench.core.errors import UsageError
from commbench.core.measure import buffers
from commbench.core.measure.harness import COLLECTIVE_LOOPS, Side, Timing, spread
from commbench.core.measure.payload import Payload
from commbench.core.measure.sizes import parse_size
from commbench.core.output.table import Column
from commbench.core.run.world import World

GBS = "{:.3f}"
US = "{:.2f}"
F32 = np.float32
Plan = tuple[Callable[[], None], list[np.ndarray]]  # run one collective; scratch to clear when checking


@dataclass
class Part:
    """One buffer's collective on this rank (a point has one per tensor or bucket)."""

    inp: np.ndarray
    out: np.ndarray
    base: np.ndarray
    run: Callable[[], None]
    scratch: list[np.ndarray]
    expected: np.ndarray | None


@dataclass(frozen=True)
class CollectiveOptions(Options):
    algorithm: str = opt(None, "--algorithm", "-a")  # choices and default: the collective's (add_arguments)
    ranks: int | None = opt(None, type=RANKS, help="ranks the local launcher starts (default 4; as --np)")
    minbytes: str = opt("4K", "-b", "--minbytes", help="smallest output size (default 4K)")
    maxbytes: str = opt("4M", "-e", "--maxbytes", help="largest output size (default 4M)")
    stepfactor: int = opt(2, "-f", "--stepfactor", type=integer(2, 1024), help="size factor between points (default 2)")


@dataclass(frozen=True)
class RootedOptions(CollectiveOptions):
    root: int = opt(0, type=integer(0, 4095), help="the root rank (default 0)")


class Collective(Benchmark[CollectiveOptions]):
    op: ClassVar[str]  # the native operation's name (transports' native:OP capability)
    algorithms: ClassVar[tuple[str, ...]]  # emulated over links; the first is the default; "native" is added
    redop: ClassVar[str] = "none"
    blocks: ClassVar[bool] = False  # the output holds one block per rank: counts are multiples of the ranks
    loops = COLLECTIVE_LOOPS
    metric, better = "busbw", "higher"
    imported_units = ("time in us per collective, algbw and busbw in GB/s = 10^9 B/s, as the tool computed them (its "
                      "own loop and statistics); \"-\": the tool does not give it")
    units = ("time in us per collective: each rank's mean, averaged over ranks (min/max: fastest and slowest rank); "
             "count = float32 elements of the output; algbw and busbw in GB/s = 10^9 B/s from the average, "
             "as nccl-tests")
    columns = [Column("count", "Count", 11, "{:d}", "count", "float32 elements of the output"),
               Column("dtype", "Type", 7, doc="element type (float32)"),
               Column("redop", "Op", 4, doc="reduction (sum; none where nothing is reduced)"),
               Column("root", "Root", 5, "{:d}", doc="the root rank (-1: none)"),
               Column("algorithm", "Algorithm", 19, doc="the emulated algorithm, or native (the library's)"),
               Column("time_us", "Time(us)", 11, US, "us", "time per collective: each rank's mean, averaged"),
               Column("time_min_us", "Min", 10, US, "us", "the fastest rank's mean"),
               Column("time_max_us", "Max", 10, US, "us", "the slowest rank's mean"),
               Column("algbw", "Algbw", 9, GBS, "GB/s", "output bytes / time (10^9 B/s)"),
               Column("busbw", "Busbw", 9, GBS, "GB/s", "algbw x the bus factor (nccl-tests)"),
               Column("iterations", "Iters", 7, "{:d}", "count", "timed collectives"), WRONG]

    Options = CollectiveOptions
    opts: CollectiveOptions  # its instance (self.opts)

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        names = (*cls.algorithms, "native")
        cls.Options.add_to(parser, overrides={"algorithm": {
            "choices": names, "default": names[0],
            "help": f"default {names[0]}; native: the transport's own {cls.op} (MPI)"}})

    @classmethod
    def default_options(cls) -> CollectiveOptions:
        return cls.Options(algorithm=cls.algorithms[0])

    @classmethod
    def ranks(cls, opts: CollectiveOptions, common: CommonOptions) -> int:
        n = opts.ranks or common.np or 4
        if n < 2:
            raise UsageError(f"{cls.name} needs at least 2 ranks, not {n}")
        if isinstance(opts, RootedOptions) and not 0 <= opts.root < n:
            raise UsageError(f"--root must be a rank, 0 to {n - 1}, not {opts.root}")
        return n

    @classmethod
    def needs(cls, opts: CollectiveOptions, common: CommonOptions) -> frozenset[str]:
        return frozenset({f"native:{cls.op}"} if opts.algorithm == "native" else {"exchange"})

    size_options = "-b/--minbytes to -e/--maxbytes"

    @classmethod
    def plan_points(cls, opts: CollectiveOptions, common: CommonOptions) -> tuple[list[Payload], str | None] | None:
        if common.payload:
            return None  # the common --payload handling (models, schemes)
        lo, hi = parse_size(opts.minbytes, "-b"), parse_size(opts.maxbytes, "-e")
        if lo < 4 or lo > hi or opts.stepfactor < 2:
            raise UsageError(f"need 4 <= -b ({lo}) <= -e ({hi}) and -f >= 2 ({opts.stepfactor})")
        unit = cls.ranks(opts, common) if cls.blocks else 1
        points: list[Payload] = []
        s = lo
        while s <= hi:
            nbytes = 4 * max(unit, s // 4 // unit * unit)
            if not points or points[-1].nbytes != nbytes:
                points.append(Payload(str(nbytes), (nbytes,)))
            s *= opts.stepfactor
        return points, None

    @property
    def root(self) -> int:
        return self.opts.root if isinstance(self.opts, RootedOptions) else -1

    def peers(self, world: World) -> list[int]:
        """The ranks this rank's algorithm talks to (a ring: two; native: none, MPI's own business), so that
        a rank holds only the connections it uses, not one per rank of the run."""
        if self.opts.algorithm == "native":
            return []
        return sorted(set(self.algorithm_peers(self.opts.algorithm, world.rank, world.size)) - {world.rank})

    def algorithm_peers(self, algorithm: str, rank: int, n: int) -> list[int]:
        """Whom ``algorithm`` exchanges with on rank ``rank`` of ``n`` (default: everyone)."""
        return list(range(n))

    # -- what a collective defines ------------------------------------------------------------------
    @staticmethod
    def bus_factor(n: int) -> float:
        """busbw / algbw on n ranks (nccl-tests' PERFORMANCE.md)."""
        raise NotImplementedError

    def counts(self, payload: Payload) -> list[int]:
        """Output elements of each collective of a point (one per buffer of the payload)."""
        unit = self.config.ranks if self.blocks else 1
        return [max(unit, s // 4 // unit * unit) for s in payload.sizes]

    def in_count(self, count: int, n: int) -> int:
        """Input elements for an output of ``count`` elements."""
        return count

    def plan(self, ctx: Context, inp: np.ndarray, out: np.ndarray) -> Plan:
        """The emulated algorithm (``self.opts.algorithm``) over ``ctx.links`` and ``ctx.transport``."""
        raise NotImplementedError

    def expect(self, rank: int, n: int, base: np.ndarray, k: F32, into: np.ndarray) -> bool:
        """Write the output rank ``rank`` must hold when rank r's input is ``base x (r + 1) + k``;
        False if this rank's output is not defined (nothing to check)."""
        raise NotImplementedError

    # -- what the base does with it -----------------------------------------------------------------
    def prepare(self, ctx: Context, payload: Payload, checked: bool) -> Side:
        me, n = ctx.world.rank, ctx.world.size
        parts = []
        for count in self.counts(payload):
            m = self.in_count(count, n)
            inp, out = buffers.array(m, F32), buffers.array(count, F32)
            base = (np.arange(m) % 7 + 1).astype(F32)
            np.multiply(base, F32(me + 1), out=inp)
            if self.opts.algorithm == "native":
                run, scratch = ctx.transport.native(self.op, inp, out, max(self.root, 0)), list[np.ndarray]()
            else:
                run, scratch = self.plan(ctx, inp, out)
            parts.append(Part(inp, out, base, run, scratch, buffers.array(count, F32) if checked else None))
        if not checked:
            if len(parts) == 1:
                return Side(step=parts[0].run)
            runs = [p.run for p in parts]

            def step() -> None:
                for run in runs:
                    run()
            return Side(step=step)
        return self._checked(ctx, parts)

    def _checked(self, ctx: Context, parts: list[Part]) -> Side:
        me, n = ctx.world.rank, ctx.world.size
        corrupter = me == max(self.root, 0) and ctx.corrupt_every
        wrong, it = [0], [0]
        checked = [(p, p.expected) for p in parts if p.expected is not None]  # every part (prepare: checked)

        def step() -> None:
            i = it[0] = it[0] + 1
            k = F32(i % 64)
            for p, expected in checked:
                np.multiply(p.base, F32(me + 1), out=p.inp)
                p.inp += k
                defined = self.expect(me, n, p.base, k, expected)
                if corrupter and i % ctx.corrupt_every == 0:  # test hook: data that differs from what it should be
                    p.inp[0] += 1
                for arr in (p.out, *p.scratch):
                    arr.fill(np.nan)
                p.run()
                if defined:
                    wrong[0] += int(np.count_nonzero(p.out != expected))
        return Side(step=step, wrong=lambda: wrong[0])

    def row(self, payload: Payload, timing: Timing, reports: list[dict]) -> dict:
        avg, lo, hi = spread([r["mean_ns"] / 1e3 for r in reports])
        count = sum(self.counts(payload))
        algbw = 4 * count / (avg * 1e-6) / 1e9
        return {"iterations": timing.n, "count": count, "dtype": "float32", "redop": self.redop, "root": self.root,
                "algorithm": self.opts.algorithm, "time_us": avg, "time_min_us": lo, "time_max_us": hi,
                "algbw": algbw, "busbw": algbw * self.bus_factor(len(reports))}
