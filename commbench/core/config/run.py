"""A run's configuration, decided once by the CLI and only read after: the typed options (common, the
benchmark's own and the transport's own, each a frozen ``Options`` dataclass) plus what is derived
from them (rank count, poll mode, the points, the loops).

Every rank checks that the others decided the same (``plan``: options and points).
"""

from __future__ import annotations

import argparse
import hashlib
import json
from dataclasses import dataclass, field

from commbench.core.capture import traffic
from commbench.core.config.argtypes import MAX_ITERATIONS, PORT, RANKS, SECONDS, SEED, TIMEOUT, integer, number
from commbench.core.config.options import NoOptions, Options, opt
from commbench.core.measure.harness import Loops
from commbench.core.measure.payload import Payload
from commbench.core.run.hostset import check_set

DEFAULT_TIMEOUT = 60.0
DEFAULT_POINT_CAP = 1.0  # s: the longest a default-count point runs (grpc at 8 B: 10,000 round trips would take 4 s)
DEFAULT_SIZES = "0:4M"
SEND, LONG, HOW, LAUNCH = "what to send", "how long", "how", "ranks and results"
# the options of --payload: a benchmark that plans its own sizes from options of its own (cluster) has none of them
PAYLOAD = ("payload", "buffers", "tensors_per_message", "categories", "small_size", "medium_size", "large_size",
           "skew_bias")


@dataclass(frozen=True)
class RunOptions(Options):
    """What every job that starts ranks takes (every benchmark, ``train``): how long to wait for a peer,
    where the ranks meet and run, where the results go, and whether to capture the traffic."""

    timeout: float = opt(DEFAULT_TIMEOUT, group=LAUNCH, type=TIMEOUT,
                         help=f"seconds to wait for a peer before giving up (default {DEFAULT_TIMEOUT:g})")
    port: int = opt(0, group=LAUNCH, type=PORT,
                    help="rendezvous port P (rank r's own port is P + 1 + r); default: free ports")
    hosts: int = opt(0, group=LAUNCH, type=integer(0, 64), metavar="N",
                     help="run rank r in emulated host r mod N (made by `commbench hosts up N`, root)")
    host_set: str = opt("", group=LAUNCH, type=check_set, metavar="S",
                        help="the set of emulated hosts (`hosts up --set S`; default $COMMBENCH_HOSTS_SET, else "
                             "the default set)")
    output: str | None = opt(None, "-o", "--output", group=LAUNCH, metavar="FILE",
                             help="write results as measured, a row at a time: FILE.jsonl (an existing file is "
                                  "appended to: a file may hold several runs) or FILE.csv (an existing file is "
                                  "replaced)")
    traffic: bool = opt(False, group=LAUNCH, action="store_true",
                        help=traffic.HELP + "; rows after the run's last point (train: per step, in its row)")


@dataclass(frozen=True)
class CommonOptions(RunOptions):
    """The options every benchmark takes (``PAYLOAD``'s only where it takes --payload)."""

    groups = (SEND, LONG, HOW, LAUNCH)

    message_size: str | None = opt(
        None, "-m", "--message-size", group=SEND, metavar="MIN:MAX",
        help="sizes to sweep in powers of two, MIN:MAX or MAX alone for 0:MAX (OSU's -m); one size: 4K:4K; or a "
             "list like 8,1K,1M (default 0:4M)")
    payload: str | None = opt(
        None, group=SEND, metavar="SPEC",
        help="instead of a sweep: a TF-gRPC-Bench scheme (uniform, random, skew), a model's gradient tensors "
             "(resnet50, vgg16, ...: commbench payloads list), or SCHEME:MODEL (sizes drawn from the model's "
             "tensors)")
    buffers: int = opt(10, group=SEND, type=integer(1, 100_000), help="buffers per payload (default 10)")
    tensors_per_message: int | None = opt(
        None, group=SEND, type=integer(1, 1_000_000), metavar="K",
        help="with --payload MODEL: messages of K consecutive tensors, each measured as a point (default: the "
             "whole model in one message)")
    categories: str = opt("S,M,L", group=SEND, help="buffer categories to draw from: S, M, L (default S,M,L)")
    small_size: str = opt("10", group=SEND, help="Small buffer size, [1 B, 1 KiB) (default 10)")
    medium_size: str = opt("10K", group=SEND, help="Medium buffer size, [1 KiB, 1 MiB) (default 10K)")
    large_size: str = opt("1M", group=SEND, help="Large buffer size, [1 MiB, 10 MiB] (default 1M)")
    skew_bias: str = opt("large", group=SEND, choices=("large", "medium", "small"),
                         help="skew scheme: the category that gets 60 %% (default large: 60 L / 30 M / 10 S)")
    seed: int = opt(1, group=SEND, type=SEED, help="payload and validation seed, the same on every rank")
    iterations: int | None = opt(None, "-i", "--iterations", group=LONG, type=integer(1, MAX_ITERATIONS),
                                 help="timed iterations per point (default: OSU's by size)")
    warmup: int | None = opt(None, "-x", "--warmup", group=LONG, type=integer(0, MAX_ITERATIONS),
                             help="warm-up iterations per point (default: OSU's by size)")
    time: float | None = opt(None, group=LONG, type=SECONDS,
                             help="measure for this many seconds per point instead of counting")
    warmup_time: float = opt(2.0, group=LONG, type=number(0, 7 * 86400, what=" (seconds)"),
                             help="warm-up seconds with --time (default 2)")
    precision: float | None = opt(
        None, group=LONG, type=number(above=0, hi=100, what=" (percent)"), metavar="PCT",
        help="iterate until the 95 %% confidence interval of the median is within +-PCT %% of it (or --max-time "
             "runs out; the row says which)")
    max_time: float = opt(30.0, group=LONG, type=SECONDS, help="seconds per point at most with --precision "
                                                               "(default 30)")
    point_cap: float = opt(
        DEFAULT_POINT_CAP, group=LONG, type=number(0, 7 * 86400, what=" (seconds)"), metavar="S",
        help="with OSU's default counts, cut a point that its warm-up says would run longer to about S seconds; "
             f"the Iters column shows what ran (default {DEFAULT_POINT_CAP:g}; 0: never; -i counts exactly)")
    transport: str = opt("tcp", "-t", "--transport", group=HOW, help="the transport (default tcp)")
    poll: str | None = opt(
        None, group=HOW, choices=("blocking", "busy"),
        help="wait in the kernel (blocking, as sockperf; verbs: completion events) or spin (busy, as perftest); "
             "default: blocking where the transport has it (mpi: busy, MPI's progress engine; verbs: busy)")
    validate: str | None = opt(
        None, group=HOW, nargs="?", const="every", choices=("every", "untimed"),
        help="check every message's bytes and count #wrong: every (the default; timings include the checking) or "
             "untimed (as nccl-tests: timed loops unchecked, then one checked round)")
    hugepages: str = opt("off", group=HOW, choices=("off", "on"),
                         help="back buffers with transparent huge pages (on) or not (off, the default, as OSU's "
                              "malloc); recorded with the results")
    np: int | None = opt(None, group=LAUNCH, type=RANKS, help="number of ranks the local launcher starts")
    inject_corruption: int = opt(0, group=HOW, type=integer(0), help=argparse.SUPPRESS)

    def loops(self) -> Loops:
        return Loops(self.iterations, self.warmup, self.time, self.warmup_time, self.precision, self.max_time,
                     self.point_cap)


@dataclass(frozen=True)
class RunConfig:
    """What one benchmark run measures and how; the same on every rank (the CLI builds it from argv)."""

    common: CommonOptions
    ranks: int
    poll: str = "blocking"
    points: tuple[Payload, ...] = ()
    payload_spec: str | None = None  # the payload's description for the header (None for a size sweep)
    loops: Loops = field(default_factory=Loops)
    bench: Options = field(default_factory=NoOptions)  # the benchmark's own options
    net: Options = field(default_factory=NoOptions)  # the transport's own options

    @property
    def largest_message(self) -> int:
        """Bytes of the largest point's message (transports size registered pools by it)."""
        return max((p.nbytes for p in self.points), default=0)

    def options(self) -> dict:
        """The options as saved with the results."""
        return {**self.common.plain(), **self.bench.plain(), **self.net.plain()}

    def plan(self) -> str:
        """A digest of what this rank will measure (options but the output file, ranks, poll, every
        point's sizes, loops): ranks compare it once at start."""
        decided = {k: v for k, v in self.options().items() if k != "output"}
        decided.update(ranks=self.ranks, poll=self.poll, loops=repr(self.loops),
                       points=[[p.label, list(p.sizes)] for p in self.points])
        return hashlib.sha256(json.dumps(decided, sort_keys=True, default=str).encode()).hexdigest()
