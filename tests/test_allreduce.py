"""The all-reduce emulator: every algorithm equals numpy's sum for 2..5 ranks, nccl-tests' formulas."""

import pytest
from conftest import commbench, grpc_cpp, table_rows

from commbench.benchmarks.allreduce import AllReduceBench
from commbench.core.results import read_runs

ALGOS = ["ring", "recursive-doubling", "tree", "reduce-bcast"]


@pytest.mark.parametrize("algorithm", ALGOS)
@pytest.mark.parametrize("ranks", [2, 3, 4, 5])
def test_every_algorithm_sums_exactly(tmp_path, algorithm, ranks):
    out = tmp_path / "ar.jsonl"
    # sizes include counts that do not divide by the rank count (ring chunks of unequal length)
    r = commbench("allreduce", "--ranks", str(ranks), "-a", algorithm, "-b", "4", "-e", "300K", "-f", "9",
                  "-i", "4", "-x", "1", "--validate", "-o", str(out))
    assert r.code == 0, r.err
    rows = read_runs(out)[0].rows
    assert [x["count"] for x in rows] == [1, 9, 81, 729, 6561, 59049]
    assert all(x["wrong"] == 0 for x in rows)
    for x in rows:
        assert x["busbw"] == pytest.approx(x["algbw"] * 2 * (ranks - 1) / ranks)
        assert x["algbw"] == pytest.approx(4 * x["count"] / (x["time_us"] * 1e-6) / 1e9)


def test_bus_factor():
    assert [AllReduceBench.bus_factor(n) for n in (2, 4, 8)] == [1.0, 1.5, 1.75]


@pytest.mark.parametrize("transport", [["-t", "grpc"], ["-t", "tcp", "--poll", "busy"], grpc_cpp()])
def test_ring_over_other_transports(transport):
    r = commbench("allreduce", *transport, "--ranks", "3", "-b", "1K", "-e", "64K", "-f", "8", "-i", "5",
                  "--validate")
    assert r.code == 0, r.err
    assert [row[-1] for row in table_rows(r.out)] == ["0", "0", "0"]  # 1K, 8K, 64K


def test_model_payload_with_buckets(tmp_path):
    out = tmp_path / "ar.jsonl"
    r = commbench("allreduce", "--ranks", "4", "--algorithm", "ring", "--payload", "mobilenet_v2", "--bucket-mb",
                  "2", "-i", "3", "-x", "1", "--validate", "-o", str(out))
    assert r.code == 0, r.err
    (row,) = read_runs(out)[0].rows
    assert row["count"] * 4 == 14_019_488 and row["wrong"] == 0


@pytest.mark.parametrize("args,needle", [
    (["--ranks", "1"], "allreduce needs at least 2 ranks"),
    (["-a", "native"], "needs what the tcp transport cannot do: native:allreduce; transports that can: mpi"),
    (["-b", "1M", "-e", "4K"], "need 4 <= -b"),
])
def test_allreduce_bad_input(args, needle):
    r = commbench("allreduce", "-i", "2", *args)
    assert r.code == 2 and needle in r.err and "Traceback" not in r.err, r.err
