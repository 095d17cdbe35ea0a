"""A benchmark's run planned from its command line: its parser (the common options, every
transport's, the benchmark's own), then ``decide``: typed options, ranks, poll mode, capabilities,
points and loops, everything checked that can be before any rank starts, frozen in a RunConfig.
``cli`` builds the whole command line from it; ``compare`` plans its runs with it.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import asdict, fields
from pathlib import Path
from typing import TYPE_CHECKING

from commbench.core.capture import traffic
from commbench.core.config.options import Options, flag_of
from commbench.core.config.run import DEFAULT_SIZES, PAYLOAD, CommonOptions, RunConfig
from commbench.core.errors import Unavailable, UsageError
from commbench.core.measure.harness import Loops
from commbench.core.measure.payload import CATEGORIES, SCHEMES, Payload, SchemeSpec, sweep_payloads
from commbench.core.measure.sizes import parse_range, parse_size
from commbench.core.output.results import FORMATS
from commbench.core.run.hostset import default_set

if TYPE_CHECKING:
    from commbench.benchmarks.base import Benchmark
    from commbench.transports.base import Transport


class Parser(argparse.ArgumentParser):
    """argparse with errors as one line (UsageError) instead of usage text and a traceback-free exit."""

    def error(self, message: str):
        raise UsageError(f"{message} (see '{self.prog} --help')")


def add_common(p: argparse.ArgumentParser, transports: dict, own_sizes: bool = False, payloads: bool = True) -> None:
    """The common options, then every transport's own (a field shared by several transports once).
    ``own_sizes``: the benchmark plans its own sizes, so -m is left out of its help (and refused);
    without ``payloads`` it has no --payload nor its options."""
    CommonOptions.add_to(p, skip=None if payloads else set(PAYLOAD), overrides={
        "transport": {"help": f"one of {', '.join(transports)} (default tcp)"},
        "host_set": {"default": default_set()},
        **({"message_size": {"help": argparse.SUPPRESS}} if own_sizes else {})})
    added: set[str] = set()
    for cls in transports.values():
        cls.Options.add_to(p, skip=added)



def add_benchmark(sub, name: str, cls: type[Benchmark], transports: dict) -> None:
    """The benchmark's command: the common options, every transport's, its own."""
    from commbench.benchmarks.base import Benchmark

    p = sub.add_parser(name, help=cls.help, description=f"{cls.help}. Units: {cls.units}.")
    own = getattr(cls.plan_points, "__func__", None) is not getattr(Benchmark.plan_points, "__func__", None)
    add_common(p, transports, own_sizes=own,
               payloads=cls.payloads)
    cls.add_arguments(p)
    p.set_defaults(func=run_benchmark, bench=cls, **cls.common_defaults)


def parse_benchmark(argv: Sequence[str]) -> argparse.Namespace:
    """A benchmark's command line (its name first) parsed as ``commbench`` parses it."""
    from commbench import benchmarks, transports

    parser = Parser(prog="commbench")
    add_benchmark(parser.add_subparsers(dest="command", parser_class=Parser), argv[0],
                  benchmarks.registry()[argv[0]], transports.registry())
    return parser.parse_args(argv)


def plan_points(o: CommonOptions) -> tuple[list[Payload], str | None]:
    """The points to measure, and the payload description for the header (None for a sweep)."""
    if o.payload and o.payload.partition(":")[0] not in SCHEMES:
        from commbench.profiles.store import load

        prof = load(o.payload)
        mb = prof.nbytes / 1e6
        sizes = tuple(t.nbytes for t in prof.tensors)
        described = (f"gradient tensors of {prof.name}: {len(prof.tensors)} buffers, {mb:.2f} MB "
                f"({prof.meta.get('source', 'profile')})")
        k = o.tensors_per_message
        if k is None:
            return [Payload(f"{prof.name}[{len(sizes)}]={mb:.1f}MB", sizes, "model")], described
        return ([Payload(f"{prof.name}[{i}:{min(i + k, len(sizes))}]={sum(sizes[i:i + k]) / 1e6:.2f}MB",
                         sizes[i:i + k], "model") for i in range(0, len(sizes), k)],
                described + f", {k} tensors a message")
    if o.payload:
        name, _, model = o.payload.partition(":")
        pool = None
        if model:
            from commbench.profiles.store import load

            prof = load(model)
            pool = prof.sizes_by_category()
        spec = SchemeSpec(name, o.buffers, tuple(c.strip().upper() for c in o.categories.split(",")),
                          {"S": parse_size(o.small_size, "--small-size"),
                           "M": parse_size(o.medium_size, "--medium-size"),
                           "L": parse_size(o.large_size, "--large-size")},
                          o.skew_bias, o.seed, pool, model)
        payload = spec.draw()
        cats = ",".join(CATEGORIES[c].name for c in dict.fromkeys(spec.categories))
        return [payload], (f"{spec.scheme} scheme, {spec.buffers} buffers from {cats}"
                           f"{', bias ' + spec.bias if spec.scheme == 'skew' else ''}, seed {spec.seed}: "
                           f"{payload.label}")
    text = DEFAULT_SIZES if o.message_size is None else o.message_size
    if "," in text:
        listed = [parse_size(s, "message size") for s in text.split(",")]
        return [Payload(str(s), (s,)) for s in listed], None
    return sweep_payloads(*parse_range(text)), None


def decide(args: argparse.Namespace) -> tuple[type[Benchmark], type[Transport], RunConfig]:
    """The run's configuration from parsed arguments, everything checked that can be before any rank
    starts: typed options, ranks, poll mode, capabilities, points and loops."""
    from commbench import transports

    bench_cls: type[Benchmark] = args.bench
    registry = transports.registry()
    common = CommonOptions.parse(args)
    transport_cls = transports.get(common.transport)
    check_foreign(args, transport_cls, registry)
    net, own = transport_cls.Options.parse(args), bench_cls.Options.parse(args)
    able = transport_cls.able(net)
    poll = common.poll or transport_cls.default_poll(net)
    if f"poll:{poll}" not in able:
        modes = [c.removeprefix("poll:") for c in sorted(able) if c.startswith("poll:")]
        raise UsageError(f"the {common.transport} transport waits inside its own library and has no {poll} "
                         f"mode (it has: {', '.join(modes)}); drop --poll {poll}")
    if common.output and Path(common.output).suffix not in FORMATS:  # on every rank, whoever launched it
        raise UsageError(f"output file {common.output!r} must end in .jsonl or .csv")
    common, ranks = launched_ranks(bench_cls, own, common)
    if common.port and common.port + ranks > 65535:
        raise UsageError(f"--port {common.port} leaves no room for the data ports of {ranks} ranks (P + 1 .. P + "
                         f"{ranks}): use a port of at most {65535 - ranks}")
    if common.np is not None and common.np != ranks:
        raise UsageError(f"{bench_cls.name} runs on {ranks} ranks here, not --np {common.np}")
    needs = bench_cls.needs(own, common) | ({"many-ranks"} if ranks > 2 else set()) | \
        ({"many-hosts"} if min(ranks, common.hosts) > 1 else set()) | ({"validate"} if common.validate else set())
    check_capabilities(bench_cls.name, needs, transport_cls, net, registry)
    try:
        transport_cls.check_usable(net)
    except Unavailable as exc:
        from commbench.transports.devices import usable_here

        raise Unavailable(f"{exc}; usable transports here: {usable_here(but=transport_cls.name)}") from None
    if common.traffic:
        traffic.check_usable()
    loops = common.loops()
    planned = bench_cls.plan_points(own, common)
    if common.message_size is not None and (planned or common.payload):
        instead = f"--payload {common.payload} sets the message" if common.payload else \
            f"{bench_cls.name} takes its sizes from {bench_cls.size_options}"
        raise UsageError(f"-m/--message-size {common.message_size} is not used here: {instead}; drop -m")
    if planned and common.payload:
        raise UsageError(f"--payload {common.payload} is not used here: {bench_cls.name} takes its sizes from "
                         f"{bench_cls.size_options}; drop --payload")
    points, spec = planned or plan_points(common)
    config = RunConfig(common, ranks, poll, tuple(points), spec, loops, own, net)
    check_memory(config, bench_cls.name)
    return bench_cls, transport_cls, config


def check_memory(config: RunConfig, bench: str) -> None:
    """A message this machine cannot hold is refused before any rank starts (every rank here holds
    at least a send and a receive buffer of the largest message; ranks started here by the local
    launcher all share this machine's memory)."""
    import psutil

    from commbench.core.run.placement import detect

    here = config.ranks if detect(port=config.common.port) is None else 1
    need, total = 2 * config.largest_message * here, psutil.virtual_memory().total
    if need > total:
        raise UsageError(f"{bench}'s largest message is {config.largest_message / 1e9:,.3g} GB: {here} rank(s) "
                         f"here need at least {need / 1e9:,.1f} GB of buffers, and this machine has "
                         f"{total / 1e9:,.1f} GB; choose smaller messages (-m, --payload, --tensors-per-message)")


def run_benchmark(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """Decide the run's configuration (frozen from here on), then launch the ranks or, inside a
    launcher, run this one."""
    return launch_or_run(*decide(args), argv)


def launch_or_run(bench_cls: type[Benchmark], transport_cls: type[Transport], config: RunConfig,
                  argv: Sequence[str]) -> int:
    """Start the ranks of a decided run here, handing them the plan, or run this rank of it."""
    transport_cls.prepare_process(config.net)
    from commbench.launch.local import How, here_or_launch

    c, able = config.common, transport_cls.able(config.net)
    how = How.of(c, mpiexec="own-launcher" in able, tolerant=bench_cls.tolerant,
                 private_net=c.traffic or "open-server" in able)
    placement = here_or_launch(config.ranks, argv, how, bench_cls.name, lambda: plan_of(bench_cls, config))
    if isinstance(placement, int):
        return placement
    from commbench.benchmarks.runner import run_rank

    return run_rank(placement, bench_cls, transport_cls, config)


def plan_of(bench_cls: type[Benchmark], config: RunConfig) -> bytes:
    """The decided run as the local launcher hands it to its ranks (launch/plan.py)."""
    from commbench.launch import plan

    return plan.encode("benchmark", {
        "bench": bench_cls.name, "common": config.common.plain(), "ranks": config.ranks, "poll": config.poll,
        "points": [[p.label, list(p.sizes), p.scheme] for p in config.points], "payload_spec": config.payload_spec,
        "loops": asdict(config.loops), "own": config.bench.plain(), "net": config.net.plain(),
        "digest": config.plan()})


def planned(body: dict) -> tuple[type[Benchmark], type[Transport], RunConfig]:
    """The run the launcher decided (``plan_of``), rebuilt; its digest (``RunConfig.plan``) must come out
    the same, so that nothing was lost on the way."""
    from commbench import benchmarks, transports

    at = "the launcher's plan"
    try:
        bench_cls = benchmarks.registry()[body["bench"]]
        common = CommonOptions.from_plain(body["common"], at)
        transport_cls = transports.get(common.transport)
        own, net = bench_cls.Options.from_plain(body["own"], at), transport_cls.Options.from_plain(body["net"], at)
        config = RunConfig(common, body["ranks"], body["poll"],
                           tuple(Payload(label, tuple(sizes), scheme) for label, sizes, scheme in body["points"]),
                           body["payload_spec"], Loops(**body["loops"]), own, net)
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"{at} is not a run's ({type(exc).__name__}: {str(exc)[:80]})") from None
    if config.plan() != body["digest"]:
        raise UsageError("the run the launcher decided did not come out the same in this rank (a different "
                         "commbench version?): run the same installation everywhere")
    return bench_cls, transport_cls, config


def launched_ranks(bench_cls: type[Benchmark], own: Options, common: CommonOptions) -> tuple[CommonOptions, int]:
    """The ranks the options ask for; under mpirun or srun without --np, the launcher's size where the
    benchmark takes that many (an all-reduce on 16 tasks): then ``np`` is set to it, as if given."""
    from commbench.core.run.placement import detect

    ranks = bench_cls.ranks(own, common)
    placed = detect(port=common.port) if common.np is None else None
    if placed is None or placed.launcher == "local" or placed.size == ranks:
        return common, ranks
    sized = common.but(np=placed.size)
    try:
        if bench_cls.ranks(own, sized) == placed.size:
            return sized, placed.size
    except UsageError:
        pass  # e.g. an odd size for pairs
    return common, ranks  # the launcher's size is refused later, naming both


def check_foreign(args: argparse.Namespace, transport_cls: type[Transport], registry: dict) -> None:
    """A flag of another transport, given a value, is refused: it would change nothing."""
    mine = {f.name for f in fields(transport_cls.Options)}
    given = vars(args)
    for cls in registry.values():
        for f in fields(cls.Options):
            if f.name not in mine and given.get(f.name, Options.default_of(f)) != Options.default_of(f):
                users = [n for n, c in registry.items() if f.name in {g.name for g in fields(c.Options)}]
                flag = flag_of(cls.Options, f.name)
                raise UsageError(f"{flag} {given[f.name]} is an option of the {', '.join(users)} transport"
                                 f"{'s' * (len(users) > 1)}, not of {transport_cls.name}: drop it or use -t {users[0]}")


def check_capabilities(bench: str, needs: frozenset[str], transport_cls: type[Transport], net: Options,
                       registry: dict) -> None:
    """The benchmark's needs against what the transport can do with its options; the error names who can."""
    from commbench.transports.base import CAPABILITIES

    missing = sorted(needs - transport_cls.able(net))
    if missing:
        what = "; ".join(f"{m} ({CAPABILITIES[m]})" if m in CAPABILITIES else m for m in missing)
        able = [name for name, cls in registry.items() if needs <= cls.able(cls.Options())]
        raise UsageError(f"{bench} with these options needs what the {transport_cls.name} transport "
                         f"cannot do: {what}; transports that can: {', '.join(able) or 'none'}")
