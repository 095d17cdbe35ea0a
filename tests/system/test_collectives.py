"""Every collective, table-driven: exact results over real ranks (every emulated algorithm, rank counts
that do not divide the sizes), the library's own (native) over MPI, the time on an in-process wire of
known delay and rate against the algorithm's formula, corruption counted, nccl-tests' bus factors,
other transports, and bad input as one line."""

from __future__ import annotations

import pytest
from conftest import commbench, grpc_cpp, mpiexec, table_rows

from commbench.benchmarks import registry
from commbench.benchmarks.allreduce import AllReduceBench
from commbench.core.output.results import read_runs

SWEEP = ["-b", "4", "-e", "300K", "-f", "9", "-i", "4", "-x", "1", "--validate"]  # counts 1, 9, ..., 59049
EXACT = [  # (benchmark, algorithm, ranks, extra flags)
    *[("allreduce", a, n, []) for a in AllReduceBench.algorithms for n in (2, 3, 4, 5)],
    *[("allgather", "ring", n, []) for n in (2, 3, 5)],
    *[("alltoall", "pairwise", n, ["-t", "tcp", "--poll", "busy"]) for n in (2, 3, 5)],
    *[("broadcast", "binomial", n, ["--root", str(root)]) for n, root in ((2, 1), (3, 0), (5, 3))],
]


@pytest.mark.parametrize("bench,algorithm,ranks,extra", EXACT, ids=lambda v: str(v) if not isinstance(v, list) else "")
def test_every_algorithm_is_exact(tmp_path, bench, algorithm, ranks, extra):
    cls = registry()[bench]
    out = tmp_path / "c.jsonl"
    r = commbench(bench, "--ranks", str(ranks), "-a", algorithm, *SWEEP, *extra, "-o", str(out))
    assert r.code == 0, r.err
    rows = read_runs(out)[0].rows
    unit = ranks if cls.blocks else 1  # counts of whole blocks where the output has one per rank
    assert [x["count"] for x in rows] == list(dict.fromkeys(max(unit, 9 ** i // unit * unit) for i in range(6)))
    assert all(x["wrong"] == 0 and x["algorithm"] == algorithm for x in rows), rows
    for x in rows:
        assert x["busbw"] == pytest.approx(x["algbw"] * cls.bus_factor(ranks))
        assert x["algbw"] == pytest.approx(4 * x["count"] / (x["time_us"] * 1e-6) / 1e9)
    if "--root" in extra:
        assert {x["root"] for x in rows} == {int(extra[1])}


@pytest.mark.parametrize("bench,ranks,extra", [("allreduce", 3, []), ("allgather", 3, []), ("alltoall", 3, []),
                                               ("broadcast", 4, ["--root", "2"])])
def test_native_over_mpi(bench, ranks, extra):
    r = mpiexec(ranks, bench, "-t", "mpi", "--ranks", str(ranks), "-a", "native", *extra, "-b", "12", "-e", "1M",
                "-f", "64", "-i", "5", "--validate")
    assert r.code == 0, r.err
    rows = table_rows(r.out)
    assert [row[5] for row in rows] == ["native"] * 3 and [row[-1] for row in rows] == ["0"] * 3, r.out






CPP = grpc_cpp()
OTHER = [("allreduce", ["-t", "grpc"]), ("allreduce", ["-t", "tcp", "--poll", "busy"]), ("alltoall", ["-t", "grpc"]),
         pytest.param("allreduce", *CPP.values, marks=CPP.marks, id="allreduce-grpc-cpp")]


@pytest.mark.parametrize("bench,transport", OTHER)
def test_over_other_transports(bench, transport):
    r = commbench(bench, *transport, "--ranks", "3", "-b", "1K", "-e", "64K", "-f", "8", "-i", "5", "--validate")
    assert r.code == 0, r.err
    assert [row[-1] for row in table_rows(r.out)] == ["0", "0", "0"]  # 1K, 8K, 64K


def test_allreduce_of_a_model_in_buckets(tmp_path):
    out = tmp_path / "ar.jsonl"
    r = commbench("allreduce", "--ranks", "4", "--algorithm", "ring", "--payload", "mobilenet_v2", "--bucket-mb",
                  "2", "-i", "3", "-x", "1", "--validate", "-o", str(out))
    assert r.code == 0, r.err
    (row,) = read_runs(out)[0].rows
    assert row["count"] * 4 == 14_019_488 and row["wrong"] == 0


@pytest.mark.parametrize("args,needle", [
    (["allreduce", "--ranks", "1"], "allreduce needs at least 2 ranks"),
    (["allreduce", "-b", "1M", "-e", "4K"], "need 4 <= -b"),
    (["broadcast", "--ranks", "3", "--root", "3"], "--root must be a rank, 0 to 2, not 3"),
    *[([name, "-a", "native", "-t", "grpc"], f"cannot do: native:{name}; transports that can: mpi")
      for name in ("allreduce", "allgather", "alltoall", "broadcast")],
])
def test_bad_input_is_one_line(args, needle):
    r = commbench(*args, "-i", "2")
    assert r.code == 2 and needle in r.err and r.err.count("\n") == 1 and "Traceback" not in r.err, r.err
