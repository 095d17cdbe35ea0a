"""The run token under srun: random, made by rank 0, handed to the step's other ranks through a file
only this user can read, with the port of rank 0's rendezvous.

srun gives the ranks of a step nothing secret in common (job id, step id, user id and node list are
public), so no token can be derived from it, and a port derived from them is a port anyone can take
first. Rank 0 listens on a free port, then writes a fresh ``secrets.token_hex`` and that port to
``<dir>/slurm-<job>.<step>.token`` (directory 0700, file 0600, written whole and renamed into place);
the other ranks wait for it. Both trust the directory only if it is this user's own and closed to
others (never a link; it is refused, not chmodded), and a rank reads the file only if it is this
user's, 0600, and not a link. ``<dir>`` is ``$COMMBENCH_TOKEN_DIR``, else ``~/.commbench/run-tokens``:
it must be the same directory on every node of the step (a shared home, as clusters have). A file
older than this process by more than ``STALE`` s is from an earlier step with the same ids (job ids
restart with a new cluster) and is ignored. Exporting ``COMMBENCH_TOKEN`` before srun skips all this.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
import time
from collections.abc import Mapping
from pathlib import Path

from commbench.core.errors import PeerError, UsageError

ENV_TOKEN_DIR = "COMMBENCH_TOKEN_DIR"
STALE = 120.0  # s before this process started
LEFTOVER = 3600.0  # s: a token file this old is a dead run's (a rank 0 killed before it removed it)


def token_path(env: Mapping[str, str]) -> Path:
    base = env.get(ENV_TOKEN_DIR) or str(Path.home() / ".commbench" / "run-tokens")
    return Path(base) / f"slurm-{env.get('SLURM_JOB_ID', '0')}.{env.get('SLURM_STEP_ID', '0')}.token"


def new() -> str:
    """A fresh run token."""
    return secrets.token_hex(16)


def private_dir(d: Path) -> None:
    """Refuse a token directory anyone but this user could have put a file in: a symbolic link, another
    user's, or open to others (a run token is trusted only from a directory of its owner's own)."""
    try:
        st = os.lstat(d)
    except OSError as exc:
        raise UsageError(f"token directory {d}: {exc.strerror}") from None
    why = "is a symbolic link or not a directory" if not stat.S_ISDIR(st.st_mode) else \
        f"belongs to uid {st.st_uid}, not to this user" if st.st_uid != os.geteuid() else \
        f"is open to other users (mode {st.st_mode & 0o7777:o})" if st.st_mode & 0o077 else None
    if why:
        raise UsageError(f"token directory {d} {why}: set {ENV_TOKEN_DIR} to a directory of your own that every "
                         "node shares (it is made mode 0700), e.g. $HOME/.commbench/run-tokens")


def publish(path: Path, token: str, port: int) -> None:
    """Rank 0: the run's token and its rendezvous port, written where the other ranks look for them; token
    files of this user's earlier runs that died before removing theirs (older than ``LEFTOVER`` s) go."""
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot make the token directory {path.parent}: {exc.strerror}; set {ENV_TOKEN_DIR} to a "
                         "directory every node shares and can write (or export COMMBENCH_TOKEN)") from None
    private_dir(path.parent)
    try:
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(f"{token} {port}\n")
        os.replace(tmp, path)
    except OSError as exc:
        raise UsageError(f"cannot write the run token in {path.parent}: {exc.strerror}; set {ENV_TOKEN_DIR} to a "
                         "directory every node shares and can write (or export COMMBENCH_TOKEN)") from None
    old = time.time() - LEFTOVER
    for left in path.parent.glob("slurm-*.token"):
        with contextlib.suppress(OSError):
            if left != path and os.lstat(left).st_mtime < old:
                left.unlink()


def fetch(path: Path, timeout: float, rank: int, host: str, started: float | None = None) -> tuple[str, int]:
    """Another rank: the token and port rank 0 published for this step, once they are there (``timeout``
    s at most)."""
    if started is None:
        import psutil

        started = psutil.Process().create_time()
    deadline = time.monotonic() + timeout
    checked = False
    while True:
        if not checked and os.path.lexists(path.parent):
            private_dir(path.parent)  # rank 0 makes it: until then there is nothing to trust or refuse
            checked = True
        got = _read(path, started - STALE) if checked else None
        if got is not None:
            return got
        if time.monotonic() > deadline:
            raise PeerError(f"rank {rank} on host {host}: no run token from rank 0 at {path} within {timeout:g} s; "
                            f"that directory must be shared by the step's nodes: set {ENV_TOKEN_DIR} to a shared "
                            "directory, or export COMMBENCH_TOKEN=$(openssl rand -hex 16) before srun")
        time.sleep(0.05)


def _read(path: Path, fresh_from: float) -> tuple[str, int] | None:
    """(token, port) from the file rank 0 published, if it is there whole: a regular file of this user's,
    mode 0600, not older than ``fresh_from``, opened without following a link."""
    with contextlib.suppress(OSError, ValueError):
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd) as f:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077 \
                    or st.st_mtime < fresh_from:
                return None
            token, _, port = f.read(200).strip().partition(" ")
        if len(token) == 32 and all(c in "0123456789abcdef" for c in token) and port.isdigit() \
                and 0 < int(port) < 65536:
            return token, int(port)
    return None


def withdraw(path: Path) -> None:
    """Rank 0, at the end of the run: remove the token file."""
    with contextlib.suppress(OSError):
        path.unlink()
