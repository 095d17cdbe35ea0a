"""A guard process: the bound on a C call that no thread of this process can interrupt.

MPI_Init, a launcher's fence and MPI_Finalize hold the GIL (mpi4py calls them without releasing it)
and wait for other ranks without a timeout, so a watchdog thread cannot run while they hang; under
ULFM a communicator's creation or shrink may wait for ever for a member that died. A
``sleep`` in a process of its own can: unless the block ends first, it prints the message on this
rank's stderr and kills the rank (SIGKILL: a signal handler would need the GIL too).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shlex
import signal
import subprocess
from collections.abc import Iterator

PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the guard, before it runs: SIGKILL when the process that started it dies."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


@contextlib.contextmanager
def guarded(message: str, timeout: float) -> Iterator[None]:
    """Kill this process after ``timeout`` s, saying ``message`` on stderr, unless the block ended first."""
    # the shell dies with this process (PR_SET_PDEATHSIG), so a rank killed meanwhile leaves no guard
    # holding the launcher's stderr open to speak for it later; the sleep holds none of it
    guard = subprocess.Popen(["sh", "-c", f"sleep {timeout:g} </dev/null >/dev/null 2>&1 && kill -0 {os.getpid()} && "
                              f"echo {shlex.quote(message)} >&2 && kill -9 {os.getpid()}"],
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True,
                             preexec_fn=_die_with_parent)
    try:
        yield
    finally:  # the whole group: a surviving `sleep` would hold the launcher's stderr pipe open
        os.killpg(guard.pid, signal.SIGKILL)
        guard.wait()
