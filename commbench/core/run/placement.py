"""Who this process is: rank, size and where the rendezvous lives, read from the launcher's environment.

- the local launcher sets ``COMMBENCH_*`` (and hands rank 0 the listening socket);
- ``mpirun``/``mpiexec`` set ``OMPI_COMM_WORLD_*`` (Open MPI) or ``PMI_RANK``/``PMI_SIZE`` (MPICH);
  they name no hosts, so rank 0 tells the others its address through MPI itself (``mpi_bootstrap``);
- ``srun`` sets ``SLURM_PROCID``, ``SLURM_NTASKS`` and ``SLURM_STEP_NODELIST``: the rendezvous is on
  the first node of the step (python-hostlist keeps Slurm's order), on a free port rank 0 publishes
  with the random run token (core/run/token.py) unless ``--port`` says otherwise. With
  ``COMMBENCH_TOKEN`` exported, each step proves a token of its own made from it and the step's ids
  (a step's token opens no other step), and listens on a port made from that token: nobody without
  the token can work it out beforehand to take it.
A process with none of them was not launched, and the CLI starts the local launcher.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass

from commbench.core.errors import UsageError
from commbench.core.run import auth
from commbench.core.run.token import token_path

ENV_RANK, ENV_SIZE, ENV_ROOT, ENV_TOKEN, ENV_FD = (
    "COMMBENCH_RANK", "COMMBENCH_SIZE", "COMMBENCH_ROOT", "COMMBENCH_TOKEN", "COMMBENCH_RDV_FD")
ENV_NODE = "COMMBENCH_NODE"  # the emulated host a local rank runs in (commbench hosts)
ENV_NETNS = "COMMBENCH_NETNS"  # the network namespace the local launcher made for this run alone
ENV_WIREUP = "COMMBENCH_WIREUP"  # pmix, mpi or store: a fallback chosen (to compare them); else the best offered
WIREUPS = ("pmix", "mpi", "store")  # in the order preferred (core/run/world.py's wireup_of)
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
    token_file: str = ""  # srun without COMMBENCH_TOKEN: rank 0 publishes a random token and its port here

    @property
    def host_name(self) -> str:
        return self.node or socket.gethostname()


def detect(env: Mapping[str, str] | None = None, port: int = 0) -> Placement | None:
    """The placement the environment describes, or None when no launcher started us; a malformed
    launcher variable is a UsageError naming it."""
    env = os.environ if env is None else env
    forced = env.get(ENV_WIREUP, "")
    if forced and forced not in WIREUPS:
        raise UsageError(f"{ENV_WIREUP}={forced!r} is not one of {', '.join(WIREUPS)}: unset it to let commbench "
                         "use the launcher's own wire-up")
    p = _detect(env, port)
    if forced not in ("", "store") and (p is None or p.launcher == "local"):
        raise UsageError(f"{ENV_WIREUP}={forced}: commbench's own launcher offers only the store; "
                         "start the run with srun --mpi=pmix or mpirun for the launcher's wire-up")
    if p is not None and not 0 <= p.rank < p.size:
        raise UsageError(f"the launcher says this is rank {p.rank} of {p.size}: its rank and size variables do not "
                         "fit together; start the run again with mpirun, srun or plain commbench")
    return p


def _detect(env: Mapping[str, str], port: int) -> Placement | None:
    if ENV_RANK in env:
        host, _, p = env.get(ENV_ROOT, "").rpartition(":")
        fd = env.get(ENV_FD)
        size = _int(env, ENV_SIZE)
        return Placement(_int(env, ENV_RANK, hi=size - 1), size, host, _int({ENV_ROOT: p}, ENV_ROOT, hi=65535),
                         env.get(ENV_TOKEN, ""), "local", _int(env, ENV_FD) if fd else None, node=env.get(ENV_NODE, ""))
    if "OMPI_COMM_WORLD_RANK" in env:
        return Placement(_int(env, "OMPI_COMM_WORLD_RANK"), _int(env, "OMPI_COMM_WORLD_SIZE"), "", port,
                         env.get(ENV_TOKEN, ""), "mpirun", mpi_bootstrap=True)
    if ("PMI_RANK" in env) != ("PMI_SIZE" in env) and "SLURM_PROCID" not in env:
        _int(env, "PMI_SIZE" if "PMI_RANK" in env else "PMI_RANK")  # names the missing one
    if "PMI_RANK" in env and "PMI_SIZE" in env and "SLURM_PROCID" not in env:
        return Placement(_int(env, "PMI_RANK"), _int(env, "PMI_SIZE"), "", port, env.get(ENV_TOKEN, ""), "mpirun",
                         mpi_bootstrap=True)
    if "SLURM_PROCID" in env and "SLURM_STEP_ID" in env:
        return _slurm(env, port)
    if ENV_SIZE in env or ENV_ROOT in env:
        _int(env, ENV_RANK)  # commbench's own variables without the rank
    return None


def _int(env: Mapping[str, str], name: str, default: int | None = None, hi: int = 1 << 20) -> int:
    """A launcher variable that must hold a whole number in [0, hi]: a bad one is named, not a traceback."""
    text = env.get(name)
    if text is None and default is not None:
        return default
    if text is None:
        raise UsageError(f"the launcher variable {name} is not set though others of its launcher are: start the "
                         "run with mpirun, srun or plain commbench, or unset the stray variables")
    try:
        value = int(str(text).strip())
        if 0 <= value <= hi:
            return value
    except ValueError:
        pass
    raise UsageError(f"the launcher variable {name}={text!r} is not a whole number from 0 to {hi}: this process "
                     "was not started by mpirun, srun or commbench as they set it; unset it or start the run again")


def _slurm(env: Mapping[str, str], port: int) -> Placement:
    import hostlist

    text = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST", "")
    try:
        nodes = hostlist.expand_hostlist(text)
    except hostlist.BadHostlist:
        nodes = []
    if not nodes:
        raise UsageError(f"the launcher variable SLURM_STEP_NODELIST={text!r} names no nodes: run under srun, or "
                         "unset the stray SLURM_* variables")
    job, step = _int(env, "SLURM_JOB_ID", 0, 1 << 32), _int(env, "SLURM_STEP_ID", 0, 1 << 32)
    token = env.get(ENV_TOKEN, "")  # else rank 0 makes one and hands it out with its port (core/run/token.py)
    token_file = "" if token else str(token_path(env))
    if token:
        token = step_token(token, job, step)
        if not port:  # every rank works it out (no file says it); a stranger, without the token, cannot
            port = PORT_BASE + int(auth.derived(token, "port"), 16) % PORT_SPAN
    rank = _int(env, "SLURM_PROCID")
    me = env.get("SLURMD_NODENAME", "")
    if rank == 0 and me and me != nodes[0]:
        raise UsageError(f"rank 0 runs on {me}, not on the step's first node {nodes[0]}; use srun's default "
                         "block distribution (-m block) or set COMMBENCH_ROOT=host:port")
    root = env.get(ENV_ROOT, "")
    if root:
        host, _, p = root.rpartition(":")
        return Placement(rank, _int(env, "SLURM_NTASKS"), host, _int({ENV_ROOT: p}, ENV_ROOT, hi=65535), token,
                         "srun", node=me,
                         token_file=token_file)
    return Placement(rank, _int(env, "SLURM_NTASKS"), node_address(nodes[0]), port, token, "srun", node=me,
                     token_file=token_file)


def step_token(token: str, job: int, step: int) -> str:
    """The token a Slurm job step proves, made from the exported one: a token exported for many runs (an
    sbatch script's) gives each step its own, so nothing seen of one step (a gRPC method's name, a
    port) is any use in another."""
    return auth.derived(token, f"slurm step {job}.{step}")


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


STEP_END_DELAY = 1.0  # s for the other ranks to say what they saw before the step is ended


def end_stuck_step() -> None:
    """Under srun, after a peer failed this rank: end the job step (``scancel --signal=KILL``) a moment
    after this rank exits. srun waits for every task, and a stopped or hung one would hold the
    allocation until its time limit (mpirun ends the job when a rank exits non-zero; the local launcher
    kills a stopped rank itself). The delay lets the other ranks print their own line first; if every
    task has ended by then, the step is over and this does nothing."""
    import shutil

    job, step = os.environ.get("SLURM_JOB_ID", ""), os.environ.get("SLURM_STEP_ID", "")
    scancel = shutil.which("scancel")
    if not (job.isdigit() and step.isdigit() and "SLURM_PROCID" in os.environ and scancel):
        return
    with contextlib.suppress(OSError):
        subprocess.Popen(["sh", "-c", f'sleep {STEP_END_DELAY:g}; exec "$0" --quiet --signal=KILL {job}.{step}',
                          scancel], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
