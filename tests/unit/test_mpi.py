"""The mpi transport and mpirun launch, with the pip Open MPI wheel, as root too."""

import importlib.util
import os
import sys

import pytest

from commbench import cli
from commbench.core.run.mpi_env import decode_buffers, encode_buffers

pytest.importorskip("mpi4py")


def test_codec_never_unpickles():
    data = encode_buffers([b"ab", memoryview(b"cde"), bytearray(b"")])
    assert [bytes(b) for b in decode_buffers(data)] == [b"ab", b"cde", b""]
    import pickle

    with pytest.raises(ValueError):  # a pickle stream is not a commbench message
        decode_buffers(pickle.dumps([b"ab"]))
    with pytest.raises(TypeError):
        encode_buffers({"not": "buffers"})


def test_mpi_without_mpi4py(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "mpi4py", None)
    import commbench.core.run.mpi_env as me

    monkeypatch.setattr(me, "_MPI", None)
    real = importlib.util.find_spec
    monkeypatch.setattr("importlib.util.find_spec",
                        lambda name, *a: None if name.startswith("mpi4py") else real(name, *a))
    for k in list(os.environ):
        if k.startswith(("OMPI_", "PMI", "SLURM_", "COMMBENCH_")):
            monkeypatch.delenv(k)
    assert cli.main(["p2p-latency", "-t", "mpi"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pip install 'commbench[mpi]'" in err[0]


