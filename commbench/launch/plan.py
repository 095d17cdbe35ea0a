"""The decided plan of a job, handed by the local launcher to the ranks it starts.

The launcher decides a job once (its options typed and checked, its points and loops), writes that
decision as JSON into a memory file (memfd) and passes the ranks its descriptor: a rank runs what the
launcher decided instead of parsing its command line again (the command line stays in ``ps`` for
whoever looks). The file starts with an HMAC-SHA256 of the decision keyed with the run's token, which
the launcher made for this run and hands only to its ranks; a rank takes a plan only if its parent is
the launcher that named itself (``COMMBENCH_LAUNCHER_PID``) and the HMAC holds, and the options in
it then go through their declared types and bounds again (``Options.from_plain``). A plan variable
left in the environment of anything else is refused in one line. Ranks that mpirun or srun starts get
no plan: they parse their command line, and every rank compares a digest of its decision at start
(``RunConfig.plan``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from typing import Any

from commbench.core.errors import UsageError

ENV_PLAN_FD = "COMMBENCH_PLAN_FD"
ENV_LAUNCHER = "COMMBENCH_LAUNCHER_PID"
MAX_PLAN = 64 << 20  # bytes: a plan is a few KB (a model's tensor sizes at most); anything larger is not one


def encode(job: str, body: dict[str, Any]) -> bytes:
    """The plan of ``job`` (``benchmark``, ``train``), to be sealed with the run's token (``seal``)."""
    return json.dumps({"job": job, "body": body}, sort_keys=True).encode()


def _mac(token: str, doc: bytes) -> bytes:
    return hmac.new(token.encode(), b"commbench plan\0" + doc, hashlib.sha256).hexdigest().encode()


def seal(doc: bytes, token: str) -> bytes:
    """An encoded plan as the ranks of the run with ``token`` receive it: its HMAC, a newline, the plan."""
    return _mac(token, doc) + b"\n" + doc


def memfd(plan: bytes) -> int:
    """A memory file holding ``plan``, for the ranks to inherit (the caller closes it once they started)."""
    fd = os.memfd_create("commbench-plan", 0)
    view = memoryview(plan)
    while view:
        view = view[os.write(fd, view):]
    return fd


def decode(data: bytes, token: str) -> tuple[str, dict[str, Any]]:
    """(job, body) of a sealed plan, once its HMAC under ``token`` holds."""
    mac, _, doc = data.partition(b"\n")
    if not token or not hmac.compare_digest(mac, _mac(token, doc)):
        raise UsageError(f"the plan handed to this rank was not made by this run's launcher (its HMAC does not hold "
                         f"with the run's token); unset {ENV_PLAN_FD} if it was not set by commbench's launcher")
    try:
        plan = json.loads(doc)
        job, body = plan["job"], plan["body"]
    except (ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"the plan the launcher handed this rank is unreadable ({exc}); unset {ENV_PLAN_FD} if "
                         "it was not set by commbench's launcher") from None
    if not isinstance(job, str) or not isinstance(body, dict):
        raise UsageError(f"the plan the launcher handed this rank is not a plan; unset {ENV_PLAN_FD} if it was not "
                         "set by commbench's launcher")
    return job, body


def received() -> tuple[str, dict[str, Any]] | None:
    """(job, body) of the plan the local launcher handed this process (``decode``); None where it handed
    none. The descriptor is read once and closed, and its variable dropped, so that nothing this rank
    starts inherits it."""
    fd_text = os.environ.pop(ENV_PLAN_FD, None)
    if fd_text is None:
        return None
    if os.environ.get(ENV_LAUNCHER) != str(os.getppid()):
        raise UsageError(f"{ENV_PLAN_FD} is set, but this process was not started by commbench's launcher: unset "
                         f"{ENV_PLAN_FD} (it hands a plan to the ranks it starts, and to nothing else)")
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
    from commbench.core.run.placement import ENV_TOKEN

    return decode(data, os.environ.get(ENV_TOKEN, ""))
