"""How ranks meet (fast tier): the PMIx client's structures against PMIx's ABI, which wire-up a
launch gets, and a peer's wire-up record checked before use. The launches themselves: test_mpi.py
(mpiexec) and test_slurm.py (srun --mpi=pmix)."""

import contextlib
import ctypes
import json
import subprocess
import sys
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from commbench.core.errors import PeerError, UsageError
from commbench.core.run import pmix
from commbench.core.run.placement import Placement, detect
from commbench.core.run.world import _fields, wireup_of


def test_structures_match_pmix_abi():
    """pmix_common.h (PMIx 4 and 5): pmix_proc_t 260 bytes, rank at 256; pmix_value_t 32, its data at 8;
    pmix_info_t 552, flags at 512, value at 520 (sizeof/offsetof printed by a C program on this machine)."""
    assert (ctypes.sizeof(pmix.Proc), pmix.Proc.rank.offset) == (260, 256)
    assert (ctypes.sizeof(pmix.Value), pmix.Value.data.offset) == (32, 8)
    assert (ctypes.sizeof(pmix.Info), pmix.Info.flags.offset, pmix.Info.value.offset) == (552, 512, 520)


def place(launcher: str, bootstrap: bool = False) -> Placement:
    return Placement(0, 2, "", 0, "", launcher, mpi_bootstrap=bootstrap)


@pytest.mark.parametrize("launcher, bootstrap, env, want", [
    ("local", False, {}, "store"),
    ("local", False, {"PMIX_NAMESPACE": "x"}, "store"),  # a stray variable does not make a launcher
    ("srun", False, {}, "store"),  # srun --mpi=none
    ("srun", False, {"PMIX_NAMESPACE": "slurm.pmix.1.0"}, "pmix"),
    ("mpirun", True, {"PMIX_NAMESPACE": "prterun-vm-1@1"}, "pmix"),
    ("mpirun", True, {}, "mpi"),  # MPICH's hydra: PMI, not PMIx
    ("mpirun", True, {"PMIX_NAMESPACE": "p", "COMMBENCH_WIREUP": "mpi"}, "mpi"),
    ("mpirun", True, {"PMIX_NAMESPACE": "p", "COMMBENCH_WIREUP": "store"}, "store"),
])
def test_the_launchers_own_wireup_is_preferred(launcher, bootstrap, env, want):
    assert wireup_of(place(launcher, bootstrap), env) == want


@pytest.mark.parametrize("env, says", [
    ({"COMMBENCH_WIREUP": "gossip"}, "is not one of pmix, mpi, store"),
    ({"COMMBENCH_WIREUP": "pmix"}, "commbench's own launcher offers only the store"),
    ({"COMMBENCH_WIREUP": "mpi", "COMMBENCH_RANK": "0", "COMMBENCH_SIZE": "2", "COMMBENCH_ROOT": "h:1"},
     "offers only the store"),
])
def test_a_wireup_that_cannot_be_had_is_named(env, says):
    with pytest.raises(UsageError, match=says):
        detect(env)


def test_asking_srun_without_pmix_for_pmix_is_named():
    with pytest.raises(UsageError, match="this launch offers store"):
        wireup_of(place("srun"), {"COMMBENCH_WIREUP": "pmix"})


def test_an_unreachable_pmix_server_is_one_line():
    """PMIx's variables without its server (copied into a shell): the real library says so, and the
    fix is named. In a process of its own: PMIx_Init leaves the library's state behind."""
    code = ("from commbench.core.run.pmix import Client\n"
            "from commbench.core.errors import UsageError\n"
            "try:\n    Client(2)\nexcept UsageError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={"PATH": "/usr/bin:/bin", "PMIX_NAMESPACE": "stray"})
    assert "PMIx server does not answer" in out.stdout and "srun --mpi=pmix or mpirun" in out.stdout, out


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                           lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3),
                           max_leaves=8)


@given(st.one_of(json_values.map(json.dumps), st.text(max_size=30),
                 st.fixed_dictionaries({"host": st.text(max_size=5), "addr": st.text(max_size=5)}).map(json.dumps)))
def test_a_peers_wireup_record_is_checked(text):
    """What another rank put is used only with the fields and types expected; anything else is that
    peer's fault, named, never a traceback."""
    try:
        got = _fields(text, {"host": str, "addr": str}, "rank 3's host")
    except PeerError as exc:
        assert "rank 3's host" in str(exc)
    else:
        assert isinstance(got["host"], str) and isinstance(got["addr"], str)


GUARDED = ("import sys, time\nfrom commbench.core.run.guard import guarded\n"
           "with guarded('commbench: rank 3 on host n1: stuck', float(sys.argv[1])):\n"
           "    time.sleep(float(sys.argv[2]))\nprint('returned')\n")


@pytest.mark.parametrize("bound, takes, killed", [(0.5, 30, True), (30, 0.1, False)])
def test_a_guarded_call_that_outlasts_its_bound_ends_the_rank_saying_so(bound, takes, killed):
    """The bound on a C call no thread can interrupt (MPI_Init, a fence, MPI_Finalize): a process of
    its own kills the rank and names it; a call that returns in time leaves no guard behind."""
    out = subprocess.run([sys.executable, "-c", GUARDED, str(bound), str(takes)], capture_output=True, text=True,
                         timeout=20)
    if killed:
        assert out.returncode == -9 and "rank 3 on host n1: stuck" in out.stderr and not out.stdout, out
    else:
        assert out.returncode == 0 and out.stdout == "returned\n" and not out.stderr, out


def test_mpi_finalize_is_skipped_once_a_rank_died(monkeypatch):
    """After ULFM shrank the world around a dead rank, Open MPI's MPI_Finalize may wait for it forever
    (seen under mpiexec --with-ft ulfm): the rank leaves without it, so MPI is never imported here."""
    from commbench.core.run import mpi_env

    monkeypatch.setattr(mpi_env, "_base", ["the shrunk world"])
    monkeypatch.setattr(mpi_env, "mpi", lambda: pytest.fail("MPI_Finalize called after a shrink"))
    assert mpi_env.finalize() is False


def test_an_mpi_call_that_waits_for_every_member_is_bounded_under_ulfm_only(monkeypatch):
    """Under ULFM a communicator's creation or shrink may wait for ever for a member that died; it runs
    under a guard of the run's timeout plus the detector's (+10 s). Without ULFM a death ends the job,
    and no guard is started."""
    from commbench.core.run import mpi_env

    limits = []
    monkeypatch.setattr(mpi_env, "guarded", lambda message, limit: limits.append((message, limit)) or
                        contextlib.nullcontext())
    monkeypatch.setattr(mpi_env, "_exit", {"who": "rank 3 on host n1", "within": 10.0})
    for k in ("OMPI_MCA_mpi_ft_enable", "OMPI_MCA_mpi_ft_detector", "OMPI_MCA_mpi_ft_detector_timeout"):
        monkeypatch.delenv(k, raising=False)
    with mpi_env.bounded("MPI_Comm_shrink"):
        pass
    assert limits == []
    monkeypatch.setenv("OMPI_MCA_mpi_ft_enable", "1")
    monkeypatch.setenv("OMPI_MCA_mpi_ft_detector", "true")
    monkeypatch.setenv("OMPI_MCA_mpi_ft_detector_timeout", "60")
    with mpi_env.bounded("MPI_Comm_shrink"):
        pass
    (message, limit), = limits
    assert limit == 80 and "rank 3 on host n1: MPI_Comm_shrink had not returned after 80 s" in message
    assert mpi_env.detector_timeout({"OMPI_MCA_mpi_ft_detector_timeout": "x"}) == 10.0


def test_a_guard_ends_with_the_rank_it_guards():
    """A rank killed inside a guarded call (a peer's SIGKILL, the launcher's) leaves no guard behind to
    speak for it later, nor holding the launcher's stderr open until its bound."""
    code = ("import time\nfrom commbench.core.run.guard import guarded\n"
            "with guarded('commbench: rank 3 on host n1: stuck', 30):\n    time.sleep(60)\n")
    p = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True)
    time.sleep(1.0)
    p.kill()
    _, err = p.communicate(timeout=10)  # EOF at once: no guard holds the pipe
    assert err == "", err
