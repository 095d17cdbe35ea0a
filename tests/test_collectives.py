"""Every collective, table-driven: exact results over real ranks (every emulated algorithm, rank counts
that do not divide the sizes), the library's own (native) over MPI, the time on an in-process wire of
known delay and rate against the algorithm's formula, corruption counted, nccl-tests' bus factors,
other transports, and bad input as one line."""

from __future__ import annotations

import pytest
from conftest import commbench, grpc_cpp, mpiexec, table_rows
from wire import DELAY, RATE, run_ranks, settled

from commbench.benchmarks import registry
from commbench.benchmarks.allgather import AllGather
from commbench.benchmarks.allreduce import AllReduceBench
from commbench.benchmarks.alltoall import AllToAll
from commbench.benchmarks.broadcast import Broadcast
from commbench.core.measure.harness import Loops
from commbench.core.measure.payload import Payload
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


def steps(n: int, count: int) -> float:
    """n - 1 steps of one block (count / n elements) each, in us: ring all-gather, pairwise all-to-all."""
    return (n - 1) * (DELAY + 4 * count / n / RATE) * 1e6


WIRE = [  # (benchmark, ranks, count, algorithm, validate, the fastest and slowest rank's bounds in us)
    # checked in an untimed round: with every iteration checked, four threads' numpy work on two cores
    # added 1.21-1.33x to the gathers (20 runs); untimed 1.07-1.10x
    (AllGather, 4, 400_000, "ring", "untimed", lambda t: (steps(4, t), 1.3 * steps(4, t), 1.5 * steps(4, t))),
    (AllToAll, 4, 400_000, "pairwise", "untimed", lambda t: (steps(4, t), 1.3 * steps(4, t), 1.5 * steps(4, t))),
]


@pytest.mark.parametrize("cls,n,count,algorithm,validate,bounds", WIRE, ids=lambda v: getattr(v, "name", ""))
def test_time_on_a_wire_follows_the_algorithm(cls, n, count, algorithm, validate, bounds):
    row = run_ranks(cls, n, Payload(str(4 * count), (4 * count,)), Loops(10, 1), validate=validate,
                    algorithm=algorithm)
    truth, avg_hi, max_hi = bounds(count)
    assert truth <= row["time_min_us"] <= row["time_us"] < avg_hi, (row, truth)
    assert row["time_us"] <= row["time_max_us"] < max_hi, (row, truth)
    assert row["wrong"] == 0


def test_binomial_broadcast_on_a_wire_takes_two_hops_to_the_last_of_four(monkeypatch):
    """One broadcast after the barrier: 100 kB from rank 0 to 1 in round 0, then to 2 and (from 1) to 3
    in round 1, so the last rank has it after two hops (a flat broadcast: one hop and three sends; a
    chain: three hops); the root only posts its sends. The wire's delay is 20 ms here, so that the hops,
    not the rank threads' copies on a machine running other jobs (+5-23 ms seen with 1 MB and 2 ms),
    make the time."""
    import wire

    monkeypatch.setattr(wire, "DELAY", 0.02)
    n, count = 4, 25_000
    one_hop = (wire.DELAY + 4 * count / RATE) * 1e6

    def ok(r: dict) -> bool:
        return r["time_min_us"] < one_hop and 2 * one_hop <= r["time_max_us"] < 2.5 * one_hop

    row = settled(lambda: run_ranks(Broadcast, n, Payload(str(4 * count), (4 * count,)), Loops(1, 0),
                                    validate="every", algorithm="binomial"), ok)
    assert ok(row), (row, one_hop)
    assert row["wrong"] == 0


@pytest.mark.parametrize("cls,algorithm,wrong", [
    (AllGather, "ring", 2 * 3),  # iterations 3 and 6: rank 0's block is off by one element everywhere
    (AllToAll, "pairwise", 2),  # iterations 3 and 6: rank 0's block 0, which rank 0 keeps
    (Broadcast, "binomial", 2 * 2),  # iterations 3 and 6, on both ranks that are not the root
], ids=lambda v: getattr(v, "name", ""))
def test_corruption_is_counted(cls, algorithm, wrong):
    row = run_ranks(cls, 3, Payload("3000", (3000,)), Loops(5, 1), validate="every", corrupt=3, algorithm=algorithm)
    assert row["wrong"] == wrong, row


def test_bus_factors_are_nccl_tests():
    assert [AllReduceBench.bus_factor(n) for n in (2, 4, 8)] == [1.0, 1.5, 1.75]
    assert [AllGather.bus_factor(n) for n in (2, 4)] == [0.5, 0.75] == [AllToAll.bus_factor(n) for n in (2, 4)]
    assert Broadcast.bus_factor(8) == 1.0


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
