"""The prediction recipe's results as tables: every prediction of ``launchers/predict.sh`` made again
from the files it saved, against every repeat of the measured run (not only their mean).

    .venv/bin/python bench/predict_table.py predict-results            # compute from its own run (the default)
    .venv/bin/python bench/predict_table.py predict-results --in-sample  # compute from the compared runs

Per repeat: the measured images/s, the error of the prediction against it, whether it lies inside the
prediction's stated interval (Low-High), and the communication per step, predicted (the step less the
compute time) against measured (the repeat's mean step less its own compute time, measured in that run
between its training steps; runs older than that: before and after training), with the 95 % interval of
what the run measured (``comm_span``). Then the coverage of the intervals, how many repeats lie within 15 %
(communication) and 10 % / 15 % (images/s, ps / mirrored), and how many runs measured their
communication finely enough (a 95 % interval within +-15 %) for the 15 % to be told. Last, the floor
this machine sets: each calibration run's communication against the mean of the other runs of its shape
and link (the same configuration, minutes apart in the recipe): how often that lands within 15 % is the
most a prediction made from earlier runs can expect here, however right its model.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
from common import BIN

from commbench.core.output.results import read_runs
from commbench.training.evidence import comm_span, spans


def predict(o: dict, in_sample: bool, calibration: Path | None = None) -> dict:
    """The prediction made again with the recipe's inputs (without --compute: from the compared runs;
    with ``calibration``: that recipe directory's calibration instead of its own)."""
    cmd = [str(BIN / "commbench"), "predict", "--p2p", o["p2p"], "--train", o["train"], "--json"]
    if o.get("compute") and not in_sample:
        cmd += ["--compute", o["compute"]]
    flags = ("overhead", "overhead_p2p", "overhead_compute")
    files = {k: [str(calibration / Path(f).name) if calibration and o.get("overhead") else f for f in o.get(k) or []]
             for k in flags}
    cmd += [x for k in flags for f in files[k] for x in (f"--{k.replace('_', '-')}", f)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode:
        sys.exit(f"{' '.join(cmd)}: {p.stderr.strip()}")
    return json.loads(p.stdout)


def train_rows(path: str | Path) -> list[dict]:
    """Every train run's result row in a file."""
    return [r.rows[-1] for r in read_runs(path) if r.meta.get("bench") == "train" and r.rows]


def repeats(path: str, shape: tuple) -> list[dict]:
    return [r for r in train_rows(path) if (r["strategy"], r["workers"], r["batch"], r["model"]) == shape]


def comm(row: dict) -> float:
    """A train row's communication per step: its mean step less its own compute (as the table's)."""
    step, own = spans(row)
    return step.mid - own.mid


def noise_floor(out: Path) -> dict[tuple[str, str], list[float]]:
    """(model, strategy) -> every calibration run's |communication / the mean of the other runs of its
    shape and link - 1| (leave one out), from OUT's ``cal_<strategy>_<link>.jsonl``: what repeating one
    configuration minutes apart moves, the floor under any prediction's error on this machine."""
    errs: dict[tuple[str, str], list[float]] = {}
    for f in sorted(out.glob("cal_*_*.jsonl")):
        if f.name.startswith(("cal_compute_", "cal_sweep_")):
            continue
        groups: dict[tuple, list[float]] = {}
        for row in train_rows(f):
            if row.get("images_s"):
                groups.setdefault((row["model"], row["strategy"], row["workers"], row["batch"]), []).append(comm(row))
        for (model, strategy, *_), cs in groups.items():
            if len(cs) > 1:
                errs.setdefault((model, strategy), []).extend(abs(c / ((sum(cs) - c) / (len(cs) - 1)) - 1) for c in cs)
    return errs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", help="the recipe's OUT directory (predict.jsonl and the files it names)")
    ap.add_argument("--in-sample", action="store_true", help="compute time from the compared runs themselves")
    ap.add_argument("--calibration", metavar="DIR", type=Path,
                    help="another recipe directory whose calibration (cal_*_none.jsonl, cal_sweep_none.jsonl, "
                         "cal_compute_*_none.jsonl) "
                         "replaces OUT's: a model change that needs a new calibration, tried on runs already made")
    a = ap.parse_args()
    made = [r.meta["options"] for r in read_runs(Path(a.out) / "predict.jsonl") if r.rows]
    latest = {(o["train"], o["label"]): o for o in made}  # a recipe run again replaces what it made before
    print("| rate | model | strategy | W | predicted img/s | interval | measured img/s | error | inside | "
          "predicted comm ms | measured comm ms (95 % interval) | comm error |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    n = inside = comm_ok = img_ok = resolved = resolved_ok = in_meas = 0
    claims = set()
    terms: dict[tuple, list] = {}
    per_row: dict[tuple, tuple[float, list[float]]] = {}  # (rate, model, strategy, W): (predicted, repeats')
    for o in latest.values():
        p = predict(o, a.in_sample, a.calibration)
        shape = (p["strategy"], p["workers"], p["batch"], p["model"])
        goal = 10 if p["strategy"] == "ps" else 15
        claims.add(p.get("interval_coverage"))
        for r in repeats(o["train"], shape):
            (_, own), cs, c = spans(r), comm_span(r), comm(r)  # the repeat's own compute; its mean step less that
            fine = cs is not None and max(c - cs.lo, cs.hi - c) <= 0.15 * c  # finer than 15 %
            err, cerr = 100 * (p["images_s"] / r["images_s"] - 1), 100 * (p["beyond_compute_ms"] / c - 1)
            ok = p["images_lo"] <= r["images_s"] <= p["images_hi"]
            wire = sum(v for k, v in p["terms"].items() if k in ("read_ms", "gradients_ms", "allreduce_ms"))
            terms.setdefault((p["model"], p["strategy"]), []).append((wire, p["beyond_compute_ms"] - wire, c))
            per_row.setdefault((o["label"], *shape), (p["beyond_compute_ms"], []))[1].append(c)
            n, inside = n + 1, inside + ok
            comm_ok, img_ok = comm_ok + (abs(cerr) <= 15), img_ok + (abs(err) <= goal)
            resolved, resolved_ok = resolved + fine, resolved_ok + (fine and abs(cerr) <= 15)
            in_meas += cs is not None and cs.lo <= p["beyond_compute_ms"] <= cs.hi
            how = "no interval: under 20 samples" if cs is None else \
                f"{cs.lo:.1f}-{cs.hi:.1f}{'' if fine else ', coarser than 15 %'}"
            print(f"| {o['label']} | {p['model']} | {p['strategy']} | {p['workers']} | {p['images_s']:.0f} | "
                  f"{p['images_lo']:.0f}-{p['images_hi']:.0f} ({100 * (p['images_hi'] / p['images_lo'] - 1):.0f} %) | "
                  f"{r['images_s']:.0f} | {err:+.1f} % | {'yes' if ok else 'no'} | {p['beyond_compute_ms']:.1f} | "
                  f"{c:.1f} ({how}; compute "
                  f"{own.mid:.1f}) | {cerr:+.1f} % |")
    claim = "/".join(f"{100 * c:.0f} %" for c in sorted(claims - {None})) or "no proportion"
    print(f"\n{n} measured runs: {inside} inside the stated interval ({100 * inside / max(n, 1):.0f} %; it claims "
          f"{claim}), "
          f"{img_ok} within the images/s goal (10 % ps, 15 % mirrored), {comm_ok} with communication within 15 %; "
          f"compute time from {'the compared runs (in-sample)' if a.in_sample else 'a run of its own'}")
    print(f"Measured communication: {resolved} of {n} runs measured it finer than +-15 % (their 95 % interval), "
          f"{resolved_ok} of those within 15 % of the prediction; the prediction inside the run's own interval "
          f"in {in_meas} of {n}")
    rows_ok = sorted(k for k, (pc, ms) in per_row.items() if abs(pc / np.mean(ms) - 1) <= 0.15)
    worst = max(per_row.items(), key=lambda kv: abs(kv[1][0] / np.mean(kv[1][1]) - 1), default=None)
    print(f"Per row (a rate, model and strategy; the mean of its repeats, as predict's measured_comm_ms): "
          f"{len(rows_ok)} of {len(per_row)} with communication within 15 %"
          + (f"; farthest {' '.join(map(str, worst[0]))}: {100 * (worst[1][0] / np.mean(worst[1][1]) - 1):+.1f} %"
             if worst else ""))
    print("\nWhich term misses: measured communication = a + b x the predicted wire term (alpha-beta), "
          "least squares over the rates (b = 1 and a = the predicted rest: the model's terms are right)")
    for (model, strategy), xs in terms.items():
        w, rest, c = (np.array(v) for v in zip(*xs, strict=True))
        b, a0 = np.polyfit(w, c, 1) if np.ptp(w) > 0 else (np.nan, float(np.mean(c - w)))
        print(f"  {model} {strategy}: b = {b:.2f}, a = {a0:.1f} ms against a predicted rest of "
              f"{np.min(rest):.1f}-{np.max(rest):.1f} ms (TF's runtime, the slowest worker); "
              f"residual after the fit {np.std(c - (a0 + b * w)):.1f} ms")
    print("\nThe floor: each calibration run's communication against the mean of the other runs of its shape and "
          "link (one configuration, minutes apart): within 15 % in")
    for (model, strategy), es in noise_floor(Path(a.out)).items():
        print(f"  {model} {strategy}: {sum(e <= 0.15 for e in es)} of {len(es)} runs (median "
              f"{100 * float(np.median(es)):.0f} %, largest {100 * max(es):.0f} %)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
