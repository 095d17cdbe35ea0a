"""The command line: ``commbench <benchmark> [options]``, ``commbench compare``, ``commbench show FILE``.

Bad input ends in one line on stderr naming the problem and the fix, exit status 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from commbench import __version__
from commbench.core import traffic
from commbench.core.argtypes import MAX_ITERATIONS, PORT, RANKS, SECONDS, SEED, integer, number
from commbench.core.config import RunConfig, freeze
from commbench.core.errors import CommbenchError, RunAborted, Unavailable, UsageError, say
from commbench.core.harness import Loops
from commbench.core.hostset import check_set, default_set
from commbench.core.payload import CATEGORIES, SCHEMES, Payload, SchemeSpec, sweep_payloads
from commbench.core.sizes import parse_range, parse_size

DEFAULT_TIMEOUT = 60.0
DEFAULT_POINT_CAP = 1.0  # s: the longest a default-count point runs (grpc at 8 B: 10,000 round trips would take 4 s)
DEFAULT_SIZES = "0:4M"


class Parser(argparse.ArgumentParser):
    """argparse with errors as one line (UsageError) instead of usage text and a traceback-free exit."""

    def error(self, message: str):  # type: ignore[override]
        raise UsageError(f"{message} (see '{self.prog} --help')")


def add_common(p: argparse.ArgumentParser, transports: dict) -> None:
    g = p.add_argument_group("what to send")
    g.add_argument("-m", "--message-size", metavar="MIN:MAX",
                   help="sizes to sweep in powers of two, MIN:MAX or MAX alone for 0:MAX (OSU's -m); one size: "
                        "4K:4K; or a list like 8,1K,1M (default 0:4M)")
    g.add_argument("--payload", metavar="SPEC",
                   help="instead of a sweep: a TF-gRPC-Bench scheme (uniform, random, skew), a model's gradient "
                        "tensors (resnet50, vgg16, ...: commbench payloads list), or SCHEME:MODEL (sizes drawn "
                        "from the model's tensors)")
    g.add_argument("--buffers", type=integer(1, 100_000), default=10, help="buffers per payload (default 10)")
    g.add_argument("--tensors-per-message", type=integer(1, 1_000_000), metavar="K",
                   help="with --payload MODEL: messages of K consecutive tensors, each measured as a point "
                        "(default: the whole model in one message)")
    g.add_argument("--categories", default="S,M,L", help="buffer categories to draw from: S, M, L (default S,M,L)")
    g.add_argument("--small-size", default="10", help="Small buffer size, [1 B, 1 KiB) (default 10)")
    g.add_argument("--medium-size", default="10K", help="Medium buffer size, [1 KiB, 1 MiB) (default 10K)")
    g.add_argument("--large-size", default="1M", help="Large buffer size, [1 MiB, 10 MiB] (default 1M)")
    g.add_argument("--skew-bias", default="large", choices=("large", "medium", "small"),
                   help="skew scheme: the category that gets 60 %% (default large: 60 L / 30 M / 10 S)")
    g.add_argument("--seed", type=SEED, default=1, help="payload and validation seed, the same on every rank")
    g = p.add_argument_group("how long")
    g.add_argument("-i", "--iterations", type=integer(1, MAX_ITERATIONS),
                   help="timed iterations per point (default: OSU's by size)")
    g.add_argument("-x", "--warmup", type=integer(0, MAX_ITERATIONS),
                   help="warm-up iterations per point (default: OSU's by size)")
    g.add_argument("--time", type=SECONDS, help="measure for this many seconds per point instead of counting")
    g.add_argument("--warmup-time", type=number(0, 7 * 86400, what=" (seconds)"), default=2.0,
                   help="warm-up seconds with --time (default 2)")
    g.add_argument("--precision", type=number(above=0, hi=100, what=" (percent)"), metavar="PCT",
                   help="iterate until the 95 %% confidence interval of the median is within +-PCT %% of it "
                        "(or --max-time runs out; the row says which)")
    g.add_argument("--max-time", type=SECONDS, default=30.0, help="seconds per point at most with --precision "
                                                                "(default 30)")
    g.add_argument("--point-cap", type=number(0, 7 * 86400, what=" (seconds)"), default=DEFAULT_POINT_CAP,
                   metavar="S", help="with OSU's default counts, cut a point that its warm-up says would run "
                                     "longer to about S seconds; the Iters column shows what ran "
                                     f"(default {DEFAULT_POINT_CAP:g}; 0: never; -i counts exactly)")
    g = p.add_argument_group("how")
    g.add_argument("-t", "--transport", default="tcp", help=f"one of {', '.join(transports)} (default tcp)")
    g.add_argument("--poll", choices=("blocking", "busy"),
                   help="wait in the kernel (blocking, as sockperf; verbs: completion events) or spin (busy, as "
                        "perftest); default: blocking where the transport has it (mpi: busy, MPI's progress "
                        "engine; verbs: busy)")
    g.add_argument("--validate", nargs="?", const="every", choices=("every", "untimed"),
                   help="check every message's bytes and count #wrong: every (the default; timings include the "
                        "checking) or untimed (as nccl-tests: timed loops unchecked, then one checked round)")
    g.add_argument("--hugepages", choices=("off", "on"), default="off",
                   help="back buffers with transparent huge pages (on) or not (off, the default, as OSU's malloc); "
                        "recorded with the results")
    g.add_argument("--timeout", type=SECONDS, default=DEFAULT_TIMEOUT,
                   help=f"seconds to wait for a peer before giving up (default {DEFAULT_TIMEOUT:g})")
    g.add_argument("--port", type=PORT, default=0,
                   help="rendezvous port P (rank r's data port is P + 1 + r); default: free ports")
    g.add_argument("--np", type=RANKS, help="number of ranks the local launcher starts")
    g.add_argument("--hosts", type=integer(0, 64), default=0, metavar="N",
                   help="run rank r in emulated host r mod N (made by `commbench hosts up N`, root)")
    g.add_argument("--host-set", type=check_set, default=default_set(), metavar="S",
                   help="the set of emulated hosts (`hosts up --set S`; default $COMMBENCH_HOSTS_SET, else the "
                        "default set)")
    g.add_argument("-o", "--output", metavar="FILE", help="append results as measured: FILE.jsonl or FILE.csv")
    g.add_argument("--traffic", action="store_true", help=traffic.HELP + "; rows after the run's last point")
    g.add_argument("--inject-corruption", type=integer(0), default=0, help=argparse.SUPPRESS)
    for cls in transports.values():
        cls.add_arguments(p)


def build_parser() -> Parser:
    from commbench import benchmarks, transports

    tr = transports.registry()
    parser = Parser(prog="commbench", description="Communication micro-benchmarks for distributed deep learning.")
    parser.add_argument("--version", action="version", version=f"commbench {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    for name, cls in benchmarks.registry().items():
        p = sub.add_parser(name, help=cls.help, description=f"{cls.help}. Units: {cls.units}.")
        add_common(p, tr)
        cls.add_arguments(p)
        p.set_defaults(func=run_benchmark, bench=cls)
    from commbench import compare, devices, hosts, payloads_cli, report, show
    from commbench.training import predict, train

    compare.add_parser(sub, tr)
    show.add_parser(sub)
    payloads_cli.add_parser(sub)
    devices.add_parser(sub)
    hosts.add_parser(sub)
    report.add_parser(sub)
    train.add_parser(sub)
    predict.add_parser(sub)
    return parser


def plan_points(args: argparse.Namespace) -> tuple[list[Payload], str | None]:
    """The points to measure, and the payload description for the header (None for a sweep)."""
    if args.payload and args.payload.partition(":")[0] not in SCHEMES:
        from commbench.profiles.store import load

        prof = load(args.payload)
        mb = prof.nbytes / 1e6
        sizes = tuple(t.nbytes for t in prof.tensors)
        spec = (f"gradient tensors of {prof.name}: {len(prof.tensors)} buffers, {mb:.2f} MB "
                f"({prof.meta.get('source', 'profile')})")
        k = args.tensors_per_message
        if k is None:
            return [Payload(f"{prof.name}[{len(sizes)}]={mb:.1f}MB", sizes, "model")], spec
        return ([Payload(f"{prof.name}[{i}:{min(i + k, len(sizes))}]={sum(sizes[i:i + k]) / 1e6:.2f}MB",
                         sizes[i:i + k], "model") for i in range(0, len(sizes), k)],
                spec + f", {k} tensors a message")
    if args.payload:
        scheme, _, model = args.payload.partition(":")
        pool = None
        if model:
            from commbench.profiles.store import load

            prof = load(model)
            pool = prof.sizes_by_category()
        spec = SchemeSpec(scheme, args.buffers, tuple(c.strip().upper() for c in args.categories.split(",")),
                          {"S": parse_size(args.small_size, "--small-size"),
                           "M": parse_size(args.medium_size, "--medium-size"),
                           "L": parse_size(args.large_size, "--large-size")},
                          args.skew_bias, args.seed, pool, model)
        payload = spec.draw()
        cats = ",".join(CATEGORIES[c].name for c in dict.fromkeys(spec.categories))
        return [payload], (f"{spec.scheme} scheme, {spec.buffers} buffers from {cats}"
                           f"{', bias ' + spec.bias if spec.scheme == 'skew' else ''}, seed {spec.seed}: "
                           f"{payload.label}")
    text = args.message_size or DEFAULT_SIZES
    if "," in text:
        sizes = [parse_size(s, "message size") for s in text.split(",")]
        return [Payload(str(s), (s,)) for s in sizes], None
    return sweep_payloads(*parse_range(text)), None


def run_benchmark(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """Check everything that can be checked before any rank starts, decide the run's configuration
    (frozen from here on), then launch the ranks or, inside a launcher, run this one."""
    from commbench import transports

    bench_cls = args.bench
    transport_cls = transports.get(args.transport)
    poll = args.poll or transport_cls.poll_modes[0]
    if poll not in transport_cls.poll_modes:
        raise UsageError(f"the {args.transport} transport waits inside its own library and has no {poll} "
                         f"mode (it has: {', '.join(transport_cls.poll_modes)}); drop --poll {poll}")
    ranks = launched_ranks(bench_cls, args)
    if args.port and args.port + ranks > 65535:
        raise UsageError(f"--port {args.port} leaves no room for the data ports of {ranks} ranks (P + 1 .. P + "
                         f"{ranks}): use a port of at most {65535 - ranks}")
    if args.np is not None and args.np != ranks:
        raise UsageError(f"{bench_cls.name} runs on {ranks} ranks here, not --np {args.np}")
    check_capabilities(bench_cls, args, ranks, transport_cls, transports.registry())
    try:
        transport_cls.check_usable(args)
    except Unavailable as exc:
        from commbench.devices import usable_here

        raise Unavailable(f"{exc}; usable transports here: {usable_here(but=transport_cls.name)}") from None
    if args.traffic:
        traffic.check_usable()
    transport_cls.prepare_process(args)
    loops = Loops(args.iterations, args.warmup, args.time, args.warmup_time, args.precision, args.max_time,
                  args.point_cap)
    own = bench_cls.plan_points(args)
    if args.message_size is not None and (own or args.payload):
        instead = f"--payload {args.payload} sets the message" if args.payload else \
            f"{bench_cls.name} takes its sizes from {bench_cls.size_options}"
        raise UsageError(f"-m/--message-size {args.message_size} is not used here: {instead}; drop -m")
    if own and args.payload:
        raise UsageError(f"--payload {args.payload} is not used here: {bench_cls.name} takes its sizes from "
                         f"{bench_cls.size_options}; drop --payload")
    points, spec = own or plan_points(args)
    config = RunConfig(freeze(args), ranks, poll, tuple(points), spec, loops)
    from commbench.launch.local import here_or_launch

    placement = here_or_launch(ranks, argv, config.args, bench_cls.name, bench_cls.tolerant)
    if isinstance(placement, int):
        return placement
    from commbench.benchmarks.runner import run_rank

    return run_rank(placement, bench_cls, transport_cls, config)


def launched_ranks(bench_cls, args: argparse.Namespace) -> int:
    """The ranks the options ask for; under mpirun or srun without --np, the launcher's size where the
    benchmark takes that many (an all-reduce on 16 tasks): then ``args.np`` is set to it, as if given."""
    from commbench.core.placement import detect

    ranks = bench_cls.ranks(args)
    placed = detect(port=args.port) if args.np is None else None
    if placed is None or placed.launcher == "local" or placed.size == ranks:
        return ranks
    args.np = placed.size
    try:
        if bench_cls.ranks(args) == placed.size:
            return placed.size
    except UsageError:
        pass  # e.g. an odd size for pairs
    args.np = None  # the launcher's size is refused below, naming both
    return ranks


def check_capabilities(bench_cls, args: argparse.Namespace, ranks: int, transport_cls, registry: dict) -> None:
    """The benchmark's needs against what the transport declares it can do; the error names who can."""
    from commbench.transports.base import CAPABILITIES

    needs = bench_cls.needs(args) | ({"many-ranks"} if ranks > 2 else set())
    missing = sorted(needs - transport_cls.capabilities)
    if missing:
        what = "; ".join(f"{m} ({CAPABILITIES[m]})" if m in CAPABILITIES else m for m in missing)
        able = [name for name, cls in registry.items() if needs <= cls.capabilities]
        raise UsageError(f"{bench_cls.name} with these options needs what the {transport_cls.name} transport "
                         f"cannot do: {what}; transports that can: {', '.join(able) or 'none'}")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(argv)
        return args.func(args, argv)
    except RunAborted as exc:
        return exc.exit_code
    except CommbenchError as exc:
        say(str(exc))
        return exc.exit_code
    except KeyboardInterrupt:
        say("interrupted")
        return 130
    except BrokenPipeError:
        return 1
