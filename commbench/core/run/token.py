"""The run token under srun: random, made by rank 0, handed to the step's other ranks through a file
only this user can read, with the port of rank 0's rendezvous.

srun gives the ranks of a step nothing secret in common (job id, step id, user id and node list are
public), so no token can be derived from it, and a port derived from them is a port anyone can take
first. Rank 0 listens on a free port, then writes a fresh ``secrets.token_hex`` and that port to
``<dir>/slurm-<job>.<step>.token`` (directory 0700, file 0600, written whole and renamed into place);
the other ranks wait for it. ``<dir>`` is ``$COMMBENCH_TOKEN_DIR``, else ``~/.commbench/run-tokens``:
it must be the same directory on every node of the step (a shared home, as clusters have). A file
older than this process by more than ``STALE`` s is from an earlier step with the same ids (job ids
restart with a new cluster) and is ignored. Exporting ``COMMBENCH_TOKEN`` before srun skips all this.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from collections.abc import Mapping
from pathlib import Path

from commbench.core.errors import PeerError, UsageError

ENV_TOKEN_DIR = "COMMBENCH_TOKEN_DIR"
STALE = 120.0  # s before this process started


def token_path(env: Mapping[str, str]) -> Path:
    base = env.get(ENV_TOKEN_DIR) or str(Path.home() / ".commbench" / "run-tokens")
    return Path(base) / f"slurm-{env.get('SLURM_JOB_ID', '0')}.{env.get('SLURM_STEP_ID', '0')}.token"


def new() -> str:
    """A fresh run token."""
    return secrets.token_hex(16)


def publish(path: Path, token: str, port: int) -> None:
    """Rank 0: the run's token and its rendezvous port, written where the other ranks look for them."""
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if path.parent.stat().st_mode & 0o077:
            os.chmod(path.parent, 0o700)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(f"{token} {port}\n")
        os.replace(tmp, path)
    except OSError as exc:
        raise UsageError(f"cannot write the run token in {path.parent}: {exc.strerror}; set {ENV_TOKEN_DIR} to a "
                         "directory every node shares and can write (or export COMMBENCH_TOKEN)") from None


def fetch(path: Path, timeout: float, rank: int, host: str, started: float | None = None) -> tuple[str, int]:
    """Another rank: the token and port rank 0 published for this step, once they are there (``timeout``
    s at most)."""
    if started is None:
        import psutil

        started = psutil.Process().create_time()
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(OSError, ValueError):
            st = path.stat()
            if st.st_mtime >= started - STALE:
                token, _, port = path.read_text().strip().partition(" ")
                if len(token) == 32 and all(c in "0123456789abcdef" for c in token) and port.isdigit() \
                        and 0 < int(port) < 65536:
                    return token, int(port)
        if time.monotonic() > deadline:
            raise PeerError(f"rank {rank} on host {host}: no run token from rank 0 at {path} within {timeout:g} s; "
                            f"that directory must be shared by the step's nodes: set {ENV_TOKEN_DIR} to a shared "
                            "directory, or export COMMBENCH_TOKEN=$(openssl rand -hex 16) before srun")
        time.sleep(0.05)


def withdraw(path: Path) -> None:
    """Rank 0, at the end of the run: remove the token file."""
    with contextlib.suppress(OSError):
        path.unlink()
