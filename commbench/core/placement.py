"""Who this process is: rank, size and where the rendezvous lives, read from the launcher's environment.

- the local launcher sets ``COMMBENCH_*`` (and hands rank 0 the listening socket);
- ``mpirun``/``mpiexec`` set ``OMPI_COMM_WORLD_*`` (Open MPI) or ``PMI_RANK``/``PMI_SIZE`` (MPICH);
  they name no hosts, so rank 0 tells the others its address through MPI itself (``mpi_bootstrap``);
- ``srun`` sets ``SLURM_PROCID``, ``SLURM_NTASKS`` and ``SLURM_STEP_NODELIST``: the rendezvous is on
  the first node of the step (python-hostlist keeps Slurm's order), on a port derived from the
  job and step ids unless ``--port`` says otherwise.
A process with none of them was not launched, and the CLI starts the local launcher.
"""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass

from commbench.core.errors import UsageError

ENV_RANK, ENV_SIZE, ENV_ROOT, ENV_TOKEN, ENV_FD = (
    "COMMBENCH_RANK", "COMMBENCH_SIZE", "COMMBENCH_ROOT", "COMMBENCH_TOKEN", "COMMBENCH_RDV_FD")
ENV_NODE = "COMMBENCH_NODE"  # the emulated host a local rank runs in (commbench hosts)
PORT_BASE, PORT_SPAN = 20000, 20000


@dataclass(frozen=True)
class Placement:
    rank: int
    size: int
    root_host: str  # where rank 0's rendezvous listens ("" until the MPI bootstrap fills it in)
    root_port: int  # 0: inherited socket (local launcher) or a free port (MPI bootstrap)
    token: str
    launcher: str  # "local", "mpirun", "srun"
    listen_fd: int | None = None  # rank 0 under the local launcher inherits the listening socket
    node: str = ""  # this rank's node name as the launcher knows it (Slurm's node names)
    mpi_bootstrap: bool = False  # rank 0 sends root address and token to the others through MPI
    local_rank: int = 0

    @property
    def host_name(self) -> str:
        return self.node or socket.gethostname()


def detect(env: Mapping[str, str] | None = None, port: int = 0) -> Placement | None:
    """The placement the environment describes, or None when no launcher started us."""
    env = os.environ if env is None else env
    if ENV_RANK in env:
        host, _, p = env[ENV_ROOT].rpartition(":")
        fd = env.get(ENV_FD)
        return Placement(int(env[ENV_RANK]), int(env[ENV_SIZE]), host, int(p), env[ENV_TOKEN], "local",
                         int(fd) if fd else None, node=env.get(ENV_NODE, ""))
    if "OMPI_COMM_WORLD_RANK" in env:
        return Placement(int(env["OMPI_COMM_WORLD_RANK"]), int(env["OMPI_COMM_WORLD_SIZE"]), "", port,
                         env.get(ENV_TOKEN, ""), "mpirun", mpi_bootstrap=True,
                         local_rank=int(env.get("OMPI_COMM_WORLD_LOCAL_RANK", 0)))
    if "PMI_RANK" in env and "PMI_SIZE" in env and "SLURM_PROCID" not in env:
        return Placement(int(env["PMI_RANK"]), int(env["PMI_SIZE"]), "", port, env.get(ENV_TOKEN, ""), "mpirun",
                         mpi_bootstrap=True, local_rank=int(env.get("MPI_LOCALRANKID", 0)))
    if "SLURM_PROCID" in env and "SLURM_STEP_ID" in env:
        return _slurm(env, port)
    return None


def _slurm(env: Mapping[str, str], port: int) -> Placement:
    import hostlist

    nodes = hostlist.expand_hostlist(env.get("SLURM_STEP_NODELIST") or env["SLURM_JOB_NODELIST"])
    job, step = int(env.get("SLURM_JOB_ID", 0)), int(env.get("SLURM_STEP_ID", 0))
    port = port or PORT_BASE + (job * 17 + step) % PORT_SPAN
    token = env.get(ENV_TOKEN) or hashlib.sha256(
        f"commbench:{job}:{step}:{env.get('SLURM_JOB_UID', '')}:{','.join(nodes)}".encode()).hexdigest()[:32]
    rank = int(env["SLURM_PROCID"])
    me = env.get("SLURMD_NODENAME", "")
    if rank == 0 and me and me != nodes[0]:
        raise UsageError(f"rank 0 runs on {me}, not on the step's first node {nodes[0]}; use srun's default "
                         "block distribution (-m block) or set COMMBENCH_ROOT=host:port")
    root = env.get(ENV_ROOT, "")
    if root:
        host, _, p = root.rpartition(":")
        return Placement(rank, int(env["SLURM_NTASKS"]), host, int(p), token, "srun", node=me,
                         local_rank=int(env.get("SLURM_LOCALID", 0)))
    return Placement(rank, int(env["SLURM_NTASKS"]), node_address(nodes[0]), port, token, "srun", node=me,
                     local_rank=int(env.get("SLURM_LOCALID", 0)))


def node_address(name: str) -> str:
    """A Slurm node's address: its name if that resolves, else the NodeAddr Slurm has for it."""
    try:
        socket.getaddrinfo(name, None)
        return name
    except OSError:
        pass
    try:
        out = subprocess.run(["scontrol", "show", "node", name, "-o"], capture_output=True, text=True,
                             timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        out = ""
    for field in out.split():
        if field.startswith("NodeAddr="):
            return field.split("=", 1)[1]
    raise UsageError(f"cannot resolve the first node of the step, {name!r}, and scontrol does not know its "
                     "address; set COMMBENCH_ROOT=host:port")
