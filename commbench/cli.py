"""The command line: ``commbench <benchmark> [options]`` (planned in ``planning``) and every other
command (``compare``, ``show``, ``report``, ``import``, ``train``, ``predict``, ...).

Bad input ends in one line on stderr naming the problem and the fix, exit status 2.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import sys
from collections.abc import Sequence

from commbench import __version__
from commbench.core.errors import CommbenchError, RunAborted, UsageError, say
from commbench.core.output.printable import PrintableStream
from commbench.launch import plan
from commbench.planning import Parser, add_benchmark


def build_parser() -> Parser:
    from commbench import benchmarks, transports

    tr = transports.registry()
    parser = Parser(prog="commbench", description="Communication micro-benchmarks for distributed deep learning.")
    parser.add_argument("--version", action="version", version=f"commbench {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    for name, cls in benchmarks.registry().items():
        add_benchmark(sub, name, cls, tr)
    from commbench.commands import compare, devices, findings, hosts, importing, payloads, report, show
    from commbench.training import predict, train

    compare.add_parser(sub)
    show.add_parser(sub)
    importing.add_parser(sub)
    payloads.add_parser(sub)
    devices.add_parser(sub)
    hosts.add_parser(sub)
    report.add_parser(sub)
    findings.add_parser(sub)
    train.add_parser(sub)
    predict.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    # a rank that crashes in C (a segfault in a transport's library) prints where each of its threads was
    with contextlib.suppress(ValueError, OSError):  # stderr without a file descriptor (called in-process)
        faulthandler.enable()
    code = _main(argv)
    from commbench.core.run import mpi_env

    if mpi_env.initialized():
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        # a failed run: MPI_Finalize would wait for a peer that may be stopped or gone
        if code or not mpi_env.finalize():
            os._exit(code)
    return code


def run_plan(job: str, body: dict) -> int:
    """Run this rank of the job the local launcher decided (launch/plan.py)."""
    if job == "benchmark":
        from commbench import planning

        return planning.launch_or_run(*planning.planned(body), [])
    if job == "train":
        from commbench.training import train

        return train.launch_or_run(train.planned(body), [])
    raise UsageError(f"the launcher handed this rank a plan for {job!r}, which this commbench does not run")


def _main(argv: Sequence[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    stdout, sys.stdout = sys.stdout, PrintableStream(sys.stdout)
    try:
        return _run(argv)
    finally:
        sys.stdout = stdout


def _run(argv: list[str]) -> int:
    try:
        handed = plan.received()
        if handed is not None:  # a rank the local launcher started: it runs the plan, not argv
            return run_plan(*handed)
        args, extra = build_parser().parse_known_args(argv)
        if extra:  # named with the command whose options they are not
            raise UsageError(f"unrecognized arguments: {' '.join(extra)} (see 'commbench {args.command} --help')")
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
