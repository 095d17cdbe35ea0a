"""Where commbench writes. Every path a user names for output (``-o`` results, ``--drain-list``,
``--metrics``, ``payloads -o``, ``report -o`` and ``compare --output-dir`` folders) goes through here:

- only a regular file or a new name is written: a directory, FIFO, device or socket there is refused
  in one line (a FIFO would block the run, a device would take its rows; root would replace
  ``/dev/null``), and so is a symbolic link (a link left in a shared place would send the writes, root's
  too, anywhere: give the real path); files are opened with ``O_NOFOLLOW``, so a link planted between
  the check and the open is refused too;
- a file written whole (drain list, metrics, a payload profile, a report's page and figures) is
  written to a temporary file beside it and renamed into place: a reader sees the old file or the
  new one, never a part;
- a results file is written as it is measured (a killed run keeps its rows): ``.jsonl`` appended
  to, ``.csv`` replaced;
- a report folder is the user's own (not a link, not writable by others), since its files are
  replaced by name.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

from commbench.core.errors import ResultsError, UsageError


def kind_of(mode: int) -> str:
    """What a file that is not a regular one is, for a message: 'a directory', 'a FIFO', ..."""
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a device"),
                       (stat.S_ISBLK, "a device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return name
    return "not a regular file"


def check_target(path: str, what: str, fix: str, replace_link: bool = False) -> Path:
    """``path`` as a place to write: a regular file (not a symbolic link) or a new name in a directory
    that exists; else one UsageError naming ``what`` and ``fix``. ``replace_link``: a link there is
    taken as a name to replace (never followed): for files of a folder own_directory took."""
    p = Path(path)
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        st = None
    except OSError as exc:  # a name too long, a loop of links, a component not a directory
        raise UsageError(f"cannot write the {what} {path!r}: {exc.strerror}; {fix}") from None
    if st is not None and stat.S_ISLNK(st.st_mode):
        if replace_link:
            return p
        raise UsageError(f"the {what} {path!r} is a symbolic link: commbench writes through none (give the file's "
                         f"real path); {fix}")
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise UsageError(f"the {what} {path!r} is {kind_of(st.st_mode)}, not a regular file; {fix}")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise UsageError(f"cannot write the {what} {path!r}: directory {str(parent)!r} does not exist; {fix}")
    return p


def check_writable(path: str, what: str, fix: str) -> Path:
    """check_target, then really opened (root passes every access() check) and, if new, removed again:
    for a path checked before any rank starts."""
    p = check_target(path, what, fix)
    existed = p.exists()
    try:
        os.close(os.open(p, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_NOFOLLOW, 0o644))
    except OSError as exc:
        raise UsageError(f"cannot write the {what} {path!r}: {exc.strerror}; {fix}") from None
    if not existed:
        p.unlink()
    return p


def open_rows(path: Path, append: bool) -> int:
    """A results file's descriptor, for rows written as they are measured: appended to, or emptied
    first; never through a link. An error is ResultsError naming the file."""
    p = check_target(str(path), "results file", "choose another -o")
    try:
        return os.open(p, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | (os.O_APPEND if append else os.O_TRUNC), 0o644)
    except OSError as exc:
        raise ResultsError(f"cannot write results to {path}: {exc.strerror}") from None


def write_whole(path: str, data: bytes, what: str, fix: str, replace_link: bool = False) -> None:
    """``data`` as the whole of the file at ``path``, or nothing: written to a new temporary file beside
    it, then renamed into place, so a reader (Slurm, node_exporter) sees the old file or the new one,
    never a part. What is there must pass check_target (the rename replaces a link itself)."""
    p = check_target(path, what, fix, replace_link)
    try:
        fd, tmp = tempfile.mkstemp(dir=p.parent if str(p.parent) else ".", prefix=f".{p.name}.")
    except OSError as exc:
        raise UsageError(f"cannot write the {what} {path!r}: {exc.strerror}; {fix}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o644)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise UsageError(f"cannot write the {what} {path!r}: {exc.strerror}; {fix}") from None


def own_directory(out: Path, what: str, fix: str) -> None:
    """Make the folder ``out``, or take one that is this user's own: not a symbolic link, owned by this
    user, writable by nobody else (a folder another user can write into may hold links planted where
    commbench's files go)."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        st = os.lstat(out)
    except OSError as exc:
        raise UsageError(f"cannot make the {what} {str(out)!r}: {exc.strerror}; {fix}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise UsageError(f"the {what} {str(out)!r} is a symbolic link or not a directory; {fix}")
    if st.st_uid != os.geteuid():
        raise UsageError(f"the {what} {str(out)!r} belongs to uid {st.st_uid}, not to you; {fix} (commbench "
                         "writes only into a folder of your own)")
    if st.st_mode & 0o022:
        raise UsageError(f"the {what} {str(out)!r} can be written by others (mode {st.st_mode & 0o777:o}); "
                         f"{fix}, or chmod go-w it")
