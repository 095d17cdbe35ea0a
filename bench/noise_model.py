"""The simulated fabric's noise, measured on emulated hosts: how a healthy pair's rate and latency
spread around the run's median under the tournament's cross-traffic, alone (``--serial``: one pair at
a time), on a quiet machine and on a busy one (a core kept busy by a spinning process). Root: it
builds emulated hosts (``commbench hosts up``) as bench/cluster_errors.py does.

    sudo python bench/noise_model.py OUT [--runs 6] [--hosts 12]   # measure: healthy runs into OUT
    python bench/noise_model.py OUT --fit [--write]                # the model from OUT's runs

``--fit`` prints the quantiles; ``--write`` stores them as commbench/emulators/fabric_noise.json, the
data the simulated fabric draws from (scenario ``"noise": "quiet"`` or ``"busy"``). The odd-numbered
tournament runs are left out of the model: their quantiles (``check``) are what tests/unit/
test_simfabric.py compares a simulated healthy run with. A run's own median is its
reference, as the verdict's is, so the model holds shares, not rates: what the simulator multiplies
a pair's simulated value by.
"""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "commbench" / "emulators" / "fabric_noise.json"
RATE = "200mbit"  # as bench/cluster_errors.py: the links, not 2 shared cores, limit a pair
QUANTILES = np.linspace(0, 1, 101)  # every percentile, the extremes kept


def commbench(*args: str, timeout: float = 1200) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "commbench"), *args], capture_output=True, text=True, timeout=timeout)


def measure(out: Path, runs: int, hosts: int) -> None:
    """Healthy runs: tournament quiet and busy, serial quiet and busy, each its own host set."""
    out.mkdir(parents=True, exist_ok=True)
    plan = [(mode, load, i) for i in range(runs) for mode in ("tournament", "serial") for load in ("quiet", "busy")
            if mode == "tournament" or i < max(1, runs // 3)]
    for mode, load, i in plan:
        s = "n" + secrets.token_hex(2)[:3]
        n = hosts if mode == "tournament" else min(hosts, 8)
        path, part = out / f"{mode}-{load}-{n}-{i}.jsonl", out / f"{mode}-{load}-{n}-{i}.jsonl.part.jsonl"
        if path.exists():
            continue
        up = commbench("hosts", "up", str(n), "--rate", RATE, "--set", s)
        if up.returncode:
            raise SystemExit(f"hosts up failed: {up.stderr.strip()}")
        spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if load == "busy" else None
        try:
            args = ["cluster", "--hosts", str(n), "--host-set", s, "--tests", "pairwise", "--bw-size", "256K",
                    "-o", str(part)]
            r = commbench(*args, *(["--serial"] if mode == "serial" else []))
            if r.returncode not in (0, 1):
                print(f"{path.name}: exit {r.returncode}: {r.stderr.strip()[-300:]}", file=sys.stderr)
                continue
            part.rename(path)
            print(f"{path.name}: done", flush=True)
        finally:
            if spinner:
                spinner.kill()
            commbench("hosts", "down", "--set", s)


def shares(path: Path) -> dict[str, list[float]]:
    """One run's healthy pairs as shares of the run's median: bandwidth (higher better) and latency."""
    rows = [json.loads(x) for x in path.read_text().splitlines()[1:] if x.strip()]
    pairs = [r for r in rows if r.get("test") == "pairwise" and "error" not in r]
    out: dict[str, list[float]] = {}
    serial = path.name.startswith("serial")
    for key, name in (("mb_s", "bw"), ("lat_us", "lat")):
        values = [float(r[key]) for r in pairs if isinstance(r.get(key), (int, float)) and r[key] > 0]
        if not values:
            continue
        med = statistics.median(values)
        out[f"{'alone' if serial else 'pair'}_{name}"] = [v / med for v in values]
    return out


def fit(out: Path) -> dict:
    runs = sorted(p for p in out.glob("*.jsonl") if not p.name.endswith(".part.jsonl"))
    if not runs:
        raise SystemExit(f"no runs in {out}: measure first (sudo python bench/noise_model.py {out})")
    model: dict = {"made_by": "bench/noise_model.py", "rate": RATE, "runs": {}, "quantiles": {}}
    pooled: dict[str, dict[str, list[float]]] = {}
    held: dict[str, list[float]] = {}  # tournament runs left out of the model: the check of the simulator
    for path in runs:
        load, index = path.name.split("-")[1], int(path.stem.rsplit("-", 1)[1])
        if path.name.startswith("tournament") and index % 2:
            held.setdefault(load, []).extend(shares(path)["pair_bw"])
            continue
        model["runs"][load] = model["runs"].get(load, 0) + 1
        for k, v in shares(path).items():
            pooled.setdefault(load, {}).setdefault(k, []).extend(v)
    model["check"] = {load: {"pairs": len(v), "bw": [round(float(q), 5) for q in np.quantile(v, QUANTILES)]}
                      for load, v in held.items()}
    for load, series in pooled.items():
        model["quantiles"][load] = {k: [round(float(q), 5) for q in np.quantile(v, QUANTILES)] for k, v in
                                    sorted(series.items())}
        model.setdefault("samples", {})[load] = {k: len(v) for k, v in sorted(series.items())}
    return model


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path)
    p.add_argument("--runs", type=int, default=6)
    p.add_argument("--hosts", type=int, default=12)
    p.add_argument("--fit", action="store_true")
    p.add_argument("--write", action="store_true")
    a = p.parse_args()
    if not a.fit:
        measure(a.out, a.runs, a.hosts)
    model = fit(a.out)
    for load, series in model["quantiles"].items():
        for k, q in series.items():
            print(f"{load:6} {k:10} n={model['samples'][load][k]:5}  p1 {q[1]:.3f}  p5 {q[5]:.3f}  p25 {q[25]:.3f}  "
                  f"p50 {q[50]:.3f}  p75 {q[75]:.3f}  p95 {q[95]:.3f}  p99 {q[99]:.3f}")
    if a.write:
        MODEL.write_text(json.dumps(model, indent=1) + "\n")
        print(f"written: {MODEL.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
