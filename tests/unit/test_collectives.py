"""Every collective, table-driven: exact results over real ranks (every emulated algorithm, rank counts
that do not divide the sizes), the library's own (native) over MPI, the time on an in-process wire of
known delay and rate against the algorithm's formula, corruption counted, nccl-tests' bus factors,
other transports, and bad input as one line."""

from __future__ import annotations

import pytest
from wire import DELAY, RATE, run_ranks, settled

from commbench.benchmarks.allgather import AllGather
from commbench.benchmarks.allreduce import AllReduceBench
from commbench.benchmarks.alltoall import AllToAll
from commbench.benchmarks.broadcast import Broadcast
from commbench.core.measure.harness import Loops
from commbench.core.measure.payload import Payload


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




