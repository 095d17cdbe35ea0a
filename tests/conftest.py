"""Helpers: run commbench as a user does (a real process, the local launcher, real ranks)."""

from __future__ import annotations

import contextlib
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import settings

from commbench.launch.local import mpiexec_environ

# No time limit per generated example: this machine is shared, and a deadline is a timing assertion (two
# arithmetic tests exceeded hypothesis's 200 ms beside a training run); speed lives in bench/.
settings.register_profile("commbench", deadline=None)
settings.load_profile("commbench")

ENV = {k: v for k, v in os.environ.items() if not k.startswith(("COMMBENCH_", "SLURM_", "OMPI_", "PMI"))}


@dataclass
class Result:
    code: int
    out: str
    err: str


BIN = Path(sys.executable).parent


def mpi_env(tmp: str | Path) -> dict[str, str]:
    """The environment for one mpiexec run (the launcher's own, TMPDIR at tmp: a killed mpiexec leaves
    its session in $TMPDIR/ompi.<pid>, and a later one given the same pid stops on it, as in CI),
    oversubscribed."""
    return {**mpiexec_environ(tmp, ENV), "OMPI_MCA_rmaps_base_oversubscribe": "1"}


def mpiexec(n: int, *args: str, timeout: float = 180) -> Result:
    """n ranks of commbench under the wheel's mpiexec (root allowed, oversubscribed)."""
    with tempfile.TemporaryDirectory(prefix="mpiexec-") as tmp:
        p = subprocess.run([str(BIN / "mpiexec"), "--oversubscribe", "-n", str(n), str(BIN / "commbench"), *args],
                           capture_output=True, text=True, timeout=timeout, env=mpi_env(tmp))
    return Result(p.returncode, p.stdout, p.stderr)


def commbench(*args: str, timeout: float = 240, env: dict | None = None) -> Result:
    p = subprocess.run([sys.executable, "-m", "commbench", *args], capture_output=True, text=True,
                       timeout=timeout, env={**ENV, **(env or {})})
    return Result(p.returncode, p.stdout, p.stderr)


def spawn(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "commbench", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=ENV, **kw)


def free_port() -> int:
    """A port free a moment ago, with its successors (rank data ports) free too, taken from below the
    kernel's ephemeral range: a port-0 bind or an outgoing connection elsewhere on the machine can
    take an ephemeral port between this check and the test's bind (it did, in CI), never these."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for _ in range(200):
        port = random.randrange(max(1024, low - 12000), low - 8)
        if all(_free(port + k) for k in range(6)):
            return port
    raise RuntimeError("no free port range")


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def table_rows(out: str) -> list[list[str]]:
    return [line.split() for line in out.splitlines() if line and not line.startswith("#")]


@pytest.fixture
def tmp_out(tmp_path):
    return tmp_path


def _grpc_cpp_reason() -> str | None:
    """Why grpc-cpp cannot run here, or None. Where gRPC's C++ development files exist (CI installs
    them), the extension must be built and loadable: that is a failure, never a skip."""
    from commbench.core.errors import Unavailable
    from commbench.transports import _grpc_cpp

    try:
        _grpc_cpp.load()
        return None
    except Unavailable as exc:
        if _grpc_cpp.runtime_version() is not None:
            raise AssertionError(f"gRPC's C++ development files are installed but {exc}") from None
        return str(exc)


GRPC_CPP_REASON = _grpc_cpp_reason()


needs_grpc_cpp = pytest.mark.skipif(GRPC_CPP_REASON is not None, reason=GRPC_CPP_REASON or "")


def grpc_cpp(*args: str, before: tuple[str, ...] = ()):
    """A pytest.param of ``[*before, -t grpc-cpp, *args]``, skipped with the reason where it cannot run."""
    return pytest.param([*before, "-t", "grpc-cpp", *args], id="-".join([*before, "grpc-cpp", *args]),
                        marks=needs_grpc_cpp)


def srun_ranks(job: int, tokens: Path, *args: str, n: int = 2) -> tuple[list[subprocess.Popen], Path]:
    """``n`` ranks of commbench started as srun starts them (SLURM_* variables, no COMMBENCH_TOKEN),
    with ``args``; and the file where rank 0 publishes the token, once it is there (30 s at most)."""
    import time

    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "COMMBENCH_", "OMPI_", "PMI_"))}
    env.update(SLURM_JOB_ID=str(job), SLURM_STEP_ID="0", SLURM_NTASKS=str(n), SLURM_STEP_NODELIST="localhost",
               SLURM_JOB_UID=str(os.getuid()), COMMBENCH_TOKEN_DIR=str(tokens))
    ranks = [subprocess.Popen([sys.executable, "-m", "commbench", *args], env={**env, "SLURM_PROCID": str(r)},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(n)]
    path = tokens / f"slurm-{job}.0.token"
    deadline = time.monotonic() + 30
    while not path.exists():
        assert time.monotonic() < deadline, "rank 0 published no token"
        time.sleep(0.02)
    return ranks, path


RANK_VARS = ("COMMBENCH_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID")


def rank_processes(procs, need: dict | None = None) -> dict:
    """Rank -> process among ``procs`` (psutil processes): commbench processes whose environment has
    a launcher's rank variable and every item of ``need``; the first seen per rank."""
    import psutil

    ranks: dict = {}
    for q in procs:
        try:
            e = q.environ()
            if any(e.get(k) != v for k, v in (need or {}).items()) or "commbench" not in " ".join(q.cmdline()):
                continue
        except psutil.Error:
            continue
        rank = next((e[v] for v in RANK_VARS if v in e), None)
        if rank is not None:
            ranks.setdefault(int(rank), q)
    return ranks


def signal_a_rank(cmd: list[str], env: dict, victim: int, sig: int, out: Path,
                  limit: float = 60) -> tuple[float, Result, float]:
    """Start a run (``cmd`` writes its rows to ``out``), wait until its ranks are measuring, send ``sig``
    to rank ``victim`` (found by the environment mark every launcher passes on) and return the seconds
    until the launcher exited, its result, and the seconds until every other rank was out; whatever is
    left is killed."""
    import time
    import uuid

    import psutil

    mark = uuid.uuid4().hex
    p = subprocess.Popen(cmd, env={**env, "COMMBENCH_TEST_MARK": mark}, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    ranks: dict[int, psutil.Process] = {}
    deadline = time.monotonic() + 120
    while (len(ranks) < 2 or not (out.exists() and out.stat().st_size)) and time.monotonic() < deadline:
        ranks = {**rank_processes(psutil.process_iter(), {"COMMBENCH_TEST_MARK": mark}), **ranks}
        time.sleep(0.2)
    assert len(ranks) >= 2 and out.exists(), "the run did not start"
    time.sleep(2)  # measuring by now
    t0 = time.monotonic()
    ranks[victim].send_signal(sig)
    survivors = [q for r, q in ranks.items() if r != victim]
    out_at = None
    try:
        while p.poll() is None and time.monotonic() - t0 < limit:  # the output is short: no pipe fills meanwhile
            if out_at is None and not any(_running(q) for q in survivors):
                out_at = time.monotonic() - t0
            time.sleep(0.05)
        stdout, stderr = p.communicate(timeout=max(1.0, limit - (time.monotonic() - t0)))
    finally:
        for q in [*ranks.values()]:
            with contextlib.suppress(psutil.Error):
                q.kill()
        if p.poll() is None:
            p.kill()
    took = time.monotonic() - t0
    return took, Result(p.returncode, stdout, stderr), took if out_at is None else out_at


def _running(q) -> bool:
    import psutil

    try:
        return q.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


class Relay:
    """A man in the middle between a rank and the rendezvous: forwards both ways, handing each whole
    frame to ``up`` (the rank's) or ``down`` (rank 0's): (frame number, bytes) -> the bytes forwarded."""

    def __init__(self, port: int, up=lambda n, frame: frame, down=lambda n, frame: frame) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port, self.target, self.up, self.down = self.listener.getsockname()[1], port, up, down
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                rank, _ = self.listener.accept()
            except OSError:
                return
            root = None
            for _ in range(400):  # rank 0 not listening yet: the rank's connection waits for it
                try:
                    root = socket.create_connection(("127.0.0.1", self.target))
                    break
                except OSError:
                    time.sleep(0.05)
            if root is None:
                rank.close()
                continue
            # unsealed: the rank's hello; rank 0's challenge and proof
            threading.Thread(target=self._frames, args=(rank, root, self.up, 1), daemon=True).start()
            threading.Thread(target=self._frames, args=(root, rank, self.down, 2), daemon=True).start()

    @staticmethod
    def _frames(src: socket.socket, dst: socket.socket, edit, unsealed: int) -> None:
        from commbench.core.run.framing import HEADER, TAG, decode_header

        buf, n = bytearray(), 0
        try:
            while chunk := src.recv(1 << 16):
                buf += chunk
                while len(buf) >= HEADER.size:
                    _, jlen, blen = decode_header(bytes(buf[:HEADER.size]))
                    end = HEADER.size + jlen + blen + (TAG if n >= unsealed else 0)
                    if len(buf) < end:
                        break
                    dst.sendall(edit(n, bytes(buf[:end])))
                    del buf[:end]
                    n += 1
        except OSError:
            pass
        for s in (src, dst):  # shutdown: the other direction's thread may be in recv on it
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def close(self) -> None:
        self.listener.close()
