"""How often `commbench cluster` is wrong at scale: labelled scenarios on the simulated fabric
(`cluster --fabric sim`, SimGrid), each a run of the same planner and verdict as a live run, scored
against its ground truth. Per fault kind, size and severity: runs, recall and precision with Wilson
95 % intervals, false findings per healthy run, wall time.

    python bench/sim_errors.py OUT [--plan ci|small|goals] [--jobs 2] [--noise quiet]
    python bench/sim_errors.py OUT --table                        # the table from the runs saved in OUT

A scenario (bench's generator: ``scenario(kind, hosts, severity, seed)``) lays N hosts out as the
emulated clusters of bench/cluster_errors.py are (``hosts up N --racks N/4 --uplink RATE``: racks of 4,
each rack's uplink at one host's line rate) and plants its fault at places drawn from its seed (an
uplink's severity is a share of that line rate, as ``--uplink-of``'s; ``uplink-wide``: non-blocking
uplinks, one at a share of its own rate, still above one host's; ``--nonblocking``: every scenario's
uplinks so, a full-bisection tree as most HPC fabrics are); every scenario file,
results file and a line per run (OUT/runs.jsonl: kind, hosts, severity, seed, what was planted, what
was found, wall time) are kept, so the tables are made again from what was run. A run's findings are
right when they name the planted fault's kind and place (a fault named as another kind counts against
both: a false finding and a miss).
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

BIN = Path(sys.executable).parent
PER_RACK = 4
FINDING = {"host": "slow-host", "cable": "slow-link", "uplink": "slow-uplink", "uplink-wide": "slow-uplink",
           "switch": "slow-switch", "two-hosts": "slow-host", "latency": "slow-host-latency"}
KINDS = ("healthy", *FINDING)
PLANS = {  # (kind, hosts, severity, runs)
    "ci": [("healthy", 16, 0.5, 3), ("host", 16, 0.5, 2), ("cable", 16, 0.5, 2), ("uplink", 16, 0.5, 2)],
    "small": [(k, 64, 0.5, 10) for k in KINDS] + [("host", 64, 0.7, 10)],
    "wall": [("healthy", 256, 0.5, 2), ("host", 256, 0.5, 2), ("uplink", 256, 0.5, 2)],
    "goals": [("healthy", 64, 0.5, 3000), *((k, 64, 0.5, 300) for k in ("host", "cable", "uplink", "switch")),
              ("two-hosts", 64, 0.5, 300), ("host", 64, 0.7, 300), ("healthy", 256, 0.5, 300),
              *((k, 256, 0.5, 100) for k in ("host", "cable", "uplink")),
              ("healthy", 1024, 0.5, 30), *((k, 1024, 0.5, 30) for k in ("host", "cable", "uplink"))],
}


def scenario(kind: str, hosts: int, severity: float, seed: int, noise: str = "none",
             known: bool = True, nonblocking: bool = False) -> tuple[dict, list[dict]]:
    """A labelled scenario: its JSON form and its ground truth (finding kind, place)."""
    rng = np.random.default_rng(seed)
    racks = max(1, hosts // PER_RACK)
    names = [f"n{i}" for i in range(hosts)]
    faults: list[dict] = []
    truth: list[dict] = []
    if kind in ("host", "two-hosts"):
        for h in rng.choice(hosts, size=2 if kind == "two-hosts" else 1, replace=False):
            faults.append({"kind": "host", "at": names[h], "share": severity})
            truth.append({"kind": FINDING[kind], "where": names[h]})
    elif kind == "cable":
        a, b = sorted(int(x) for x in rng.choice(hosts, size=2, replace=False))
        faults.append({"kind": "cable", "at": [names[a], names[b]], "share": severity})
        truth.append({"kind": FINDING[kind], "where": f"{names[a]}-{names[b]}"})
    elif kind in ("uplink", "uplink-wide", "switch"):
        r = f"rack{int(rng.integers(racks))}" if racks > 1 else "switch0"
        faults.append({"kind": "switch" if kind == "switch" else "uplink", "at": r, "share": severity})
        truth.append({"kind": FINDING[kind], "where": r})
    elif kind == "latency":
        h = int(rng.integers(hosts))
        faults.append({"kind": "latency", "at": names[h], "add": "60us"})
        truth.append({"kind": FINDING[kind], "where": names[h]})
    layout = {"hosts": hosts, "racks": racks, "rate": "10gbit"}
    if kind != "uplink-wide" and not nonblocking:
        layout["uplink"] = "10gbit"
    return {**layout, "seed": seed, "noise": noise, "known": known, "faults": faults}, truth


def where(f: dict) -> str:
    if f["kind"].startswith("slow-link"):
        return "-".join(sorted((str(f.get("a")), str(f.get("b"))), key=lambda n: int(n[1:]) if n[1:].isdigit() else 0))
    return str(f.get("a"))


def one_run(out: Path, kind: str, hosts: int, severity: float, seed: int, noise: str, known: bool = True,
            nonblocking: bool = False) -> dict:
    sc, truth = scenario(kind, hosts, severity, seed, noise, known, nonblocking)
    base = f"{kind}-{hosts}-{round(severity * 100)}pct-{noise}-{'known' if known else 'unknown'}" \
           f"{'-nonblocking' if nonblocking else ''}-{seed}"
    spec, results = out / f"{base}.scenario.json", out / f"{base}.jsonl"
    spec.write_text(json.dumps(sc))
    results.unlink(missing_ok=True)
    t0 = time.monotonic()
    r = subprocess.run([str(BIN / "commbench"), "cluster", "--fabric", "sim", "--scenario",
                        str(spec), "--tests", "pairwise", "--bw-size", "256K",
                        "-o", str(results)], capture_output=True, text=True, timeout=7200)
    wall = time.monotonic() - t0
    rows = [json.loads(x) for x in results.read_text().splitlines()[1:]] if results.exists() else []
    found = [{"kind": x["kind"], "where": where(x)} for x in rows if x.get("test") == "finding"]
    sim = [x["note"] for x in rows if x.get("test") == "summary" and "fabric's time" in str(x.get("note"))]
    return {"kind": kind, "hosts": hosts, "severity": severity, "seed": seed, "noise": noise, "known": known,
            "nonblocking": nonblocking, "exit": r.returncode,
            "error": r.stderr.strip()[-300:] if r.returncode not in (0, 1) else None, "wall_s": round(wall, 2),
            "sim_s": float(sim[0].split(" s ")[0]) if sim else None, "want": truth, "found": found,
            "file": results.name}


def score(run: dict) -> tuple[int, int, int]:
    """(planted faults named right, findings right, findings in all): a slow-* finding is right when
    a planted fault has its kind and place."""
    want = {(w["kind"], w["where"]) for w in run["want"]}
    slow = [f for f in run["found"] if f["kind"].startswith("slow")]
    right = [f for f in slow if (f["kind"], f["where"]) in want]
    return len({(f["kind"], f["where"]) for f in right}), len(right), len(slow)


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson's 95 % interval of a proportion k / n."""
    if n == 0:
        return 0.0, 1.0
    p = k / n
    mid, half = p + z * z / (2 * n), z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, (mid - half) / (1 + z * z / n)), min(1.0, (mid + half) / (1 + z * z / n))


def table(runs: list[dict]) -> str:
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in runs:
        if r["exit"] in (0, 1):
            groups[(r["kind"], r["hosts"], r["severity"], r["noise"], r.get("known", True),
                    r.get("nonblocking", False) or r["kind"] == "uplink-wide")].append(r)
    lines = ["| scenario | hosts | uplinks | severity | noise | topology | runs | recall (95 % CI) | "
             "precision (95 % CI) | runs with a false finding (95 % CI) | false findings / run | median wall s |",
             "|---" * 12 + "|"]
    order = sorted(groups.items(), key=lambda kv: (KINDS.index(kv[0][0]), kv[0][1:]))
    for (kind, hosts, sev, noise, known, wide), rs in order:
        s = [score(r) for r in rs]
        planted = sum(len(r["want"]) for r in rs)
        named = sum(a for a, _, _ in s)
        right, total = sum(b for _, b, _ in s), sum(c for _, _, c in s)
        false_runs = sum(1 for _, b, c in s if c > b)
        rec = "-" if kind == "healthy" else f"{named / planted:.1%} ({wilson(named, planted)[0]:.1%}-" \
                                            f"{wilson(named, planted)[1]:.1%})"
        plo, phi = wilson(right, total)
        prec = "-" if not total else f"{right / total:.1%} ({plo:.1%}-{phi:.1%})"
        lo, hi = wilson(false_runs, len(rs))
        walls = sorted(r["wall_s"] for r in rs)
        sev_s = "-" if kind in ("healthy", "latency") else f"{sev:g}"
        topo = "known" if known else "not given"
        ups = "non-blocking" if wide else "one host's rate"
        lines.append(f"| {kind} | {hosts} | {ups} | {sev_s} | {noise} | {topo} | {len(rs)} | {rec} | {prec} | "
                     f"{false_runs} ({lo:.1%}-{hi:.1%}) | {(total - right) / len(rs):.2f} | "
                     f"{walls[len(walls) // 2]:.1f} |")
    return "\n".join(lines)


def runs_arg(text: str) -> tuple[str, int, float, int]:
    """``--runs KIND:HOSTS:N[:SEVERITY]`` as a plan's line."""
    parts = text.split(":")
    if len(parts) not in (3, 4) or parts[0] not in KINDS or not parts[1].isdigit() or not parts[2].isdigit():
        raise SystemExit(f"--runs {text!r}: KIND:HOSTS:N[:SEVERITY], KIND one of {', '.join(KINDS)}")
    return parts[0], int(parts[1]), float(parts[3]) if len(parts) == 4 else 0.5, int(parts[2])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path)
    p.add_argument("--plan", choices=sorted(PLANS), default="ci")
    p.add_argument("--runs", action="append", metavar="KIND:HOSTS:N[:SEVERITY]", default=[],
                   help="these runs instead of a plan's (again for more), e.g. healthy:64:3000")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--noise", choices=("none", "quiet", "busy"), default="none")
    p.add_argument("--seed", type=int, default=1, help="the first scenario's seed (each run: its own)")
    p.add_argument("--no-topology", action="store_true", help="the runs are not told the topology (no --topology)")
    p.add_argument("--nonblocking", action="store_true",
                   help="each rack's uplink carries all its hosts at once (default: one host's rate, 4:1)")
    p.add_argument("--table", action="store_true")
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    log = a.out / "runs.jsonl"
    if not a.table:
        plan = [runs_arg(x) for x in a.runs] or PLANS[a.plan]
        todo = [(k, h, sev, a.seed + i) for k, h, sev, n in plan for i in range(n)]
        with ThreadPoolExecutor(a.jobs) as pool, log.open("a") as f:
            for run in pool.map(lambda t: one_run(a.out, *t, a.noise, not a.no_topology, a.nonblocking), todo):
                f.write(json.dumps(run) + "\n")
                f.flush()
                if run["error"]:
                    print(f"{run['file']}: exit {run['exit']}: {run['error']}", file=sys.stderr)
    runs = {r["file"]: r for r in (json.loads(x) for x in log.read_text().splitlines() if x.strip())}
    print(table(list(runs.values())))  # a scenario run again: its last run


if __name__ == "__main__":
    main()
