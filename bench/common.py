"""What every bench/vs_*.py shares, so that each comparison is like with like.

- ``Comparison``: rounds over points (a benchmark and size, ...); at each point the tools run one
  after another, each taking each place in turn over the rounds (``in_turn``), so that a drift of
  the machine's speed hits every tool alike. Every value is written as it is measured to a raw JSONL
  file: a metadata line (command, host, versions, the matched environment, the loops), then one line
  per tool, point and round, with its place in the round. Verdicts use the median of per-round ratios.
- ``osu_loops``: OSU 7.4's iteration and warm-up counts by benchmark kind and size, handed to every
  tool explicitly (commbench's ``-i``/``-x`` counts are never cut by its point cap).
- ``matched_env``: the environment every tool's processes get: the allocator settings commbench's
  ranks set for themselves (``MALLOC_TUNABLES``) and the same page backing.
- ``commbench_rows``: run a commbench command (under mpiexec if asked) and return its rows;
  ``imported``: another tool's output through commbench's importers (``commbench import``).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from commbench.core.measure.buffers import MALLOC_TUNABLES
from commbench.launch.local import mpiexec_env

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "commbench"
LARGE = 8192  # OSU's LARGE_MESSAGE_SIZE: above it, the large loop counts
OSU_LOOPS = {"latency": ((10000, 100), (1000, 10)),  # (iterations, warm-up) small, large: osu_util.h
             "bw": ((100, 10), (20, 2)),  # windows of 64
             "collective": ((1000, 100), (100, 10))}


def osu_loops(kind: str, size: int) -> tuple[int, int]:
    """(iterations, warm-up) OSU 7.4 runs at this size for this kind (latency, bw, collective)."""
    return OSU_LOOPS[kind][size > LARGE]


def matched_env(hugepages: str = "off", base: dict | None = None) -> dict:
    """The environment for every tool's processes: glibc's allocator as commbench's ranks set it, and
    huge pages off (numpy's madvise off, malloc not from huge pages) or on (numpy's madvise, malloc's
    hugetlb tunable with the mmap threshold at its maximum, so that large buffers come from the
    THP-aligned heap)."""
    env = dict(base if base is not None else os.environ)
    if hugepages == "on":
        env["GLIBC_TUNABLES"] = f"{MALLOC_TUNABLES}:glibc.malloc.hugetlb=1:glibc.malloc.mmap_threshold=33554432"
    else:
        env["GLIBC_TUNABLES"] = MALLOC_TUNABLES
        env["NUMPY_MADVISE_HUGEPAGE"] = "0"
    return env


def in_turn(tools: Sequence[str], r: int) -> tuple[str, ...]:
    """The tools in round r's order: each takes each place in turn over the rounds."""
    k = r % len(tools) if tools else 0
    return tuple(tools[k:]) + tuple(tools[:k])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def need(tool: str, package: str | None = None) -> None:
    """Install a Debian package for a missing tool (as root), or exit naming it."""
    if shutil.which(tool):
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        sys.exit(f"{tool} is missing: apt-get install {package or tool}")
    subprocess.run(["apt-get", "install", "-y", "-qq", package or tool], check=True, capture_output=True)


def parse_size(text: str) -> int:
    mult = {"K": 1 << 10, "M": 1 << 20}.get(text[-1:].upper(), 1)
    return int(text[:-1] if mult > 1 else text) * mult


def exact(sizes: Sequence[int]) -> str:
    """-m for exactly these sizes: a list, or MIN:MAX for one (a lone size is OSU's maximum: a sweep)."""
    return ",".join(map(str, sizes)) if len(sizes) > 1 else f"{sizes[0]}:{sizes[0]}"


def commbench_rows(args: Sequence[str], env: dict | None = None, mpiexec: Sequence[str] | None = None,
                   timeout: float = 1800) -> list[dict]:
    """Rows of ``commbench ARGS -o FILE`` (started by ``mpiexec`` if given: that launcher's command, with
    the environment the wheel's Open MPI needs here: root allowed, a TMPDIR of its own)."""
    with tempfile.TemporaryDirectory() as d, (mpiexec_env(env) if mpiexec else contextlib.nullcontext(env)) as menv:
        f = Path(d) / "r.jsonl"
        cmd = [*(mpiexec or []), str(BIN / "commbench"), *args, "-o", str(f)]
        p = subprocess.run(cmd, capture_output=True, text=True, env=menv, timeout=timeout)
        if p.returncode:
            sys.exit(f"{' '.join(cmd[:6])} ... failed ({p.returncode}):\n{p.stderr[-2000:]}")
        return [r for r in map(json.loads, f.read_text().splitlines()) if r.get("type") == "row"]


def imported(tool: str, text: str, **hints):
    """Another tool's output read by commbench's own importer (``commbench import``): its Imported, whose
    rows hold commbench's keys and units."""
    from commbench.importers import parser_of

    return parser_of(tool).parse(text, f"<{tool} output>", **hints)


def versions() -> dict:
    out = {"python": platform.python_version()}
    for mod in ("commbench", "numpy", "mpi4py", "grpc", "tensorflow"):
        try:
            from importlib.metadata import version

            out[mod] = version("grpcio" if mod == "grpc" else "tensorflow-cpu" if mod == "tensorflow" else mod)
        except Exception:  # noqa: BLE001 - not installed: not part of this comparison
            continue
    return out


class Comparison:
    """Rounds of tools over points, written raw as measured; medians and per-round ratios after.

    ``measure(tool, point)`` returns the tool's value at the point, or None where the tool does not
    apply there (it then takes no place in the round)."""

    def __init__(self, name: str, tools: Sequence[str], rounds: int, raw: Path | None = None,
                 about: dict | None = None) -> None:
        self.name, self.tools, self.rounds = name, tuple(tools), rounds
        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
        self.raw = raw or CACHE / "bench" / f"{name}-{stamp}.jsonl"
        self.raw.parent.mkdir(parents=True, exist_ok=True)
        self.values: dict[tuple[str, tuple], list[float]] = {}
        meta = {"type": "meta", "bench": name, "start": stamp, "command": [sys.executable, *sys.argv],
                "host": platform.node(), "platform": platform.platform(), "cpus": os.cpu_count(),
                "load": os.getloadavg(), "versions": versions(), "tools": list(self.tools), "rounds": rounds,
                "glibc_tunables": MALLOC_TUNABLES, "osu_loops": OSU_LOOPS, **(about or {})}
        self._file = self.raw.open("w")
        self._write(meta)

    def _write(self, obj: dict) -> None:
        self._file.write(json.dumps(obj) + "\n")
        self._file.flush()

    def run(self, points: Sequence[tuple], measure: Callable[[str, tuple], float | None]) -> None:
        t0 = time.monotonic()
        for r in range(self.rounds):
            for i, point in enumerate(points):
                place = 0
                for tool in in_turn(self.tools, r + i):
                    v = measure(tool, point)
                    if v is None:
                        continue
                    self.values.setdefault((tool, point), []).append(float(v))
                    self._write({"type": "value", "round": r, "point": list(point), "tool": tool, "place": place,
                                 "value": float(v), "t": round(time.monotonic() - t0, 3)})
                    place += 1
            print(f"{self.name}: round {r + 1}/{self.rounds} done ({time.monotonic() - t0:.0f} s)",
                  file=sys.stderr, flush=True)
        self._file.close()
        print(f"# raw values, one line per tool, point and round: {self.raw}")

    def has(self, tool: str, point: tuple) -> bool:
        return bool(self.values.get((tool, point)))

    def of(self, tool: str, point: tuple) -> list[float]:
        return self.values[(tool, point)]

    def median(self, tool: str, point: tuple) -> float:
        return statistics.median(self.of(tool, point))

    def per_round(self, num: str, den: str, point: tuple) -> list[float]:
        return [a / b for a, b in zip(self.of(num, point), self.of(den, point), strict=True)]

    def ratio(self, num: str, den: str, point: tuple) -> float:
        """The median of the per-round ratios num / den (a round's two values are close in time)."""
        return statistics.median(self.per_round(num, den, point))


RANK_VARS = ("COMMBENCH_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID")


def rank_processes(env_key: str | None = None, value: str | None = None, under=None) -> dict:
    """A run's rank processes by rank (psutil): commbench processes under the process ``under``
    (default: every process) whose environment has ``env_key`` = ``value`` (if given) and a rank
    variable of any launcher (not the launchers' own daemons); the first process seen per rank."""
    import psutil

    procs = under.children(recursive=True) if under is not None else psutil.process_iter()
    out: dict = {}
    for p in procs:
        try:
            if "commbench" not in " ".join(p.cmdline()[1:3]):  # python -m commbench, or its script
                continue
            env = p.environ()
        except (psutil.Error, OSError):
            continue
        if env_key is not None and env.get(env_key) != value:
            continue
        rank = next((env[v] for v in RANK_VARS if v in env), None)
        if rank is not None and rank.isdigit():
            out.setdefault(int(rank), p)
    return out
