"""The results schema, pinned: every benchmark's row keys (one point on the in-process wire), no
benchmark writing the runner's keys, every printed column in the row, and CSV carrying every
field JSONL carries."""

from __future__ import annotations

import pytest
from conftest import commbench
from wire import run_ranks, wire_config

from commbench.benchmarks import registry
from commbench.benchmarks.runner import RUNNER_KEYS
from commbench.core.harness import Loops
from commbench.core.payload import Payload
from commbench.core.results import read_runs

HARNESS = {"huge_kb"}  # measure_point's: the page backing of rank 0 while the point's buffers exist
COLLECTIVE = {"iterations", "count", "dtype", "redop", "root", "algorithm", "time_us", "time_min_us", "time_max_us",
              "algbw", "busbw", "wrong"}
BANDWIDTH = {"iterations", "window", "pairs", "mb_s", "msg_s", "min_mb_s", "max_mb_s", "wrong"}
PINNED = {
    "p2p-latency": {"iterations", "avg_us", "min_us", "p50_us", "p50_ci_pct", "p50_ci_lo_us", "p50_ci_hi_us",
                    "p99_us", "p999_us", "max_us", "stdev_us", "wrong"},
    "p2p-bandwidth": BANDWIDTH, "p2p-bibw": BANDWIDTH,
    "ps-throughput": {"workers", "ps", "iterations", "steps_s", "rpc_s", "mb_s", "push_p50_ms", "push_p99_ms",
                      "pull_p50_ms", "pull_p99_ms", "shard_mb", "shard_steps", "final_value", "expected_value",
                      "ps_mode", "rpc", "wrong"},
    "allreduce": COLLECTIVE, "allgather": COLLECTIVE, "alltoall": COLLECTIVE, "broadcast": COLLECTIVE,
}


@pytest.mark.parametrize("name", sorted(n for n, c in registry().items() if "measure" not in vars(c)))
def test_row_keys(name):
    """Benchmarks measured point by point (a benchmark that schedules its own work, cluster, pins its
    rows in its own tests: test_cluster.py)."""
    cls = registry()[name]
    config = wire_config(cls, 0, Payload("x", (4096, 8192)), Loops(3, 1), np=None)
    n = cls.ranks(config.bench, config.common)
    row = run_ranks(cls, n, Payload("x", (4096, 8192)), Loops(3, 1), validate="every")
    assert not set(row) & set(RUNNER_KEYS), f"{name} writes the runner's keys"
    assert {c.key for c in cls.columns} <= set(row), f"{name} prints columns its row lacks"
    if name in PINNED:  # a new benchmark is held to the rules above; these are pinned key for key
        assert set(row) == PINNED[name] | HARNESS, sorted(set(row) ^ (PINNED[name] | HARNESS))
    assert row["wrong"] == 0


@pytest.mark.parametrize("args", [["p2p-latency", "-m", "8,1K"], ["allreduce", "--ranks", "2", "-b", "4K", "-e", "8K"]])
def test_csv_carries_what_jsonl_carries(tmp_path, args):
    runs = {}
    for suffix in (".jsonl", ".csv"):
        out = tmp_path / f"r{suffix}"
        r = commbench(*args, "-i", "5", "-x", "1", "-o", str(out))
        assert r.code == 0, r.err
        (runs[suffix],) = read_runs(out)
    rows_j, rows_c = runs[".jsonl"].rows, runs[".csv"].rows
    assert [set(r) for r in rows_j] == [set(r) for r in rows_c]
    assert set(RUNNER_KEYS) <= set(rows_j[0]) and runs[".jsonl"].meta["metric"] == runs[".csv"].meta["metric"]


@pytest.mark.parametrize("run_id", ["123e45678901", "905112345678"])
def test_csv_keeps_a_run_id_that_looks_like_a_number(tmp_path, run_id):
    """run_id is 12 hex digits: about 1 run in 140 gets one that reads as a float (inf) or an int."""
    out = tmp_path / "r.csv"
    assert commbench("p2p-latency", "-m", "8", "-i", "3", "-x", "1", "-o", str(out)).code == 0
    (run,) = read_runs(out)
    out.write_text(out.read_text().replace(run.meta["run_id"], run_id))
    (run,) = read_runs(out)
    assert run.meta["run_id"] == run_id and run.rows and {r["run_id"] for r in run.rows} == {run_id}
    assert max(r["size"] for r in run.rows) == 8  # numbers still read as numbers
