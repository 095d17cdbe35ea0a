"""``commbench report FILES...``: plots and one page from results files; ``--compare A B``: ratios.

Figures (matplotlib, PNG), each as the result's kind declares it (commbench/presentation.py): a
benchmark's main metric (``metric`` in the results' metadata: p50 latency, MB/s, busbw, steps/s) over
its x axis (message size on log axes; ps-throughput: workers), one line per series (the row keys the
kind declares: transport, mode, poll, payload, algorithm, ...; and per file when several hold the same
series); a cluster run's host x host heatmaps; training images/s predicted against measured; --traffic
bars. The page
(``--format html``: one self-contained file with the tables from pandas and
the PNGs inlined; ``md``: Markdown beside the PNGs) lists every run with its command and hosts.
``--compare A B`` matches the points of two files and prints B / A of each point's main metric,
as pyperf's compare does, "better"/"worse" read the way the benchmark declared (higher or lower), and
"not significant" where both medians carry 95 % confidence intervals and they overlap.
"""

from __future__ import annotations

import base64
import html
import io
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from commbench import presentation
from commbench.commands import command as declare_command
from commbench.core.config.options import Options, opt
from commbench.core.errors import UsageError
from commbench.core.output.paths import own_directory, write_whole
from commbench.core.output.printable import markdown_cell as cell
from commbench.core.output.results import Run, results_files


def metric_of(meta: dict) -> dict:
    """The run's main metric as its benchmark declared it ({"key", "better"}): from the file's metadata,
    or for files written before it was recorded, from the declaration."""
    if meta.get("metric"):
        return meta["metric"]
    p = presentation.of(meta.get("bench"))
    if p is None:
        raise UsageError(f"unknown benchmark {meta.get('bench')!r} in a results file's metadata")
    return {"key": p.metric, "better": p.better}


def point_keys() -> tuple[str, ...]:
    """The row keys that identify a point: every declared series key and x axis, and size and count."""
    kinds = presentation.presentations().values()
    return tuple(dict.fromkeys(["size", "count", "batch", *(k for p in kinds for k in (*p.series, p.x))]))


def pandas():
    try:
        import pandas as pd
    except ImportError:
        raise UsageError("report needs pandas and matplotlib: pip install 'commbench[report]'") from None
    return pd


def pyplot():
    try:
        import matplotlib
    except ImportError:
        raise UsageError("report needs pandas and matplotlib: pip install 'commbench[report]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def read_all(files: Sequence[str]) -> list[tuple[str, Run]]:
    """(file, run) for every run of every file, each file read once."""
    return [(f, r) for f in files for r in presentation.read_checked(f)]


def load(runs: Sequence[tuple[str, Run]]):
    """One DataFrame row per result row, with the run's file, bench, placement and series label."""
    pd = pandas()
    metrics = [metric_of(run.meta) for _, run in runs]
    records = [{"file": Path(f).name, "bench": run.meta.get("bench"),
                "placement": run.meta.get("options", {}).get("placement"), "metric": m["key"],
                "higher": m["better"] == "higher", **row}
               for (f, run), m in zip(runs, metrics, strict=True) for row in run.rows]
    if not records:
        raise UsageError(f"no result rows in {', '.join(sorted({f for f, _ in runs}))}")
    df = pd.DataFrame.from_records(records)
    df.attrs["metas"] = {run.meta.get("run_id"): run.meta for _, run in runs}  # what a figure may need of its run
    kinds = presentation.presentations()
    df["series"] = df.apply(series_label, axis=1, kinds=kinds)
    several = df.groupby(["bench", "series"])["file"].transform("nunique") > 1  # the same series in two files
    df.loc[several, "series"] = df.loc[several, "series"] + " [" + df.loc[several, "file"] + "]"
    return df


def series_label(row, kinds: dict | None = None) -> str:
    """The row's series: the values of the keys its kind declares (``series``), a mode in parentheses,
    a poll mode the mode names already left out, a size-only payload left out, numbers as key=value."""
    def get(k):
        v = row.get(k)
        if isinstance(v, float) and v.is_integer():
            return int(v)  # an int column that pandas made float (other benches leave it empty)
        return None if v is None or v != v else v  # NaN from pandas
    p = presentation.of(row.get("bench"), kinds)
    mode, parts = get("mode"), []
    for k in (p.series if p else presentation.Presentation("").series):
        v = get(k)
        if v is None or v == "" or (k == "poll" and str(v) in str(mode)) or (k == "payload" and str(v).isdigit()):
            continue
        parts.append(f"({v})" if k == "mode" else str(v).split("=")[0] if k == "payload" else
                     f"{k}={v}" if isinstance(v, (int, float)) and not isinstance(v, bool) else str(v))
    return " ".join(parts)


def _line_plot(plt, df, x: str, y: str, title: str, ylabel: str, xlabel: str, path: Path, logx=True, logy=True):
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for name, g in df.sort_values(x).groupby("series", sort=True):
        g = g[g[x] > 0] if logx else g
        ax.plot(g[x], g[y], marker="o", markersize=3, label=name)
    if logx:
        ax.set_xscale("log", base=2 if x == "size" else 10)
    if logy:
        ax.set_yscale("log")
    if not logx:
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    save(fig, path)
    plt.close(fig)


def figures(df, out: Path) -> list[tuple[str, Path, object]]:
    """(title, png path, the table shown beside it) for every kind of result present, each drawn as its
    declaration says (``figure``: line, pairs, training, traffic)."""
    plt = pyplot()
    kinds = presentation.presentations()
    by_figure: dict[str, list[str]] = {}
    for bench in dict.fromkeys(df["bench"]):
        p = presentation.of(bench, kinds)
        if p is not None:
            by_figure.setdefault(p.figure, []).append(bench)
    made = []
    for figure, benches in by_figure.items():
        sub = df[df.bench.isin(benches)]
        try:
            made += FIGURES[figure](plt, sub, out, {b: presentation.of(b, kinds) for b in benches})
        except (ValueError, TypeError, KeyError, ZeroDivisionError, OverflowError) as exc:
            # read_checked lets through what a row may hold; what cannot be drawn together is the file's
            raise UsageError(f"cannot draw the {figure} figure of {', '.join(benches)} from these rows "
                             f"({str(exc)[:80]}); was a file edited?") from None
    return made


def line_figures(plt, df, out: Path, kinds: dict) -> list[tuple[str, Path, object]]:
    """Each benchmark's main metric over its x axis, a line per series (log axes over message size)."""
    made = []
    for bench, g in df.groupby("bench", sort=False):
        p, key = kinds[bench], g["metric"].iloc[0]
        if p.x not in g:
            continue
        title, ylabel = f"{bench}: {key}", key
        if g["metric"].nunique() > 1:  # another tool's output gives another metric (OSU: the mean, no median)
            key, g = "value", g.assign(value=[row[m] for m, row in zip(g["metric"], g.to_dict("records"),
                                                                          strict=True)])
            g["series"] = [f"{s} [{m}]" if m != p.metric else s for s, m in zip(g["series"], g["metric"], strict=True)]
            title, ylabel = f"{bench}: {p.metric}, or the metric in [ ]", f"{p.metric} or [ ]"
        by_size = p.x == "size"
        path = out / f"{bench}.png"
        _line_plot(plt, g, p.x, key, title, ylabel, "message size (B)" if by_size else p.x, path,
                   logx=by_size, logy=by_size)
        table = g.pivot_table(index=p.x, columns="series", values=key) if by_size else \
            g[["series", *dict.fromkeys(c for c in (p.x, "ps", key, "mb_s") if c in g)]]
        made.append((f"{bench} ({key})", path, table))
    return made


def training_figure(plt, df, out: Path, kinds: dict) -> list[tuple[str, Path, object]]:
    """Training throughput: predicted over measured where predictions are given, else measured."""
    pr = df[df["images_lo"].notna()] if "images_lo" in df else df.iloc[0:0]  # predictions (with their interval)
    tr = df.drop(pr.index)
    p = out / "training.png"
    fig, ax = plt.subplots(figsize=(max(7.5, 0.45 * len(pr)), 5.5 if len(pr) > 6 else 4.5))
    if len(pr):
        names = [" ".join(str(x) for x in (getattr(r, "label", "") or "", r.model, r.strategy,
                                             f"W={int(r.workers)}")).strip() for r in pr.itertuples()]
        xs = list(range(len(pr)))
        measured = pr["measured_images_s"]
        if measured.notna().all():  # predicted / measured, with the prediction's Low-High
            ratio = pr["images_s"] / measured
            err = None
            if {"images_lo", "images_hi"} <= set(pr.columns) and pr["images_lo"].notna().all():
                err = [ratio - pr["images_lo"] / measured, pr["images_hi"] / measured - ratio]
            ax.axhspan(0.9, 1.1, color="0.9", label="within 10 %")
            ax.axhline(1.0, color="0.4", lw=0.8)
            ax.bar(xs, ratio, 0.6, yerr=err, capsize=2, label="predicted / measured (bars: Low-High)")
            if {"measured_lo", "measured_hi"} <= set(pr.columns) and pr["measured_lo"].notna().all():
                span = [ratio - pr["images_s"] / pr["measured_hi"], pr["images_s"] / pr["measured_lo"] - ratio]
                ax.errorbar([x + 0.2 for x in xs], ratio, yerr=span, fmt="none", ecolor="C3", capsize=2,
                            label="the measurement's interval")
            ax.set(ylabel="predicted / measured images/s")
        else:
            ax.bar(xs, pr["images_s"], 0.6, label="predicted")
            ax.set(ylabel="images/s")
        ax.set_xticks(xs, names, fontsize=7, rotation=45, ha="right")
        cols = ["label", "strategy", "model", "workers", "ps", "measured_images_s", "measured_lo", "measured_hi",
                "measured_runs", "images_s", "images_lo", "images_hi", "error_pct", "within", "compute_ms",
                "comm_ms"]
        table = pr[[c for c in cols if c in pr.columns]]
    else:
        ax.bar(range(len(tr)), tr["images_s"], 0.6, label="measured")
        ax.set_xticks(range(len(tr)), list(tr["series"]), fontsize=8)
        ax.set(ylabel="images/s")
        table = tr[[c for c in ("series", "workers", "ps", "batch", "images_s", "step_p50_ms", "compute_ms")
                    if c in tr]]
    ax.set(title="training throughput")
    ax.legend()
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    save(fig, p)
    plt.close(fig)
    return [("Training: predicted and measured", p, table)]


def pairs_figures(plt, df, out: Path, kinds: dict) -> list[tuple[str, Path, object]]:
    """Every run of a pairwise evaluation (host x host) on its own."""
    made = []
    for i, (_, g) in enumerate(df.groupby("run_id", sort=False)):
        vias = sorted(str(v) for v in g["via"].dropna().unique()) if "via" in g else []
        for via in [None, *vias]:  # -t's transport, then each of --transports' others, side by side
            sub = g if not vias else g[g["via"].isna()] if via is None else g[g["via"] == via]
            transport = via or (str(g["transport"].iloc[0]) if "transport" in g else "?")
            stem = f"{g['bench'].iloc[0]}-{transport}" + (f"-{i + 1}" if df["run_id"].nunique() > 1 else "")
            made += cluster_figures(plt, sub, out, re.sub(r"[^A-Za-z0-9_.-]", "_", stem), transport)
    return made


def cluster_figures(plt, cl, out: Path, stem: str, transport: str) -> list[tuple[str, Path, object]]:
    """A cluster run: latency and bandwidth between every pair of hosts as heatmaps coloured by their
    share of the run's reference (the median host's: a busy but healthy pair is not red), hosts grouped
    by switch where the run had a topology, and each host's median bandwidth with the findings' hosts
    marked; the title is the verdict, the findings and summary a table."""
    import numpy as np

    from commbench.core.analysis.evidence import BW, LAT, from_rows

    if not (cl["test"] == "pairwise").any():
        return []  # rings and cuts alone: their rows are in the results file
    run_id = cl["run_id"].iloc[0]
    meta = (cl.attrs.get("metas") or {}).get(run_id, {})
    records = [{k: v for k, v in r.items() if k != "via" and not (isinstance(v, float) and v != v)}
               for r in cl.to_dict("records")]
    ev = from_rows(meta, [r for r in records if r.get("test") not in ("finding", "summary")], "report")
    topo = ev.topology
    place = {s: j for j, s in enumerate(topo.switches())} if topo else {}  # hosts grouped by switch, in order
    order = sorted(range(len(ev.names)), key=lambda i: (place[topo.switch_of[ev.names[i]]] if topo else 0, i))
    names = [ev.names[i] for i in order]
    refs = {BW: ev.reference(BW), LAT: ev.reference(LAT)}
    whose = {BW: "the reference", LAT: "the reference"}
    for x in meta.get("expected") or []:  # --reference's values: colour against what the links should do
        if isinstance(x, dict) and x.get("link") in ("any", "inside") and isinstance(x.get("value"), (int, float)):
            measure = BW if x.get("metric") == "mb_s" else LAT
            refs[measure], whose[measure] = float(x["value"]), "the expected"
    mats = {BW: ev.bw[np.ix_(order, order)], LAT: ev.lat[np.ix_(order, order)]}
    found = [r for r in records if r.get("test") == "finding"]
    slow = [f"{f['kind']} {f.get('a')}" + (f" - {f['b']}" if f.get("b") else "") for f in found]
    verdict = "; ".join(slow[:3]) + (f" and {len(slow) - 3} more" if len(slow) > 3 else "") if slow else \
        "no findings"
    fig, axes = plt.subplots(1, 2, figsize=(12, 5.2))
    for ax, measure in zip(axes, (LAT, BW), strict=True):
        m, ref = mats[measure], refs[measure]
        with np.errstate(divide="ignore", invalid="ignore"):
            share = m / ref if measure == BW else ref / m
        im = ax.imshow(np.ma.masked_invalid(share), cmap="RdYlGn", vmin=0, vmax=1)
        ax.set_xticks(range(len(names)), names, rotation=60, ha="right", fontsize=7)
        ax.set_yticks(range(len(names)), names, fontsize=7)
        unit = "MB/s" if measure == BW else "us"
        ax.set_title(f"{measure} ({unit}); colour: share of {whose[measure]} {number(ref)} {unit}", fontsize=9)
        bar = fig.colorbar(im, ax=ax, shrink=0.8)
        bar.set_label("share of the expected (--reference)" if whose[measure] == "the expected" else
                      "share of the reference (1: as good as the median host)", fontsize=7)
        if topo is not None:  # a line between the switches' groups of hosts
            leaf = [topo.switch_of[n] for n in names]
            for i in range(1, len(names)):
                if leaf[i] != leaf[i - 1]:
                    ax.axhline(i - 0.5, color="k", lw=0.8)
                    ax.axvline(i - 0.5, color="k", lw=0.8)
        if len(names) <= 16:
            for i in range(len(names)):
                for j in range(len(names)):
                    if m[i, j] == m[i, j]:
                        ax.text(j, i, number(float(m[i, j])), ha="center", va="center", fontsize=6)
    fig.suptitle(f"cluster over {transport}: every pair of hosts" + (" (grouped by switch)" if topo else ""))
    fig.tight_layout()
    heat = out / f"{stem}-pairs.png"
    save(fig, heat)
    plt.close(fig)
    host_bw = [float(np.nanmedian(row)) if np.isfinite(row).any() else np.nan for row in mats[BW]]
    flagged = {f.get(k) for f in found for k in ("a", "b")}
    fig, ax = plt.subplots(figsize=(max(6.0, 0.45 * len(names)), 4.2))
    ax.bar(range(len(names)), host_bw, color=["C3" if n in flagged else "C0" for n in names])
    ax.axhline(refs[BW], color="0.3", lw=0.8, label=f"reference {refs[BW]:.1f} MB/s")
    ax.set_xticks(range(len(names)), names, rotation=60, ha="right", fontsize=7)
    ax.set(ylabel="median MB/s to the other hosts", title="each host (red: named in the findings)")
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    hosts = out / f"{stem}-hosts.png"
    save(fig, hosts)
    plt.close(fig)
    pd = pandas()
    notes = pd.DataFrame([{"": r.get("kind") or r.get("test"), "note": r.get("note") or ""} for r in records
                          if r.get("test") in ("finding", "summary")], columns=["", "note"])
    per_host = pd.DataFrame({"host": names, **({"switch": [topo.switch_of[n] for n in names]} if topo else {}),
                             "median_mb_s": host_bw,
                             "median_lat_us": [float(np.nanmedian(r)) if np.isfinite(r).any() else np.nan
                                               for r in mats[LAT]]})
    return [(f"Cluster over {transport} ({stem}): {verdict}", heat, notes),
            (f"Cluster over {transport} ({stem}): each host", hosts, per_host)]


def traffic_figure(plt, tr, out: Path, kinds: dict) -> list[tuple[str, Path, object]]:
    """--traffic rows: bytes and RPCs per step for each role pair (from -> to), one bar per series."""
    path = out / "traffic.png"
    tr = tr.assign(pair=tr["from"] + " -> " + tr["to"], point=tr["series"])
    pairs, points = sorted(tr["pair"].unique()), list(dict.fromkeys(tr["point"]))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    width = 0.8 / len(points)
    for k, pt in enumerate(points):
        g = tr[tr["point"] == pt].set_index("pair")
        xs = [i + (k - (len(points) - 1) / 2) * width for i in range(len(pairs))]
        axes[0].bar(xs, [g["bytes_step"].get(p, 0) for p in pairs], width, label=pt)
        axes[1].bar(xs, [g["rpcs_step"].get(p, 0) for p in pairs], width, label=pt)
    for ax, what in zip(axes, ("bytes per step", "RPCs per step"), strict=True):
        ax.set_xticks(range(len(pairs)), pairs, fontsize=8, rotation=20)
        ax.set(title=f"on the wire: {what}", ylabel=what)
        ax.grid(True, axis="y", alpha=0.3)
    axes[0].set_yscale("log")
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    save(fig, path)
    plt.close(fig)
    return [("Traffic on the wire (--traffic)", path, tr[["point", "from", "to", "bytes_step", "segments_step",
                                                           "rpcs_step"]])]


FIGURES = {"line": line_figures, "pairs": pairs_figures, "training": training_figure, "traffic": traffic_figure,
           "none": lambda *_: []}  # none: rows without a figure of their own (train --compute-only)


def interval_keys(metric: str) -> list[tuple[str, str]]:
    """Where a row keeps its median's 95 % confidence interval: p50_us's in p50_ci_lo_us and
    p50_ci_hi_us (the harness's), step_p50_ms's in step_ci_lo_ms and step_ci_hi_ms (train's)."""
    if "p50" not in metric:
        return []
    return [(metric.replace("p50", "p50_ci_lo", 1), metric.replace("p50", "p50_ci_hi", 1)),
            (metric.replace("_p50", "_ci_lo", 1), metric.replace("_p50", "_ci_hi", 1))]


def _overlap(r, metric: str) -> bool:
    """Both points' medians carry confidence intervals and they overlap: the difference is not
    significant (as pyperf says of two runs)."""
    def number(k: str) -> float | None:
        v = r.get(k)
        return float(v) if isinstance(v, (int, float)) and v == v else None

    for lo, hi in interval_keys(metric):
        ends = [v for side in ("a", "b") for k in (lo, hi) if (v := number(f"{k}_{side}")) is not None]
        if len(ends) == 4:
            a_lo, a_hi, b_lo, b_hi = ends
            return a_lo <= b_hi and b_lo <= a_hi
    return False


def _measured(runs: Sequence[tuple[str, Run]]) -> tuple[set[str], set[str], set[str]]:
    """Which tools (commbench, or the imported tool's name), transports (protocols) and main metrics
    the runs of one file hold."""
    tools = {str(imp.get("tool")) if isinstance(imp := r.meta.get("imported"), dict) else "commbench"
             for _, r in runs}
    transports = {str((r.meta.get("options") or {}).get("transport")) for _, r in runs}
    return tools, transports, {metric_of(r.meta)["key"] for _, r in runs}


def compare_notes(a: str, runs_a: Sequence[tuple[str, Run]], b: str, runs_b: Sequence[tuple[str, Run]]) -> list[str]:
    """What differs between the two files beyond the numbers: another tool's loop and statistics, another
    protocol (sockperf over UDP beside commbench over TCP), another metric (a tool's mean beside a median)."""
    (ta, pa, ma), (tb, pb, mb) = _measured(runs_a), _measured(runs_b)
    name_a, name_b = Path(a).name, Path(b).name
    notes = []
    if ta != tb:
        notes.append(f"A ({name_a}) is {', '.join(sorted(ta))}'s measurement and B ({name_b}) "
                     f"{', '.join(sorted(tb))}'s: each timed with its own loop and statistics")
    if pa != pb:
        notes.append(f"different protocols: A measured over {', '.join(sorted(pa))}, B over {', '.join(sorted(pb))}; "
                     "a ratio compares the two as measured, not one protocol's cost")
    if ma != mb:
        notes.append(f"different metrics: A's is {', '.join(sorted(ma))}, B's {', '.join(sorted(mb))}; each point is "
                     "compared on A's where B has it")
    return notes


def compare(a: str, b: str):
    """B / A per matched point of the main metric, with which of the two is better; "not significant"
    where the two medians' confidence intervals overlap. What differs between the two files beyond the
    numbers (tool, protocol, metric) is in the frame's ``attrs["notes"]``."""
    pd = pandas()
    runs_a, runs_b = read_all([a]), read_all([b])
    da, db = load(runs_a), load(runs_b)
    keys = [k for k in ("bench", *point_keys()) if k in da.columns and k in db.columns]
    how = [k for k in ("transport", "mode", "poll", "algorithm") if k in keys]
    if how and len(da[how].drop_duplicates()) == 1 and len(db[how].drop_duplicates()) == 1:
        keys = [k for k in keys if k not in how]  # one configuration per file: compare them point by point
    for k in keys:  # a key missing from every row of one file reads as object (None), numbers as int64
        if da[k].dtype != db[k].dtype:
            da[k], db[k] = da[k].astype(object), db[k].astype(object)
    m = da.merge(db, on=keys, suffixes=("_a", "_b"))
    rows = []
    for _, r in m.iterrows():
        key, higher = r["metric_a"], bool(r["higher_a"])
        if f"{key}_a" not in r or r[f"{key}_a"] is None or r[f"{key}_a"] != r[f"{key}_a"]:
            continue
        va, vb = float(r[f"{key}_a"]), float(r[f"{key}_b"])
        if not (va > 0 and vb > 0):  # a value rounded to 0 (nccl-tests' busbw of tiny messages): no ratio
            ratio, verdict = float("nan"), "no ratio (a zero)"
        else:
            ratio = vb / va
            better = (ratio > 1) == higher
            speed = ratio if higher else va / vb
            verdict = "not significant" if _overlap(r, key) else "same" if abs(ratio - 1) < 0.02 else \
                f"{max(speed, 1 / speed):.2f}x {'better' if better else 'worse'}"
        shown = [str(r[k]) for k in keys if k not in ("bench", "payload") and r[k] == r[k] and r[k] is not None]
        if "payload" in keys and str(r["payload"]) != str(r.get("size")):
            shown.insert(0, str(r["payload"]))
        point = " ".join(shown)
        rows.append({"bench": r["bench"], "point": point, "metric": key, "a": va, "b": vb, "b_over_a": ratio,
                     "verdict": verdict})
    if not rows:
        raise UsageError(f"{a} and {b} have no points in common (same benchmark, transport, mode, size...)")
    df = pd.DataFrame(rows)
    df.attrs["notes"] = compare_notes(a, runs_a, b, runs_b)
    return df


def command(run: Run) -> str:
    return " ".join(run.meta.get("command") or [])


def write_file(path: Path, data: bytes) -> None:
    """One of the report's files, whole, in its folder (own_directory): a link there is replaced."""
    write_whole(str(path), data, "report file", "choose another -o", replace_link=True)


def save(fig, path: Path) -> None:
    buf = io.BytesIO()
    fig.savefig(buf, dpi=110, format="png")
    write_file(path, buf.getvalue())


def write_page(out: Path, fmt: str, runs: Sequence[tuple[str, Run]], made, cmp) -> Path:
    if fmt == "md":
        lines = ["# commbench report", "", "| file | benchmark | hosts | command |", "|---|---|---|---|"]
        lines += [f"| {cell(Path(f).name)} | {cell(str(r.meta.get('bench')))} | "
                  f"{cell(', '.join(sorted(set(r.meta.get('hosts') or []))))} | <code>{cell(command(r))}</code> |"
                  for f, r in runs]
        for title, png, table in made:
            lines += ["", f"## {cell(title)}", "", f"![{cell(title)}]({png.name})", "", _md_table(table)]
        if cmp is not None:
            lines += ["", "## Comparison (B / A)", "", *(f"Note: {cell(n)}  " for n in cmp.attrs["notes"]), "",
                      _md_table(cmp)]
        page = out / "report.md"
        write_file(page, ("\n".join(lines) + "\n").encode())
        return page
    parts = ["<!doctype html><meta charset=utf-8><title>commbench report</title>",
             "<style>body{font-family:sans-serif;max-width:1100px;margin:auto} img{max-width:100%} "
             "table{border-collapse:collapse;font-size:12px} td,th{border:1px solid #ccc;padding:2px 6px;"
             "text-align:right}</style>",
             "<h1>commbench report</h1><table><tr><th>file</th><th>benchmark</th><th>hosts</th><th>command</th></tr>"]
    parts += [f"<tr><td>{html.escape(Path(f).name)}</td><td>{html.escape(str(r.meta.get('bench')))}</td>"
              f"<td>{html.escape(', '.join(sorted(set(r.meta.get('hosts') or []))))}</td>"
              f"<td><code>{html.escape(command(r))}</code></td></tr>" for f, r in runs]
    parts.append("</table>")
    for title, png, table in made:
        data = base64.b64encode(png.read_bytes()).decode()
        img = f'<img alt="{html.escape(title)}" src="data:image/png;base64,{data}">'
        parts += [f"<h2>{html.escape(title)}</h2>", img, table.to_html(index=False, na_rep="", float_format=number)]
    if cmp is not None:
        parts += ["<h2>Comparison (B / A)</h2>", *(f"<p>Note: {html.escape(n)}</p>" for n in cmp.attrs["notes"]),
                  cmp.to_html(index=False, float_format=number)]
    page = out / "report.html"
    write_file(page, "\n".join(parts).encode())
    return page


def _md_table(df) -> str:
    df = df.reset_index() if df.index.name else df
    cols = [cell(str(c)) for c in df.columns]
    rows = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    rows += ["| " + " | ".join(cell(number(v)) for v in rec) + " |" for rec in df.itertuples(index=False)]
    return "\n".join(rows)


def number(v) -> str:
    """Readable in a table: integral values as integers, else 4 significant digits, no exponents."""
    if isinstance(v, float):
        if v != v:
            return ""
        if v.is_integer() and abs(v) < 1e15:
            return str(int(v))
        return f"{v:.1f}" if abs(v) >= 1000 else f"{v:.4g}"
    return str(v)


@dataclass(frozen=True)
class ReportOptions(Options):
    files: list[str] = opt((), "files", nargs="*", metavar="FILE",
                           help="results files (.jsonl or .csv), or folders of them (what compare wrote)")
    output: str = opt("commbench-report", "-o", "--output", metavar="DIR",
                      help="directory for the PNGs and the page (default commbench-report)")
    format: str = opt("html", choices=("html", "md"), help="the page: html (self-contained) or md")
    compare: list[str] | None = opt(None, nargs=2, metavar=("A", "B"),
                                    help="ratio B / A of every point the two files share")


def add_parser(sub) -> None:
    declare_command(sub, "report", ReportOptions, run,
                    help="plots and one HTML/Markdown page from results files; --compare A B",
                    description=__doc__.split("\n\n")[0].replace("``", ""))


def run(o: ReportOptions) -> int:
    files = results_files(o.files)
    if not files and not o.compare:
        raise UsageError("report needs results files (commbench report RUN.jsonl ...) or --compare A B")
    cmp = None
    if o.compare:
        cmp = compare(*o.compare)
        for note in cmp.attrs["notes"]:
            print(f"# note: {note}")
        pd = pandas()
        with pd.option_context("display.width", 160, "display.max_rows", 500):
            print(cmp.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
        files = files or list(o.compare)
    runs = read_all(files)  # every file read before anything is made
    out = Path(o.output)
    own_directory(out, "report folder", "choose another -o")
    ours = any((out / f"report.{ext}").exists() for ext in ("html", "md"))  # a report's folder from before
    with warnings.catch_warnings():  # matplotlib's overflow on absurd values (a file's 1e308 B) is not the user's news
        warnings.simplefilter("ignore", RuntimeWarning)
        made = figures(load(runs), out)
    if ours:  # its figures this report does not make again would sit beside the new page, looking current
        for old in set(out.glob("*.png")) - {png for _, png, _ in made}:
            old.unlink(missing_ok=True)
    page = write_page(out, o.format, runs, made, cmp)
    print(f"commbench report: {len(made)} figure(s) and {page}")
    return 0
