"""The results schema: every benchmark's rows hold only declared keys (one point on the in-process
wire), every key it always writes, no runner's key of its own, every printed column; the generated
reference pages match the declarations; a CSV's header is known when it opens and the file is never
rewritten; CSV carries every field JSONL carries."""

from __future__ import annotations

import subprocess
import time

import pytest
from conftest import BIN, commbench

from commbench.benchmarks.p2p_latency import P2PLatency
from commbench.benchmarks.runner import RUNNER_KEYS, schema
from commbench.core.output.results import read_runs
from commbench.transports.tcp import TcpTransport


def test_a_csv_run_never_rewrites_its_file(tmp_path):
    """The header is the declared schema, written at open; the file keeps its inode while rows arrive
    (a rewrite would replace it) and every row lands under the first header."""
    out = tmp_path / "r.csv"
    p = subprocess.Popen([str(BIN / "commbench"), "p2p-latency", "-m", "0:64K", "-i", "300", "-x", "10", "-o",
                          str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    inodes, sizes = set(), []
    while p.poll() is None:
        if out.exists():
            st = out.stat()
            inodes.add(st.st_ino)
            sizes.append(st.st_size)
        time.sleep(0.005)
    assert p.returncode == 0, p.stderr.read()
    inodes.add(out.stat().st_ino)
    assert len(inodes) == 1 and sizes == sorted(sizes) and len(set(sizes)) > 3, (inodes, sorted(set(sizes)))
    lines = out.read_text().splitlines()
    assert lines[1].split(",") == schema(P2PLatency, TcpTransport, False)
    assert sum(1 for line in lines if line.startswith("bench,")) == 1
    (run,) = read_runs(out)
    assert len(run.rows) == 18 and all(r["wrong"] == 0 for r in run.rows)


@pytest.mark.parametrize("args", [["p2p-latency", "-m", "8,1K"], ["allreduce", "--ranks", "2", "-b", "4K", "-e", "8K"]])
def test_csv_carries_what_jsonl_carries(tmp_path, args):
    runs = {}
    for suffix in (".jsonl", ".csv"):
        out = tmp_path / f"r{suffix}"
        r = commbench(*args, "-i", "5", "-x", "1", "-o", str(out))
        assert r.code == 0, r.err
        (runs[suffix],) = read_runs(out)
    rows_j, rows_c = runs[".jsonl"].rows, runs[".csv"].rows  # a CSV row has a cell for every declared key:
    assert [set(r) for r in rows_j] == [{k for k, v in r.items() if v is not None or k in j}  # empty where
                                        for r, j in zip(rows_c, rows_j, strict=True)]  # the row had none
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
