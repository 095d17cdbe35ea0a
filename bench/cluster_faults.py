"""A rank of a `commbench cluster` run killed or stopped mid-run: how long the run goes on after it,
and what the findings say.

Starts a cluster run of 8 ranks on loopback under the local launcher, waits until ``--after`` rows are
written (4: round 1 of the tournament is in), sends the signal to rank ``--victim`` (4, or 0: the rank
that serves the rendezvous), and prints the seconds until the launcher exits, its exit status, the
stderr lines and the findings that name the victim. Run it from a tree (its working directory's
``commbench`` is the one run) to compare two commits.

    python bench/cluster_faults.py --signal STOP --runs 3
    cd /tmp/old && python /path/to/bench/cluster_faults.py --signal KILL --runs 3
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time

import psutil


def ranks(pid: int) -> dict[int, psutil.Process]:
    out = {}
    for child in psutil.Process(pid).children():
        with contextlib.suppress(KeyError, ValueError, psutil.Error):
            out[int(child.environ()["COMMBENCH_RANK"])] = child
    return out


def once(sig: signal.Signals, victim: int, after: int, timeout: float) -> tuple[float, int, str, str]:
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "cluster.jsonl")
        p = subprocess.Popen([sys.executable, "-m", "commbench", "cluster", "--np", "8", "--bw-size", "64K", "-W", "8",
                              "--bw-time", "0.8", "-i", "200", "-x", "20", "--tests", "pairwise,ring",
                              "--timeout", f"{timeout:g}", "-o", out],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        while not (os.path.exists(out) and open(out).read().count('"type": "row"') >= after):
            if p.poll() is not None:
                raise SystemExit(f"the run ended before {after} rows: {p.communicate()[1][-500:]}")
            time.sleep(0.05)
        them = ranks(p.pid)
        t0 = time.monotonic()
        them[victim].send_signal(sig)
        stdout, stderr = p.communicate(timeout=600)
        took = time.monotonic() - t0
        for q in them.values():
            with contextlib.suppress(psutil.Error):
                q.kill()
        return took, p.returncode, stdout, stderr


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--signal", choices=("KILL", "STOP"), default="STOP")
    ap.add_argument("--victim", type=int, default=4)
    ap.add_argument("--after", type=int, default=4, help="rows written before the signal")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=10.0)
    a = ap.parse_args()
    sig = getattr(signal, f"SIG{a.signal}")
    for n in range(1, a.runs + 1):
        took, rc, stdout, stderr = once(sig, a.victim, a.after, a.timeout)
        print(f"run {n}: SIG{a.signal} to rank {a.victim}: the launcher out {took:.1f} s after it, exit {rc}")
        name = f"/r{a.victim}"
        for line in [*stderr.splitlines(), *stdout.splitlines()]:
            if line.startswith("#   ") and name in line or line.startswith("commbench: ") and "rank" in line:
                print("   ", line[:300])
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
