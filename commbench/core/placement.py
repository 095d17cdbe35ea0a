"""Who this process is: rank, size and where the rendezvous lives, read from the launcher's environment.

The local launcher sets ``COMMBENCH_*``; mpirun and srun set their own variables. A process
with none of them is not part of a launched run, and the CLI starts the local launcher.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

ENV_RANK, ENV_SIZE, ENV_ROOT, ENV_TOKEN, ENV_FD = (
    "COMMBENCH_RANK", "COMMBENCH_SIZE", "COMMBENCH_ROOT", "COMMBENCH_TOKEN", "COMMBENCH_RDV_FD")


@dataclass(frozen=True)
class Placement:
    rank: int
    size: int
    root_host: str
    root_port: int  # 0: the rendezvous socket is inherited (local launcher) or still to be chosen
    token: str
    launcher: str  # "local", later "mpirun", "srun"
    listen_fd: int | None = None  # rank 0 under the local launcher inherits the listening socket


def detect(env: Mapping[str, str] | None = None) -> Placement | None:
    """The placement the environment describes, or None when no launcher started us."""
    env = os.environ if env is None else env
    if ENV_RANK in env:
        host, _, port = env[ENV_ROOT].rpartition(":")
        fd = env.get(ENV_FD)
        return Placement(int(env[ENV_RANK]), int(env[ENV_SIZE]), host, int(port), env[ENV_TOKEN], "local",
                         int(fd) if fd else None)
    return None
