"""predict's options, declared once: its parser, its reference page and the values every part of it
reads (the command: predict.py; the calibration: calibration.py)."""

from __future__ import annotations

from dataclasses import dataclass

from commbench.core.config.argtypes import RANKS, integer, number
from commbench.core.config.options import Options, opt
from commbench.emulators.placement import POLICIES

INPUTS, CALIBRATION, OUTPUT = "what is predicted (default: the --train run's)", "TF's runtime, calibrated", "output"


@dataclass(frozen=True)
class PredictOptions(Options):
    """``commbench predict``'s options."""

    p2p: str | None = opt(None, metavar="FILE", group=INPUTS,
                          help="p2p-latency results of a size sweep (jsonl/csv); required")
    train: str | None = opt(None, metavar="FILE", group=INPUTS,
                            help="train results: model, strategy, W, P, batch, compute time and the measured "
                                 "images/s to compare with")
    model: str | None = opt(None, group=INPUTS, help="gradient profile (commbench payloads list)")
    strategy: str | None = opt(None, group=INPUTS, choices=("ps", "mirrored"), help="ps or mirrored")
    workers: int | None = opt(None, group=INPUTS, type=RANKS, help="workers")
    ps: int | None = opt(None, group=INPUTS, type=RANKS, help="parameter servers")
    batch: int | None = opt(None, group=INPUTS, type=integer(1, 1 << 20), help="images per worker per step")
    compute: str | None = opt(None, metavar="FILE", group=INPUTS,
                              help="`train --compute-only` results (or another train run) of this model, W and "
                                   "batch: the compute step, measured apart from the run compared with (default: "
                                   "--train's own, in-sample)")
    compute_ms: float | None = opt(None, group=INPUTS, type=number(above=0, hi=1e7, what=" (ms)"),
                                   help="one worker's step without communication (instead of --compute)")
    placement: str = opt("round-robin", group=INPUTS, choices=POLICIES, help="PS variable placement")
    shared_host: str = opt("auto", group=INPUTS, choices=("auto", "yes", "no"),
                           help="all ranks on one host share one path (auto: yes if the train run had one host)")
    measured: str | None = opt(None, metavar="FILE", group=INPUTS,
                               help="ps-throughput or allreduce results: use their measured communication time "
                                    "instead of the alpha-beta terms")
    overhead: list[str] | None = opt(None, metavar="FILE", action="append", group=CALIBRATION,
                                     help="train runs of the same strategy that calibrate TF's runtime cost once "
                                          "(any model, W and link; repeats give the spread); repeatable")
    overhead_p2p: list[str] | None = opt(None, metavar="FILE", action="append", group=CALIBRATION,
                                         help="the p2p-latency sweep of the link each --overhead file was run over, "
                                              "in the same order (one for all: that one; default: --p2p)")
    overhead_compute: list[str] | None = opt(None, metavar="FILE", action="append", group=CALIBRATION,
                                             help="`train --compute-only` runs made just before and after the "
                                                  "--overhead runs (one file for all, or one for each, in the same "
                                                  "order): how much slower a worker computes inside training than "
                                                  "alone (the compute load), applied to --compute / --compute-ms")
    json: bool = opt(False, group=OUTPUT, action="store_true", help="print the prediction as JSON")
    label: str = opt("", group=OUTPUT, help="a name for this prediction in results files and reports (e.g. 1gbit)")
    output: str | None = opt(None, "-o", "--output", metavar="FILE", group=OUTPUT,
                             help="append the prediction as a row: FILE.jsonl or FILE.csv")
