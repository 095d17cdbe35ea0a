"""A guard process: the bound on a C call that no thread of this process can interrupt.

MPI_Init, a launcher's fence and MPI_Finalize hold the GIL (mpi4py calls them without releasing it)
and wait for other ranks without a timeout, so a watchdog thread cannot run while they hang. A
``sleep`` in a process of its own can: unless the block ends first, it prints the message on this
rank's stderr and kills the rank (SIGKILL: a signal handler would need the GIL too).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
from collections.abc import Iterator


@contextlib.contextmanager
def guarded(message: str, timeout: float) -> Iterator[None]:
    """Kill this process after ``timeout`` s, saying ``message`` on stderr, unless the block ended first."""
    guard = subprocess.Popen(["sh", "-c", f"sleep {timeout:g} && echo {shlex.quote(message)} >&2 && "
                              f"kill -9 {os.getpid()}"],
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True)
    try:
        yield
    finally:  # the whole group: a surviving `sleep` would hold the launcher's stderr pipe open
        os.killpg(guard.pid, signal.SIGKILL)
        guard.wait()
