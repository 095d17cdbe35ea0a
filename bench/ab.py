"""Two commits of commbench against each other on their timed paths, interleaved round by round.

    .venv/bin/python bench/ab.py REV_A REV_B [--rounds 6] [--seconds 2] [--figures tcp-lat64,tcp-bw4m,...]
    .venv/bin/python bench/ab.py HEAD~1 HEAD          # this change against its parent

Each revision is checked out into a git worktree of its own (``~/.cache/commbench/ab/SHA``, made
once and reused), the grpc-cpp extension this checkout built copied into it; both run on this venv's
Python and libraries, the worktree first on PYTHONPATH and as the working directory, so that every
rank (the local launcher's and mpiexec's) imports that revision's commbench: only commbench's own
code differs between A and B. Every round runs each figure for A and for B, the order alternating
over rounds and figures (A B, B A, ...: bench/common.py's ``in_turn``), with the same allocator
settings (``matched_env``), so that a slow phase of the machine hits both alike. Each run measures
for ``--seconds`` after a 1 s warm-up (``--time``); cluster8 counts its loops and is timed whole.

Per figure: the median of the per-round ratios B / A (a round's two runs are seconds apart), its
95 % bootstrap interval (numpy; 10,000 resamples of the rounds), and a verdict read the way the figure
is better: "B slower" / "B faster" where the interval excludes 1 and a sign test over the rounds
agrees (p < 0.05: at least 6 rounds, all one way), else "not significant" (as pyperf). Raw values go
to a JSONL file as they are measured (``--raw``). A figure that fails in one revision (a flag it
does not have) is dropped from the table and said.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from common import CACHE, REPO, Comparison, matched_env

RESAMPLES = 10_000


@dataclass(frozen=True)
class Figure:
    what: str  # what the table says it is
    better: str  # "lower" or "higher"
    args: tuple[str, ...]  # the commbench command, without -o
    key: str  # the row's value; "wall_s": the command's wall time


def worktree(rev: str) -> tuple[str, Path]:
    """(commit, directory): REV checked out in a worktree of its own, with this checkout's built
    extensions (grpc-cpp) copied in where the revision has their directory."""
    sha = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--verify", f"{rev}^{{commit}}"], capture_output=True,
                         text=True)
    if sha.returncode:
        sys.exit(f"ab.py: {rev!r} is not a commit of {REPO}")
    commit = sha.stdout.strip()
    tree = CACHE / "ab" / commit[:12]
    if not (tree / "commbench" / "__init__.py").exists():
        tree.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "-C", str(REPO), "worktree", "prune"], check=True)
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-f", str(tree), commit], check=True,
                       capture_output=True)
    for built in (REPO / "commbench" / "transports").glob("_*/*.so"):
        target = tree / built.relative_to(REPO)
        if target.parent.is_dir() and not target.exists():
            shutil.copy2(built, target)
    return commit, tree


def run(tree: Path, fig: Figure, seconds: float) -> float | None:
    """The figure's value for the revision in ``tree``, or None (and the error on stderr) where it failed."""
    env = matched_env()
    env["PYTHONPATH"] = str(tree)
    timed = fig.key != "wall_s"
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "r.jsonl"
        cmd = [sys.executable, "-m", "commbench", *fig.args, "-o", str(out),
               *(["--time", f"{seconds:g}", "--warmup-time", "1"] if timed else [])]
        t0 = time.monotonic()
        p = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=600)
        wall = time.monotonic() - t0
        if p.returncode:
            print(f"ab.py: {' '.join(fig.args)} in {tree} failed ({p.returncode}): {p.stderr.strip()[-300:]}",
                  file=sys.stderr)
            return None
        rows = [r for r in map(json.loads, out.read_text().splitlines()) if r.get("type") == "row"]
    return wall if not timed else float(rows[0][fig.key])


def interval(ratios: list[float], rng: np.random.Generator) -> tuple[float, float]:
    """The 95 % bootstrap interval of the median of the per-round ratios."""
    x = np.asarray(ratios)
    medians = np.median(rng.choice(x, size=(RESAMPLES, len(x)), replace=True), axis=1)
    return float(np.percentile(medians, 2.5)), float(np.percentile(medians, 97.5))


def sign_p(ratios: list[float]) -> float:
    """Two-sided sign test: the chance of rounds this one-sided (ratios above 1 against below) were A and
    B the same code. A bootstrap of a few rounds is overconfident: two rounds both below 1 give an
    interval below 1, a sign test 0.5."""
    n = sum(r != 1 for r in ratios)
    k = min(sum(r > 1 for r in ratios), sum(r < 1 for r in ratios))
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2**n) if n else 1.0


def verdict(ratios: list[float], lo: float, hi: float, better: str) -> str:
    """"B faster" / "B slower" where the bootstrap interval excludes 1 and the sign test agrees (p < 0.05:
    6 rounds or more, all one way), else "not significant"."""
    if lo <= 1 <= hi or sign_p(ratios) >= 0.05:
        return "not significant"
    b_higher = lo > 1
    return "B faster" if b_higher == (better == "higher") else "B slower"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("rev_a")
    ap.add_argument("rev_b")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--seconds", type=float, default=2.0, help="measured seconds per run (after 1 s warm-up)")
    ap.add_argument("--figures", default=",".join(FIGURES), help=f"some of {', '.join(FIGURES)}")
    ap.add_argument("--raw", type=Path, help="raw values to this JSONL file (default: in the cache directory)")
    a = ap.parse_args()
    names = a.figures.split(",")
    if unknown := [n for n in names if n not in FIGURES]:
        sys.exit(f"ab.py: no figure {', '.join(unknown)}; the figures are {', '.join(FIGURES)}")
    (sha_a, tree_a), (sha_b, tree_b) = worktree(a.rev_a), worktree(a.rev_b)
    trees = {"A": tree_a, "B": tree_b}
    cmp = Comparison("ab", ("A", "B"), a.rounds, a.raw,
                     {"A": {"rev": a.rev_a, "commit": sha_a}, "B": {"rev": a.rev_b, "commit": sha_b},
                      "seconds": a.seconds, "figures": {n: FIGURES[n].args for n in names}})
    cmp.run([(n,) for n in names], lambda side, point: run(trees[side], FIGURES[point[0]], a.seconds))
    rng = np.random.default_rng(0)
    print(f"# commbench A/B: A = {a.rev_a} ({sha_a[:10]}), B = {a.rev_b} ({sha_b[:10]}); {a.rounds} rounds, "
          f"the order alternating; {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f} at the end")
    print("# B/A: the median of per-round ratios; CI95: its bootstrap interval; verdict: the interval and a sign test")
    print(f"# {'figure':34s} {'A':>10s} {'B':>10s} {'B/A':>7s} {'CI95':>13s}  verdict")
    for n in names:
        fig, point = FIGURES[n], (n,)
        if not (cmp.has("A", point) and cmp.has("B", point)) or len(cmp.of("A", point)) != len(cmp.of("B", point)):
            print(f"  {fig.what:34s} not measured in both: see the messages above")
            continue
        ratios = cmp.per_round("B", "A", point)
        lo, hi = interval(ratios, rng)
        print(f"  {fig.what:34s} {cmp.median('A', point):10.2f} {cmp.median('B', point):10.2f} "
              f"{float(np.median(ratios)):7.3f} {lo:6.3f}-{hi:6.3f}  {verdict(ratios, lo, hi, fig.better)}")


FIGURES = {
    "tcp-lat64": Figure("tcp 64 B latency p50 (us)", "lower", ("p2p-latency", "-t", "tcp", "-m", "64:64"), "p50_us"),
    "tcp-bw4m": Figure("tcp 4 MiB bandwidth (MB/s)", "higher", ("p2p-bandwidth", "-t", "tcp", "-m", "4M:4M"), "mb_s"),
    "mpi-lat8": Figure("mpi 8 B latency p50 (us)", "lower", ("p2p-latency", "-t", "mpi", "-m", "8:8"), "p50_us"),
    "mpi-bw1m": Figure("mpi 1 MiB bandwidth (MB/s)", "higher", ("p2p-bandwidth", "-t", "mpi", "-m", "1M:1M"), "mb_s"),
    "grpc-lat8": Figure("grpc 8 B latency p50 (us)", "lower", ("p2p-latency", "-t", "grpc", "-m", "8:8"), "p50_us"),
    "grpc-bw4m": Figure("grpc 4 MiB bandwidth (MB/s)", "higher", ("p2p-bandwidth", "-t", "grpc", "-m", "4M:4M"),
                        "mb_s"),
    "cluster8": Figure("cluster, 8 ranks pairwise: wall (s)", "lower",
                       ("cluster", "--np", "8", "--tests", "pairwise", "-i", "100", "-x", "10", "--bw-time", "0.1"),
                       "wall_s"),
}

if __name__ == "__main__":
    main()
