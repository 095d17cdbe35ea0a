"""The decided plan of a job, handed by the local launcher to the ranks it starts.

The launcher decides a job once (its options typed and checked, its points and loops), writes that
decision as JSON with its SHA-256 into a memory file (memfd) and passes the ranks its descriptor: a
rank runs what the launcher decided instead of parsing its command line again (the command line stays
in ``ps`` for whoever looks). A rank checks the digest before it trusts a byte of it. Ranks that
mpirun or srun starts get no plan: they parse their command line, and every rank compares a digest
of its decision at start (``RunConfig.plan``).
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

from commbench.core.errors import UsageError

ENV_PLAN_FD = "COMMBENCH_PLAN_FD"
MAX_PLAN = 64 << 20  # bytes: a plan is a few KB (a model's tensor sizes at most); anything larger is not one


def _digest(body: Any) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def encode(job: str, body: dict[str, Any]) -> bytes:
    """The plan of ``job`` (``benchmark``, ``train``) as the ranks receive it."""
    return json.dumps({"job": job, "body": body, "sha256": _digest([job, body])}, sort_keys=True).encode()


def memfd(plan: bytes) -> int:
    """A memory file holding ``plan``, for the ranks to inherit (the caller closes it once they started)."""
    fd = os.memfd_create("commbench-plan", 0)
    view = memoryview(plan)
    while view:
        view = view[os.write(fd, view):]
    return fd


def decode(data: bytes) -> tuple[str, dict[str, Any]]:
    """(job, body) of an encoded plan, checked against its digest."""
    try:
        doc = json.loads(data)
        job, body, digest = doc["job"], doc["body"], doc["sha256"]
    except (ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"the plan the launcher handed this rank is unreadable ({exc}); unset {ENV_PLAN_FD} if "
                         "it was not set by commbench's launcher") from None
    if not isinstance(job, str) or not isinstance(body, dict) or _digest([job, body]) != digest:
        raise UsageError(f"the plan the launcher handed this rank does not match its digest; unset {ENV_PLAN_FD} "
                         "if it was not set by commbench's launcher")
    return job, body


def received() -> tuple[str, dict[str, Any]] | None:
    """(job, body) of the plan the local launcher handed this process (``decode``); None where it handed
    none. The descriptor is read once and closed, and its variable dropped, so that nothing this rank
    starts inherits it."""
    fd_text = os.environ.pop(ENV_PLAN_FD, None)
    if fd_text is None:
        return None
    try:
        fd = int(fd_text)
        size = os.fstat(fd).st_size
        if size > MAX_PLAN:
            raise ValueError(f"{size} B, more than a plan")
        data = os.pread(fd, size, 0)
        os.close(fd)
    except (OSError, ValueError) as exc:
        raise UsageError(f"the plan the launcher handed this rank ({ENV_PLAN_FD}={fd_text}) is unreadable ({exc}); "
                         f"unset {ENV_PLAN_FD} if it was not set by commbench's launcher") from None
    return decode(data)
