"""``commbench compare``: the main job. A short latency and bandwidth run of every transport
configuration usable here, one after another with the local launcher, each table printed and
saved, then one summary table (ratios against tcp in blocking mode, the sockperf-like baseline).
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Sequence
from pathlib import Path

from commbench.core.errors import CommbenchError, UsageError
from commbench.core.placement import detect
from commbench.core.results import read_runs
from commbench.core.table import Column, header_line, row_line

# (label, transport, extra flags): what a user weighs when choosing a transport.
CONFIGS = [
    ("tcp blocking", "tcp", ["--poll", "blocking"]),
    ("tcp busy-poll", "tcp", ["--poll", "busy"]),
    ("grpc raw/unary", "grpc", ["--grpc-mode", "raw", "--grpc-call", "unary"]),
    ("grpc raw/stream", "grpc", ["--grpc-mode", "raw", "--grpc-call", "stream"]),
    ("grpc proto/unary", "grpc", ["--grpc-mode", "proto", "--grpc-call", "unary"]),
    ("grpc proto/stream", "grpc", ["--grpc-mode", "proto", "--grpc-call", "stream"]),
]
LAT_SIZES = ["8", "1K", "64K", "1M"]
BW_SIZES = ["64K", "1M", "4M"]
SUMMARY = [Column("config", "Transport (mode)", -20), Column("lat8", "Lat 8B(us)", 11, "{:.2f}"),
           Column("lat1m", "Lat 1M(us)", 11, "{:.1f}"), Column("bw4m", "BW 4M(MB/s)", 12, "{:.1f}"),
           Column("lat_ratio", "Lat/tcp", 8, "{:.2f}"), Column("bw_ratio", "BW/tcp", 8, "{:.2f}")]


def add_parser(sub, transports: dict) -> None:
    p = sub.add_parser("compare", help="short latency + bandwidth comparison of every transport usable here")
    p.add_argument("--output-dir", metavar="DIR", help="keep the per-run results files here (default: a temp dir)")
    p.add_argument("-i", "--iterations", type=int, default=1000, help="latency iterations per size (default 1000)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for a peer (default 60)")
    p.add_argument("--only", metavar="NAME", action="append",
                   help="run only configurations whose label contains NAME (repeatable), e.g. --only grpc")
    p.set_defaults(func=compare, transports=transports)


def compare(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from commbench.launch.local import launch

    if detect() is not None:
        raise UsageError("compare starts its own ranks on this machine; under mpirun or srun run the benchmarks "
                         "themselves (see slurm/)")
    if args.iterations <= 0:
        raise UsageError(f"-i/--iterations must be a positive number, not {args.iterations}")
    outdir = Path(args.output_dir) if args.output_dir else Path(tempfile.mkdtemp(prefix="commbench-compare-"))
    outdir.mkdir(parents=True, exist_ok=True)
    configs = [c for c in CONFIGS if not args.only or any(o in c[0] for o in args.only)]
    if not configs:
        raise UsageError(f"--only {args.only} matches none of: {', '.join(c[0] for c in CONFIGS)}")
    summary, failed = [], []
    for label, transport, flags in configs:
        try:
            args.transports[transport].check_usable(argparse.Namespace(**vars(args), transport=transport))
        except CommbenchError as exc:
            print(f"# {label}: not usable here: {exc}\n", flush=True)
            continue
        stem = label.replace(" ", "_").replace("/", "-")
        lat, bw = outdir / f"latency_{stem}.jsonl", outdir / f"bandwidth_{stem}.jsonl"
        for f in (lat, bw):
            f.unlink(missing_ok=True)
        common = ["-t", transport, *flags, "--timeout", str(args.timeout)]
        rc = launch(2, ["p2p-latency", *common, "-m", ",".join(LAT_SIZES), "-i", str(args.iterations),
                        "-x", str(max(1, args.iterations // 10)), "-o", str(lat)], args.timeout)
        print(flush=True)
        rc = rc or launch(2, ["p2p-bandwidth", *common, "-m", ",".join(BW_SIZES), "-o", str(bw)], args.timeout)
        print(flush=True)
        if rc:
            failed.append(label)
            continue
        lat_rows = {r["size"]: r for r in read_runs(lat)[-1].rows}
        bw_rows = {r["size"]: r for r in read_runs(bw)[-1].rows}
        summary.append({"config": label, "lat8": lat_rows[8]["avg_us"], "lat1m": lat_rows[1 << 20]["avg_us"],
                        "bw4m": bw_rows[4 << 20]["mb_s"]})
    base = next((s for s in summary if s["config"] == "tcp blocking"), None)
    for s in summary:
        if base:
            s["lat_ratio"] = s["lat8"] / base["lat8"]
            s["bw_ratio"] = s["bw4m"] / base["bw4m"]
    print("# commbench compare: one-way latency (avg, us) and osu_bw bandwidth (MB/s = 10^6 B/s), 2 ranks here")
    print("# ratios against tcp blocking: Lat/tcp at 8 B (lower is better), BW/tcp at 4 MiB (higher is better)")
    print(header_line(SUMMARY))
    for s in summary:
        print(row_line(SUMMARY, s))
    print(f"# results files: {outdir}  (commbench show FILE; pandas: pd.read_json(FILE, lines=True))")
    if failed:
        print(f"commbench: these configurations failed: {', '.join(failed)}", flush=True)
        return 1
    return 0
