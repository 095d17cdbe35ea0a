"""What a predict row holds: its columns, the keys beside them and how report shows them (the
declarations ``presentation`` reads without the model; the command is ``predict``)."""

from __future__ import annotations

from commbench.core.output.presentation import Presentation
from commbench.core.output.table import Column, declared, key

COLUMNS = [Column("strategy", "Strategy", -9, doc="ps or mirrored"),
           Column("workers", "W", 4, unit="count", doc="workers"),
           Column("ps", "P", 3, unit="count", doc="parameter servers (mirrored: 0)"),
           Column("compute_ms", "Compute(ms)", 12, "{:.2f}", "ms",
                  "a worker's compute step inside training (the compute time given x compute_load)"),
           Column("comm_ms", "Comm(ms)", 9, "{:.2f}", "ms", "modelled (or --measured) communication per step"),
           Column("step_ms", "Step(ms)", 9, "{:.2f}", "ms", "predicted step: compute + comm + TF's runtime"),
           Column("images_s", "Pred img/s", 11, "{:.1f}", "1/s", "predicted images per second"),
           Column("images_lo", "Low", 9, "{:.1f}", "1/s", "the low end of the prediction's 90 % interval (every "
                  "input's 95 % interval, one at a time, added in quadrature)"),
           Column("images_hi", "High", 9, "{:.1f}", "1/s", "its high end"),
           Column("measured_images_s", "Meas img/s", 11, "{:.1f}", "1/s", "--train: the measured images/s "
                  "(mean over repeats)", optional=True),
           Column("measured_lo", "Low", 9, "{:.1f}", "1/s", "--train: lowest end of the repeats' 95 % intervals",
                  optional=True),
           Column("measured_hi", "High", 9, "{:.1f}", "1/s", "--train: highest end", optional=True),
           Column("error_pct", "Error %", 8, "{:+.1f}", "%", "prediction / measured - 1", optional=True),
           Column("measured_step_ms", "Meas step p50", 14, "{:.2f}", "ms", "--train: its median step",
                  optional=True)]
PRESENTATION = Presentation("images_s", "higher", "training", "workers", ("strategy", "model", "label"),
                            (Column("label", "Label", -9), Column("model", "Model", -14), *COLUMNS), "predict")
KEYS = [key("bench", doc="predict"), key("label", doc="--label: what the prediction is for"),
        key("model", doc="the model profile"), key("batch", "count", "images per step per worker"),
        key("measured_runs", "count", "--train: repeats of this shape", optional=True),
        key("beyond_compute_ms", "ms", "the predicted step less the compute time: what the network (and TF's "
                                       "runtime, the wait for the slowest worker) adds to a step"),
        key("measured_beyond_compute_ms", "ms", "--train: its mean step less the same compute time", optional=True),
        key("beyond_compute_error_pct", "%", "--train: beyond_compute_ms / measured_beyond_compute_ms - 1",
            optional=True),
        key("measured_comm_ms", "ms", "--train: its mean step less its own compute time (measured in those runs, "
                                      "between their training steps; older runs: before and after training): "
                                      "the network's share of the measured step, "
                                      "free of how the machine's pace moved between runs; compared with, never "
                                      "predicted from", optional=True),
        key("comm_error_pct", "%", "--train: beyond_compute_ms / measured_comm_ms - 1", optional=True),
        key("measured_comm_lo_ms", "ms", "--train: the lowest end of the repeats' 95 % intervals of their "
                                         "communication (each: its step's and its own compute's intervals, "
                                         "added in quadrature): how finely the runs measured it; empty where a "
                                         "repeat has none (under 20 steps or compute steps)", optional=True),
        key("measured_comm_hi_ms", "ms", "--train: the highest end of the same", optional=True),
        key("compute_from", doc="where the compute time came from: --compute's file, --compute-ms, or 'in-sample' "
                                "(the compared train run's own)"),
        key("within", doc="--train: whether the predicted and measured intervals overlap", optional=True),
        key("inside", doc="--train: whether the measured images/s (the repeats' mean) lies inside the predicted "
                          "interval", optional=True),
        key("interval_coverage", "fraction", "the proportion of measured values the predicted interval claims "
                                             "to hold"),
        key("overhead_ms", "ms", "TF's runtime cost per step, from the calibration (--overhead)"),
        key("calibration", doc="--overhead: the train runs TF's runtime was fitted to (model, W, batch, link)",
            optional=True),
        key("runtime_pace", "ratio", "--overhead: the compute time predicted with / the calibration runs' own "
                                     "(their median), where they are of this model and batch: TF's runtime, CPU "
                                     "work at the machine's pace, is taken at this pace", optional=True),
        key("calibration_minutes", "min", "--overhead: from the first calibration run fitted to the last one's "
                                          "start; runs made back to back sample one phase of a shared "
                                          "machine's load", optional=True),
        key("runtime_hidden_limit_ms", "ms", "--overhead: the most of TF's runtime the calibration links' runs had "
                                             "run while the transfers were on the wire (runtime_hidden_curve's "
                                             "largest); 0: not fitted (or none hid)"),
        key("runtime_hidden_curve", doc="--overhead over more than one link: 'wire:hidden' ms a step, one point per "
                                        "calibration link (and model), by wire; hidden(wire) joins them with "
                                        "straight lines, the nearest point's beyond them (negative: the link "
                                        "cost more than its wire and the fastest link's runtime)", optional=True),
        key("runtime_hidden_ms", "ms", "the part of TF's runtime taken off this step: the curve at its "
                                       "communication, at most that (negative: added)"),
        key("compute_alone_ms", "ms", "the compute time given (--compute's runs pooled, --compute-ms, or the "
                                      "compared runs' own): compute_ms is it x compute_load"),
        key("compute_load", "ratio", "how much slower a worker computes inside training than alone: the median "
                                     "over the calibration runs of their own compute (between their steps) / the "
                                     "compute-only runs next to them (--overhead-compute); 1 without those, and "
                                     "for a run's own compute (measured inside it)"),
        key("compute_load_lo", "ratio", "the low end of its 95 % interval for one more run (the runs' spread)"),
        key("compute_load_hi", "ratio", "its high end"),
        key("compute_load_runs", "count", "the calibration runs it was measured in", optional=True),
        key("gradients_turn", "fraction", "ps: how far the workers' gradients cross the PS's link in turn in the "
                                          "middle prediction (0: all at once, 1: one at a time): as the "
                                          "calibration runs' grads_lag_ms make it at this link (turn_of), else "
                                          "TURN", optional=True),
        key("gradients_lag_rounds", "count", "ps: the calibration rounds (of this model, batch and W) whose "
                                             "grads_lag_ms gradients_turn came from (0: TURN)", optional=True),
        key("min_beta_mb_s", "MB/s", "the smallest link bandwidth at which W workers beat one"),
        key("min_beta_lo_mb_s", "MB/s", "the same with every input at its favourable end"),
        key("min_beta_hi_mb_s", "MB/s", "the same with every input at its unfavourable end"),
        key("pays_off", doc="true, false or empty (undecided): whether W workers beat one at this link"),
        key("shared_host", doc="whether every transfer was modelled as sharing one host's path")]


def schema() -> dict[str, Column]:
    """Every key predict's row holds."""
    return declared(KEYS[:2], COLUMNS, KEYS[2:])
