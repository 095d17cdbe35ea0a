"""What else the machine is doing when a run starts: CPUs busy with other work, from /proc/stat."""

from __future__ import annotations

import os
import time


def _cpu_times() -> tuple[int, int] | None:
    """(busy, total) jiffies of all CPUs, or None where /proc/stat is not there."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


def _process_ticks(pids: list[int]) -> int:
    """CPU time (user + system, in the same clock ticks as /proc/stat) used so far by these processes."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
            total += int(fields[11]) + int(fields[12])  # utime, stime
        except (OSError, ValueError, IndexError):
            continue
    return total


class OtherWork:
    """CPUs' worth of work done by anything but the ``own`` processes (a run's ranks on this host) from
    its making to ``read``: what else the machine did meanwhile."""

    def __init__(self, own: list[int]) -> None:
        self.own, self.began = own, time.monotonic()
        self.a, self.pa = _cpu_times(), _process_ticks(own)

    def read(self) -> dict | None:
        """{"busy": 1.3, "cpus": 2, "seconds": 48.0}: the mean CPUs busy with other work, the CPUs the own
        processes may use together, over how long; None where /proc/stat cannot be read."""
        b, pb = _cpu_times(), _process_ticks(self.own)
        if self.a is None or b is None or b[1] <= self.a[1]:
            return None
        ncpu = os.cpu_count() or 1
        busy = max(0, (b[0] - self.a[0]) - (pb - self.pa))
        return {"busy": round(busy / (b[1] - self.a[1]) * ncpu, 2), "cpus": _usable(self.own) or ncpu,
                "seconds": round(time.monotonic() - self.began, 1)}


def busy_cpus(seconds: float = 0.2, exclude: list[int] | None = None) -> dict | None:
    """CPUs' worth of work done over ``seconds`` by anything but the ``exclude`` processes (the run's own
    ranks, which may spin in their launcher's barrier), and the CPUs those ranks may use together:
    {"busy": 1.3, "cpus": 2}; None where it cannot be read."""
    sample = OtherWork(exclude or [])
    time.sleep(seconds)
    got = sample.read()
    return got and {"busy": got["busy"], "cpus": got["cpus"]}


def _usable(pids: list[int]) -> int:
    """CPUs the run's ranks may use together (each may be bound to one: mpiexec --bind-to core)."""
    cpus: set[int] = set()
    for pid in pids or [0]:
        try:
            cpus |= os.sched_getaffinity(pid)
        except OSError:
            continue
    return len(cpus)


def crowded(cpu: dict | None, spinning: int) -> str | None:
    """A warning when ``spinning`` busy-polling ranks on this host and the work already there need more
    CPUs than there are: spinning ranks that share a core take turns by the scheduler's time slice,
    and small-message latency collapses (milliseconds, not microseconds)."""
    if not cpu or spinning <= 0 or cpu["busy"] + spinning <= cpu["cpus"] + 0.5:
        return None
    return (f"# warning: {cpu['busy']:.1f} of {cpu['cpus']} CPUs were busy with other work when the run started and "
            f"{spinning} ranks busy-poll here: ranks that share a core spin in turns and their numbers collapse; "
            "use --poll blocking, fewer ranks, or a quieter machine")
