"""The simulated fabric checked against emulated hosts: each scenario run twice, on emulated hosts
(``commbench hosts up``, network namespaces and tc, real TCP) and on its simulated twin (``cluster
--fabric sim``, SimGrid, the noise measured on emulated hosts), through the same planner and verdict;
the findings side by side. Root.

    sudo python bench/twins.py OUT [--only healthy,host,...] [--repeats 4]
    python bench/twins.py OUT --table

A twin is the same layout (hosts at 200 Mbit/s on one bridge, or racks of 4 whose uplinks carry one
host's rate, as bench/cluster_errors.py's), the same fault and the same options (``--tests pairwise
--bw-size 256K``; the topology given where there are racks). Hosts are compared by index (emulated
``cbhI.S``, simulated ``nI``).
"""

from __future__ import annotations

import argparse
import json
import re
import secrets
import subprocess
import sys
from pathlib import Path

BIN = Path(sys.executable).parent
RATE, SLOW = "200mbit", "100mbit"
# name: (hosts, racks, the fault: (kind, where by index / rack)), where chosen per repeat
SCENARIOS = {
    "healthy": (8, 1, []),
    "healthy-racks": (12, 3, []),
    "host": (8, 1, [("host", "{h}")]),
    "cable": (8, 1, [("cable", "{h}-{g}")]),
    "uplink": (12, 3, [("uplink", "1")]),
    "two-hosts": (8, 1, [("host", "{h}"), ("host", "{g}")]),
}


def commbench(*args: str, timeout: float = 1800) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "commbench"), *args], capture_output=True, text=True, timeout=timeout)


def findings(path: Path) -> list[str]:
    """A run's slow-* findings, hosts by index: 'slow-host 3', 'slow-link 1-5', 'slow-uplink rack1'."""
    rows = [json.loads(x) for x in path.read_text().splitlines()[1:] if x.strip()] if path.exists() else []
    out = []
    for r in rows:
        if r.get("test") != "finding" or not str(r.get("kind", "")).startswith("slow"):
            continue
        ends = [m.group(1) for x in (r.get("a"), r.get("b")) if x and (m := re.match(r"(?:cbh|n)(\d+)\b", str(x)))]
        where = "-".join(sorted(ends, key=int)) if ends else str(r.get("a"))
        out.append(f"{r['kind']} {where}")
    return sorted(out)


def twin(out: Path, name: str, index: int) -> dict:
    hosts, racks, faults = SCENARIOS[name]
    h, g = (index * 5 + 3) % hosts, (index * 7 + 1) % hosts
    g = g if g != h else (h + 1) % hosts
    planted = [(k, w.format(h=h, g=g)) for k, w in faults]
    flags, sim_faults = [], []
    for kind, where in planted:
        if kind == "host":
            flags += ["--rate-of", f"{where}={SLOW}"]
            sim_faults.append({"kind": "host", "at": f"n{where}", "share": 0.5})
        elif kind == "cable":
            a, b = where.split("-")
            flags += ["--cable", f"{a}-{b}={SLOW}"]
            sim_faults.append({"kind": "cable", "at": [f"n{a}", f"n{b}"], "share": 0.5})
        else:
            flags += ["--uplink-of", f"{where}={SLOW}"]
            sim_faults.append({"kind": "uplink", "at": f"rack{where}", "share": 0.5})
    base = f"{name}-{index}"
    args = ["--tests", "pairwise", "--bw-size", "256K"]
    # emulated
    s = "w" + secrets.token_hex(2)[:3]
    racked = ["--racks", str(racks), "--uplink", RATE] if racks > 1 else []
    up = commbench("hosts", "up", str(hosts), "--rate", RATE, "--set", s, *racked, *flags)
    if up.returncode:
        raise SystemExit(f"hosts up failed: {up.stderr.strip()}")
    emu = out / f"{base}.emulated.jsonl"
    emu.unlink(missing_ok=True)
    try:
        topo = ["--topology", f"/run/commbench-hosts.{s}.topology.conf"] if racks > 1 else []
        r = commbench("cluster", "--hosts", str(hosts), "--host-set", s, *args, *topo, "-o", str(emu))
        if r.returncode not in (0, 1):
            print(f"{base}: emulated exit {r.returncode}: {r.stderr.strip()[-300:]}", file=sys.stderr)
    finally:
        commbench("hosts", "down", "--set", s)
    # simulated
    spec = out / f"{base}.scenario.json"
    spec.write_text(json.dumps({"hosts": hosts, "racks": racks, "rate": RATE, **({"uplink": RATE} if racks > 1 else {}),
                                "noise": "quiet", "seed": index, "known": racks > 1, "faults": sim_faults}))
    sim = out / f"{base}.simulated.jsonl"
    sim.unlink(missing_ok=True)
    r = commbench("cluster", "--fabric", "sim", "--scenario", str(spec), *args, "-o", str(sim))
    if r.returncode not in (0, 1):
        print(f"{base}: simulated exit {r.returncode}: {r.stderr.strip()[-300:]}", file=sys.stderr)
    return {"scenario": base, "planted": [f"{k} {w}" for k, w in planted], "emulated": findings(emu),
            "simulated": findings(sim)}


def table(runs: list[dict]) -> str:
    lines = ["| scenario | planted | emulated hosts found | simulated twin found | same |", "|---|---|---|---|---|"]
    for r in runs:
        same = "yes" if r["emulated"] == r["simulated"] else "**no**"
        lines.append(f"| {r['scenario']} | {', '.join(r['planted']) or '-'} | {', '.join(r['emulated']) or '-'} | "
                     f"{', '.join(r['simulated']) or '-'} | {same} |")
    agree = sum(r["emulated"] == r["simulated"] for r in runs)
    return "\n".join(lines) + f"\n\n{agree} of {len(runs)} twins gave the same findings"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path)
    p.add_argument("--only", default=",".join(SCENARIOS))
    p.add_argument("--repeats", type=int, default=4)
    p.add_argument("--table", action="store_true")
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    log = a.out / "twins.jsonl"
    if not a.table:
        with log.open("a") as f:
            for i in range(a.repeats):
                for name in a.only.split(","):
                    got = twin(a.out, name, i)
                    f.write(json.dumps(got) + "\n")
                    f.flush()
                    print(json.dumps(got), flush=True)
    print(table([json.loads(x) for x in log.read_text().splitlines() if x.strip()]))


if __name__ == "__main__":
    main()
