"""Kill or stop one rank mid-run, under each launcher: how long until the others are gone, and do they
name the rank?

For each launcher (local, mpiexec, srun), signal (SIGKILL, SIGSTOP) and run, this starts a two-rank
``p2p-latency`` that would run for hours, waits until both ranks are in their timed loop, sends the
signal to one rank (rank 1 in even runs, rank 0, which serves the rendezvous, in odd ones), and
measures the seconds from the signal until every other rank has exited and until the launcher has,
and whether the survivors' stderr names the signalled rank. The target: survivors out within
--timeout + 2 s, naming it. Rows go to a JSONL file as they are measured.

    python bench/faults.py --runs 10 --timeout 10                 # local and mpiexec
    SLURM_CONF=/tmp/cbslurm/slurm.conf python bench/faults.py --launchers srun   # on a Slurm cluster
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psutil
from common import BIN, CACHE, rank_processes

from commbench.launch.local import mpiexec_environ

MARK = "COMMBENCH_FAULT_RUN"


def ranks_of(mark: str) -> dict[int, psutil.Process]:
    """The run's rank processes (their environment carries the mark) by rank."""
    return rank_processes(MARK, mark)


def one(launcher: str, sig: signal.Signals, victim: int, timeout: float, transport: str) -> dict:
    mark = uuid.uuid4().hex[:12]
    bench = ["p2p-latency", "-t", transport, "-m", "8:8", "-i", "10000000", "-x", "10", "--timeout", f"{timeout:g}"]
    tmp = tempfile.mkdtemp(prefix="cb-faults-")
    out = Path(tmp) / "rows.jsonl"
    bench += ["-o", str(out)]
    env = {**os.environ, MARK: mark}
    if launcher == "local":
        cmd = [str(BIN / "commbench"), *bench]
    elif launcher == "mpiexec":
        env = {**mpiexec_environ(tmp, env), "OMPI_MCA_rmaps_base_oversubscribe": "1"}
        cmd = [str(BIN / "mpiexec"), "-n", "2", str(BIN / "commbench"), *bench]
    else:
        cmd = ["srun", "-n", "2", "--mpi=pmix", str(BIN / "commbench"), *bench]
    t_start = time.monotonic()
    launch = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    ranks: dict[int, psutil.Process] = {}
    while len(ranks) < 2 and launch.poll() is None and time.monotonic() - t_start < 60:
        ranks = ranks_of(mark)
        time.sleep(0.1)
    if len(ranks) < 2:
        launch.kill()
        return {"launcher": launcher, "signal": sig.name, "victim": victim, "error": "ranks not found",
                "stderr": launch.communicate()[1][-300:]}
    while not (out.exists() and out.stat().st_size) and launch.poll() is None and time.monotonic() - t_start < 120:
        time.sleep(0.1)  # rank 0 opens the results file once every rank has joined and agreed on the plan
    time.sleep(2)  # both in the timed loop by now
    survivors = {r: p for r, p in ranks.items() if r != victim}
    t0 = time.monotonic()
    ranks[victim].send_signal(sig)
    gone: dict[int, float] = {}
    t_launcher = None
    limit = t0 + timeout + 30
    while time.monotonic() < limit and (len(gone) < len(survivors) or t_launcher is None):
        for r, p in survivors.items():
            if r not in gone and (not p.is_running() or p.status() == psutil.STATUS_ZOMBIE):
                gone[r] = time.monotonic() - t0
        if t_launcher is None and launch.poll() is not None:
            t_launcher = time.monotonic() - t0
        time.sleep(0.02)
    for p in ranks.values():  # whatever is left (a stopped rank that no launcher reaped)
        with contextlib.suppress(psutil.Error):
            p.kill()
    if launch.poll() is None:
        launch.kill()
    err = launch.communicate()[1]
    named = [line.strip() for line in err.splitlines()  # commbench's line, or the launcher's (srun: "task 0: Killed")
             if f"rank {victim} " in line or f"task {victim}: " in line]
    return {"launcher": launcher, "transport": transport, "signal": sig.name, "victim": victim, "timeout": timeout,
            "survivors_s": round(max(gone.values()), 2) if len(gone) == len(survivors) else None,
            "launcher_s": round(t_launcher, 2) if t_launcher is not None else None,
            "named": bool(named), "line": (named or err.strip().splitlines()[-1:] or [""])[0][:300],
            "lines": len(err.strip().splitlines())}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--timeout", type=float, default=10.0)
    ap.add_argument("--launchers", default="local,mpiexec")
    ap.add_argument("--transport", default="tcp")
    ap.add_argument("--signals", default="SIGKILL,SIGSTOP")
    ap.add_argument("--raw", type=Path, default=None)
    a = ap.parse_args()
    raw = a.raw or CACHE / "bench" / f"faults-{time.strftime('%Y%m%d-%H%M%S')}.jsonl"
    raw.parent.mkdir(parents=True, exist_ok=True)
    rows = []
    with raw.open("a") as f:
        for launcher in a.launchers.split(","):
            for sig in (signal.Signals[s] for s in a.signals.split(",")):
                for i in range(a.runs):
                    row = one(launcher, sig, i % 2 == 0 and 1 or 0, a.timeout, a.transport)
                    rows.append(row)
                    f.write(json.dumps(row) + "\n")
                    f.flush()
                    print(json.dumps(row), flush=True)
    bound = a.timeout + 2
    print(f"\n# survivors out within --timeout + 2 = {bound:g} s, naming the rank; raw: {raw}")
    print("launcher  signal   runs  survivors s (median / max)  launcher s (max)  within  named")
    for launcher in a.launchers.split(","):
        for sig in a.signals.split(","):
            rs = [r for r in rows if r["launcher"] == launcher and r["signal"] == sig]
            s = [r["survivors_s"] for r in rs if r.get("survivors_s") is not None]
            lt = [r["launcher_s"] for r in rs if r.get("launcher_s") is not None]
            within = sum(1 for x in s if x <= bound)
            print(f"{launcher:<9} {sig:<8} {len(rs):>4}  {statistics.median(s) if s else float('nan'):>10.2f} / "
                  f"{max(s) if s else float('nan'):<12.2f}  {max(lt) if lt else float('nan'):>15.2f}  "
                  f"{within:>3}/{len(rs):<3} {sum(r.get('named', False) for r in rs):>3}/{len(rs)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
