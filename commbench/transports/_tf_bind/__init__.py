"""TensorFlow's servers on the run's address only: the bind() shim (bindshim.c), built and preloaded.

TensorFlow has no setting for the address its gRPC server listens on: it takes every interface.
A process that will start a TF server (``-t tf-grpc``, ``commbench train``) runs with bindshim.so in
LD_PRELOAD; ``confine()`` then names the address and port, just before the server starts, and the
shim turns TF's wildcard bind to that port into a bind to that address. ``preload()`` re-executes
the process with the shim when it lacks it (before any rank work, so launchers see the same pid).
The shim is compiled with cc on first use into ~/.cache/commbench/tf-bind (named by its source's hash).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

from commbench.core.errors import Unavailable

SOURCE = Path(__file__).with_name("bindshim.c")
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "commbench" / "tf-bind"
ENV_BIND, ENV_TRIED = "COMMBENCH_TF_BIND", "COMMBENCH_TF_BIND_REEXEC"


def library() -> Path:
    """The built shim (compiled now if needed); Unavailable without a C compiler."""
    out = CACHE / f"libcbbind-{hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:12]}.so"
    if out.exists():
        return out
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise Unavailable("keeping TensorFlow's server off other interfaces needs a C compiler to build a 40-line "
                          "bind() shim: apt-get install gcc")
    try:
        CACHE.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise Unavailable(f"cannot make the cache directory {CACHE} for TensorFlow's bind() shim: {exc.strerror}; "
                          "set XDG_CACHE_HOME to a writable directory") from None
    tmp = out.with_suffix(f".{os.getpid()}.tmp")
    p = subprocess.run([cc, "-O2", "-shared", "-fPIC", str(SOURCE), "-o", str(tmp), "-ldl"],
                       capture_output=True, text=True)
    if p.returncode:
        raise Unavailable(f"building {SOURCE.name} failed: {p.stderr.strip().splitlines()[-1:]}")
    tmp.replace(out)
    return out


def loaded() -> bool:
    try:
        return "libcbbind-" in Path("/proc/self/maps").read_text()
    except OSError:
        return False


def preload() -> None:
    """Make sure this process runs with the shim: re-execute it with LD_PRELOAD if it does not."""
    if loaded():
        return
    if os.environ.get(ENV_TRIED):
        raise Unavailable("TensorFlow's bind() shim did not load (LD_PRELOAD ignored here?): its server would "
                          "listen on every interface")
    lib = str(library())
    env = {**os.environ, ENV_TRIED: "1",
           "LD_PRELOAD": " ".join(x for x in (lib, os.environ.get("LD_PRELOAD", "")) if x)}
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, sys.orig_argv, env)


def confine(address: str, port: int) -> None:
    """TF's next wildcard bind to ``port`` binds ``address`` instead (the shim reads this at bind time)."""
    if not loaded():
        raise Unavailable("TensorFlow's bind() shim is not loaded in this process: its server would listen on "
                          "every interface")
    os.environ[ENV_BIND] = f"{address} {port}"


def exposure(address: str) -> None:
    """One line (rank 0) when the run's TF servers can be reached by other processes of this machine
    (or its network): TensorFlow's gRPC server has no authentication. Not said when the local launcher
    put the run in a network namespace of its own (as root), where only the run's processes are."""
    from commbench.core.errors import say
    from commbench.core.run.placement import ENV_NETNS

    if not os.environ.get(ENV_NETNS):
        where = "other processes of this machine" if address.startswith("127.") else f"anyone who reaches {address}"
        say(f"note: TensorFlow's servers have no authentication and {where} can run operations in them while "
            "the run lasts; as root the local launcher gives the run a network namespace of its own "
            "(docs/faults.md)")


def endpoints(world, key: str, port: int = 0) -> list[str]:
    """Every rank's TF server address ("host:port", in rank order), agreed under ``key``: this rank's
    server confined to the run's address, on ``port`` or one free now (TF binds it a moment later);
    rank 0 says who else can reach the cluster (``exposure``)."""
    addr = world.store.local_address
    if not port:
        with socket.socket() as s:
            s.bind((addr, 0))
            port = s.getsockname()[1]
    confine(addr, port)
    if world.rank == 0:
        exposure(addr)
    return world.allgather_json(key, f"{addr}:{port}")
