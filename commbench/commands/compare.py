"""``commbench compare``: the main job. A short latency and bandwidth run of every transport
configuration usable here, one after another with the local launcher, each table printed and
saved, then one summary table (ratios against the baseline transport's first preset: tcp blocking, the
sockperf-like floor). The configurations are what each transport declares (`presets`, `label`).
"""

from __future__ import annotations

import math
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path

from commbench import presentation
from commbench.commands import command
from commbench.commands.report import metric_of
from commbench.core.config.argtypes import MAX_ITERATIONS, TIMEOUT, integer
from commbench.core.config.options import Options, opt
from commbench.core.config.run import CommonOptions
from commbench.core.errors import CommbenchError, UsageError
from commbench.core.measure.sizes import format_size
from commbench.core.output.paths import own_directory
from commbench.core.output.results import results_files
from commbench.core.output.table import Column, header_line, row_line
from commbench.core.run.placement import detect
from commbench.launch.local import launch, launch_mpi, mpiexec_command

LATENCY, BANDWIDTH = "p2p-latency", "p2p-bandwidth"  # what compare runs, and summary reads
LAT_SIZES = ["8", "1K", "64K", "1M"]
BW_SIZES = ["64K", "1M", "4M"]
SUMMARY = [Column("config", "Transport (mode)", -20), Column("lat8", "Lat 8B(us)", 11, "{:.2f}"),
           Column("lat1m", "Lat 1M(us)", 11, "{:.1f}"), Column("bw4m", "BW 4M(MB/s)", 12, "{:.1f}"),
           Column("lat_ratio", "Lat/base", 9, "{:.2f}"), Column("bw_ratio", "BW/base", 8, "{:.2f}")]


def configurations() -> list[tuple[str, str, list[str]]]:
    """(label, transport, flags) of every preset every transport declares, the baseline's first."""
    from commbench import transports
    from commbench.planning import parse_benchmark

    out = []
    for name, cls in sorted(transports.registry().items(), key=lambda kv: not kv[1].baseline):
        for flags in cls.presets:
            args = parse_benchmark([LATENCY, "-t", name, *flags])
            net = cls.Options.parse(args)
            out.append((cls.label(net, CommonOptions.parse(args).poll or cls.default_poll(net)), name, list(flags)))
    return out


def label_of(meta: dict) -> str:
    """A run's configuration label, from its transport's declaration and the options it recorded."""
    from commbench import transports

    imp = meta.get("imported")
    if isinstance(imp, dict):  # another tool's output (commbench import): its name, and its mean if no median
        mean = (meta.get("metric") or {}).get("key") == "avg_us"
        return f"{imp.get('tool')} {imp.get('version') or ''}".strip() + (" (mean)" if mean else "")
    o = meta["options"]
    cls = transports.get(str(o.get("transport")))
    net = cls.Options(**{f.name: o[f.name] for f in fields(cls.Options) if f.name in o})
    return cls.label(net, o.get("poll") or cls.default_poll(net))


def launch_config(transport: str, argv: list[str], timeout: float) -> int:
    """Two ranks: the local launcher, or the transport's own (mpiexec)."""
    from commbench import transports

    cls = transports.get(transport)
    return launch_mpi(2, argv) if "own-launcher" in cls.able(cls.Options()) else launch(2, argv, timeout)


@dataclass(frozen=True)
class CompareOptions(Options):
    output_dir: str | None = opt(None, metavar="DIR", help="keep the per-run results files here (default: a temp dir)")
    iterations: int = opt(1000, "-i", "--iterations", type=integer(1, MAX_ITERATIONS),
                          help="latency iterations per size (default 1000)")
    timeout: float = opt(60.0, type=TIMEOUT, help="seconds to wait for a peer (default 60)")
    only: list[str] | None = opt(None, metavar="NAME", action="append",
                                 help="run only configurations whose label contains NAME (repeatable), e.g. "
                                      "--only grpc")


@dataclass(frozen=True)
class SummaryOptions(Options):
    files: list[str] = opt((), "files", nargs="+", metavar="FILE", help="results files, or folders of them (compare's)")


def add_parser(sub) -> None:
    command(sub, "compare", CompareOptions, compare,
            help="short latency + bandwidth comparison of every transport usable here")
    command(sub, "summary", SummaryOptions, summary,
            help="the compare summary table from saved p2p-latency / p2p-bandwidth files")


def compare(o: CompareOptions) -> int:
    if detect() is not None:
        raise UsageError("compare starts its own ranks on this machine; under mpirun or srun run the benchmarks "
                         "themselves (see slurm/)")
    every = configurations()
    configs = [c for c in every if not o.only or any(o in c[0] for o in o.only)]
    if not configs:
        raise UsageError(f"--only {' '.join(o.only or [])} matches none of: {', '.join(c[0] for c in every)}")
    outdir = Path(o.output_dir) if o.output_dir else Path(tempfile.mkdtemp(prefix="commbench-compare-"))
    own_directory(outdir, "--output-dir folder", "choose another --output-dir")
    done: list[Path] = []
    failed: list[str] = []
    unusable: list[str] = []
    for label, transport, flags in configs:
        try:
            from commbench.planning import decide, parse_benchmark

            _, cls, config = decide(parse_benchmark([LATENCY, "-t", transport, *flags]))
            if "own-launcher" in cls.able(config.net) and mpiexec_command(2) is None:  # the run's own checks, and
                raise UsageError("no mpiexec found beside this Python or on PATH")  # its launcher's
        except CommbenchError as exc:
            print(f"# {label}: not usable here: {exc}\n", flush=True)
            unusable.append(f"{label}: {exc}")
            continue
        stem = label.replace(" ", "_").replace("/", "-")
        lat, bw = outdir / f"latency_{stem}.jsonl", outdir / f"bandwidth_{stem}.jsonl"
        for f in (lat, bw):
            f.unlink(missing_ok=True)
        common = ["-t", transport, *flags, "--timeout", str(o.timeout)]
        rc = launch_config(transport, [LATENCY, *common, "-m", ",".join(LAT_SIZES), "-i", str(o.iterations),
                                       "-x", str(max(1, o.iterations // 10)), "-o", str(lat)], o.timeout)
        print(flush=True)
        rc = rc or launch_config(transport, [BANDWIDTH, *common, "-m", ",".join(BW_SIZES), "-o", str(bw)],
                                 o.timeout)
        print(flush=True)
        if rc:
            failed.append(label)
            continue
        done.extend((lat, bw))
    if not done and not failed:
        if not o.output_dir:  # nothing was written: leave no empty temporary directory behind
            shutil.rmtree(outdir, ignore_errors=True)
        raise UsageError(f"none of the configurations asked for is usable here ({unusable[0]}); "
                         "see commbench devices")
    print_summary(done)
    print(f"# results files: {outdir}  (commbench show FILE; pandas: pd.read_json(FILE, lines=True))")
    if failed:
        print(f"commbench: these configurations failed: {', '.join(failed)}", flush=True)
        return 1
    return 0


# a column's size, and the sizes that stand in for it where a run lacks it: the same regime (a small
# message's latency, a large message's latency, a stream's bandwidth)
NEAR = {"lat8": (8, 1, 4 << 10), "lat1m": (1 << 20, 256 << 10, 16 << 20), "bw4m": (4 << 20, 64 << 10, 64 << 20)}


def _at(by_size: dict[int, dict], column: str) -> tuple[int, dict] | None:
    """The row at the column's size, else the one of the nearest size (by ratio) in its regime: another
    tool's output rarely has commbench's sizes (sockperf's one -m, iperf3's write size)."""
    size, lo, hi = NEAR[column]
    if size in by_size:
        return size, by_size[size]
    sizes = [s for s in by_size if isinstance(s, int) and lo <= s <= hi]
    if not sizes:
        return None
    near = min(sizes, key=lambda s: (abs(math.log(s / size)), s))
    return near, by_size[near]


def print_summary(paths: Sequence[Path | str]) -> None:
    """One row per transport configuration: latency at 8 B and 1 MiB, bandwidth at 4 MiB, ratios to tcp.
    A run without one of those sizes (an imported tool's) shows its nearest size's value, marked ``*``
    and said below the table, and no ratio: it is not the same quantity."""
    rows: dict[str, dict] = {}
    said: list[str] = []
    cols = {c.key: c for c in SUMMARY}
    for path in paths:
        for run in presentation.read_checked(path):
            if run.meta["bench"] not in (LATENCY, BANDWIDTH):
                raise UsageError(f"{path}: a run of {run.meta['bench']}; summary reads {LATENCY} and {BANDWIDTH} "
                                 "results (compare's); show it with commbench show or report")
            label = label_of(run.meta)
            row = rows.setdefault(label, {"config": label})
            by_size = {r["size"]: r for r in run.rows}
            metric = metric_of(run.meta)["key"]  # as the benchmark declared it: p50_us, mb_s
            for key in ("lat8", "lat1m") if run.meta["bench"] == LATENCY else ("bw4m",):
                got = _at(by_size, key)
                if got is None or got[1].get(metric) is None:
                    continue
                value = got[1][metric]
                if got[0] == NEAR[key][0]:
                    row[key] = value
                elif key not in row:
                    row[key] = cols[key].fmt.format(value) + "*"
                    said.append(f"{label}: {cols[key].header.split('(')[0].strip()} is its {format_size(got[0])} B "
                                "value, the nearest size it measured")
            transport = (run.meta.get("options") or {}).get("transport")
            if run.meta.get("imported") and transport not in (None, "tcp", "mpi", "verbs", "nccl"):
                said.append(f"{label}: measured over {transport}, not tcp")
    baseline = next((label for label, name, _ in configurations()), "")
    base = rows.get(baseline, {})
    for row in rows.values():  # a ratio where both values are there (same size) and the base is not zero
        for key, ratio in (("lat8", "lat_ratio"), ("bw4m", "bw_ratio")):
            if isinstance(row.get(key), (int, float)) and isinstance(base.get(key), (int, float)) and base[key]:
                row[ratio] = row[key] / base[key]
    print("# commbench compare: one-way latency (median, us) and osu_bw bandwidth (MB/s = 10^6 B/s), 2 ranks")
    print(f"# ratios against {baseline}: Lat/base at 8 B (lower is better), BW/base at 4 MiB (higher is better)")
    print(header_line(SUMMARY))
    for row in sorted(rows.values(), key=lambda r: r["config"] != baseline):  # the baseline first
        print(row_line(SUMMARY, row))
    for line in dict.fromkeys(said):
        print(f"# * {line}")


def summary(o: SummaryOptions) -> int:
    print_summary(results_files(o.files))
    return 0
