"""broadcast: exact from every root over real ranks, native MPI_Bcast, known time on a wire,
corruption counted, busbw = algbw."""

import pytest
from conftest import commbench, mpiexec, table_rows
from wire import DELAY, RATE, run_ranks

from commbench.benchmarks.broadcast import Broadcast
from commbench.core.harness import Loops
from commbench.core.payload import Payload
from commbench.core.results import read_runs


@pytest.mark.parametrize("ranks,root", [(2, 1), (3, 0), (5, 3)])
def test_binomial_tree_delivers_exactly(tmp_path, ranks, root):
    out = tmp_path / "bc.jsonl"
    r = commbench("broadcast", "--ranks", str(ranks), "--root", str(root), "-b", "4", "-e", "300K", "-f", "9",
                  "-i", "4", "-x", "1", "--validate", "-o", str(out))
    assert r.code == 0, r.err
    rows = read_runs(out)[0].rows
    assert [x["count"] for x in rows] == [1, 9, 81, 729, 6561, 59049]
    assert all(x["wrong"] == 0 and x["root"] == root and x["busbw"] == x["algbw"] for x in rows)


def test_native_over_mpi():
    r = mpiexec(4, "broadcast", "-t", "mpi", "-a", "native", "--root", "2", "-b", "4", "-e", "1M", "-f", "64",
                "-i", "5", "--validate")
    assert r.code == 0, r.err
    rows = table_rows(r.out)
    assert [row[5] for row in rows] == ["native"] * 4 and [row[-1] for row in rows] == ["0"] * 4, r.out


def test_binomial_time_on_a_wire():
    """One broadcast after the barrier: 1 MB from rank 0 to 1 in round 0, then to 2 and (from 1) to 3
    in round 1, so the last rank has it after two hops; the root only posts its sends."""
    n, count = 4, 250_000
    row = run_ranks(Broadcast, n, Payload(str(4 * count), (4 * count,)), Loops(1, 0), validate="every",
                    algorithm="binomial")
    one_hop = (DELAY + 4 * count / RATE) * 1e6
    assert row["time_min_us"] < one_hop and 2 * one_hop <= row["time_max_us"] < 1.3 * 2 * one_hop, (row, one_hop)
    assert row["wrong"] == 0


def test_corruption_is_counted():
    row = run_ranks(Broadcast, 3, Payload("3000", (3000,)), Loops(5, 1), validate="every", corrupt=3,
                    algorithm="binomial")
    assert row["wrong"] == 2 * 2, row  # iterations 3 and 6, on both ranks that are not the root


def test_root_must_be_a_rank():
    r = commbench("broadcast", "--ranks", "3", "--root", "3")
    assert r.code == 2 and "--root must be a rank, 0 to 2, not 3" in r.err and "Traceback" not in r.err
