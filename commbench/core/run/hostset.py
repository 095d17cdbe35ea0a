"""The names of one set of emulated hosts (``commbench hosts up --set S``), so that two sets (two
users, two test runs) never touch each other's namespaces, links, addresses or state.

The default set (``S`` empty) keeps the plain names: hosts ``cbh0``..., bridge ``cbbr0``, subnet
10.77.0.0/24, the root namespace's name ``cbroot``. Set ``S`` adds ``.S`` to host and namespace
names (``cbh5.t1``) and ``S`` inside link names (``cbt1v5``; Linux allows 15 characters), and gets a
subnet of its own (10.77.X.0/24, X chosen at ``up`` and kept in the set's state file).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from commbench.core.errors import UsageError

ENV_SET = "COMMBENCH_HOSTS_SET"
SET_RE = re.compile(r"^[a-z0-9]{1,4}$")
STATE_DIR = Path(os.environ.get("COMMBENCH_HOSTS_STATE_DIR", "/run"))


def check_set(name: str) -> str:
    """A set name: empty (the default set) or 1-4 lower-case letters and digits."""
    if name and not SET_RE.match(name):
        raise UsageError(f"host set {name!r}: use 1 to 4 lower-case letters or digits (e.g. t1), or none for "
                         "the default set")
    return name


def default_set() -> str:
    """The set named by COMMBENCH_HOSTS_SET (what ``--host-set`` defaults to), else the default set."""
    return os.environ.get(ENV_SET, "")


def suffix(s: str) -> str:
    return f".{s}" if s else ""


def host_name(i: int, s: str = "") -> str:
    return f"cbh{i}{suffix(s)}"


def link_name(kind: str, i: int | str, s: str = "") -> str:
    """A link of set s: kind v (host's root end), e (host's end), br (rack bridge), u/s (uplink's rack and
    spine ends), sp (spine bridge)."""
    return f"cb{s}{kind}{i}"


def root_netns(s: str = "") -> str:
    """The name a set gives this machine's own namespace, where its links meet (--traffic captures there)."""
    return f"cbroot{suffix(s)}"


def state_path(s: str = "") -> Path:
    return STATE_DIR / f"commbench-hosts{suffix(s)}.json"


def host_pattern(s: str = "") -> re.Pattern:
    """The namespace names of set s (and of no other set)."""
    return re.compile(rf"^cbh(\d+){re.escape(suffix(s))}$")
