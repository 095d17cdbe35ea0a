"""`commbench import` end to end: each tool's real output through the command into rows that show,
summary, report and report --compare treat as any run (the readers alone and damaged output:
tests/unit/test_import.py, whose docstring says where each file came from)."""

from __future__ import annotations

import json
import re

import pytest
from conftest import commbench
from unit.test_import import FIX

from commbench.core.output.results import read_runs
from commbench.presentation import read_checked

# file, extra flags, benchmark, transport, first row's (size, key, value as the tool printed it)
CASES = [
    ("osu_latency.txt", [], "p2p-latency", "mpi", None),
    ("osu_bw.txt", [], "p2p-bandwidth", "mpi", None),
    ("osu_bibw.txt", [], "p2p-bibw", "mpi", None),
    ("osu_allreduce_4ranks_full.txt", ["--ranks", "4"], "allreduce", "mpi", None),
    ("omb_py_latency.txt", [], "p2p-latency", "mpi", None),
    ("omb_py_bibw.txt", [], "p2p-bibw", "mpi", None),
    ("omb_py_allreduce_4ranks.txt", ["--ranks", "4"], "allreduce", "mpi", None),
    ("ib_send_lat.txt", [], "p2p-latency", "verbs", None),
    ("ib_write_bw.txt", [], "p2p-bandwidth", "verbs", None),
    ("all_reduce_perf_2ranks.txt", [], "allreduce", "nccl", (8, "time_us", 21.43)),
    ("all_reduce_perf_old_format.txt", [], "allreduce", "nccl", (8, "time_us", 14.89)),
    ("sockperf_pingpong_tcp_64.txt", ["--size", "64"], "p2p-latency", "tcp", None),
    ("iperf3_tcp.json", [], "p2p-bandwidth", "tcp", None),
    ("all_reduce_perf_2ranks.json", [], "allreduce", "nccl", (8, "time_us", 21.43)),
    ("mpigraph_6hosts_slow2.txt", [], "cluster", "mpi", (1048576, "mb_s", (20.277 + 5.434) / 2 * 1.048576)),
]


def first_printed(name: str) -> tuple[int, float]:
    """The first result line's size and value as the tool printed them (the test's own reading)."""
    text = (FIX / name).read_text()
    if name.endswith(".json"):
        doc = json.loads(text)
        return doc["start"]["test_start"]["blksize"], doc["end"]["sum_received"]["bits_per_second"] / 8e6
    if name.startswith("sockperf"):
        return 64, float(re.search(r"avg-latency=([\d.]+)", text).group(1))
    for line in text.splitlines():
        f = line.split()
        if len(f) >= 2 and f[0].isdigit() and re.fullmatch(r"[\d.]+", f[1]) and not line.startswith("#"):
            if name.startswith("ib_"):  # perftest: #bytes #iterations then values
                return int(f[0]), float(f[4] if "lat" in name else f[3]) * (1 if "lat" in name else 1.048576)
            return int(f[0]), float(f[1])
    raise AssertionError(f"no result line in {name}")


KEY = {"p2p-latency": "avg_us", "p2p-bandwidth": "mb_s", "p2p-bibw": "mb_s", "allreduce": "time_us"}


@pytest.mark.parametrize("name,flags,bench,transport,first", CASES, ids=[c[0] for c in CASES])
def test_each_tools_output_becomes_commbench_rows(tmp_path, name, flags, bench, transport, first):
    if not (FIX / name).exists():
        pytest.skip(f"fixture {name} not captured")
    out = tmp_path / "imported.jsonl"
    r = commbench("import", str(FIX / name), *flags, "-o", str(out))
    assert r.code == 0, r.err
    (run,) = read_checked(out)
    assert run.meta["bench"] == bench and run.meta["imported"]["file"].endswith(name)
    assert run.rows and all(row["transport"] == transport and row["bench"] == bench for row in run.rows)
    row = run.rows[0]
    if first:  # read off the fixture by eye
        assert row["size"] == first[0] and row[first[1]] == pytest.approx(first[2], rel=1e-9)
    else:
        size, value = first_printed(name)
        key = "p50_us" if name == "ib_send_lat.txt" else KEY[bench]
        assert row["size"] == size and row[key] == pytest.approx(value, rel=1e-6)
    shown = commbench("show", str(out))
    assert shown.code == 0 and "imported from" in shown.out and str(row["size"]) in shown.out


def test_nccl_tests_json_reads_as_its_text_does(tmp_path):
    """The same run as -J JSON and as printed: the same rows."""
    got = {}
    for name in ("all_reduce_perf_2ranks.txt", "all_reduce_perf_2ranks.json"):
        out = tmp_path / f"{name}.jsonl"
        assert commbench("import", str(FIX / name), "-o", str(out)).code == 0
        (run,) = read_runs(out)
        got[name] = [(r["size"], r["count"], r["time_us"], r["algbw"], r["busbw"], r["wrong"]) for r in run.rows]
        assert run.meta["imported"]["tool"] == "all_reduce_perf"
    text, doc = got["all_reduce_perf_2ranks.txt"], got["all_reduce_perf_2ranks.json"]
    assert text == doc and len(text) == 18


def test_an_mpigraph_run_becomes_a_cluster_run_with_findings(tmp_path):
    """mpiGraph's Send table, 2^20-byte MB/sec, as cluster pairwise rows in 10^6 B/s; its findings name
    the host planted at 50 of 200 Mbit/s, and the file serves as a baseline of the same hosts."""
    out = tmp_path / "mg.jsonl"
    assert commbench("import", str(FIX / "mpigraph_6hosts_slow2.txt"), "-o", str(out)).code == 0
    (run,) = read_runs(out)
    assert len(run.rows) == 15 and {r["test"] for r in run.rows} == {"pairwise"}
    two = [r["mb_s"] for r in run.rows if "cbh2.mg" in (r["a"], r["b"])]
    assert max(two) < 8 < min(r["mb_s"] for r in run.rows if "cbh2.mg" not in (r["a"], r["b"]) and r["mb_s"] > 15)
    r = commbench("findings", str(out))
    assert r.code == 1 and "slow-host: cbh2.mg:" in r.out, r.out
    same = commbench("diff", str(out), str(out))
    assert same.code == 1 and "lost" not in same.out  # itself: nothing changed (its findings stand: exit 1)
    loop = tmp_path / "loop.jsonl"
    assert commbench("import", str(FIX / "mpigraph_loopback_4.txt"), "-o", str(loop)).code == 0
    assert [r["a"] for r in read_runs(loop)[0].rows][:3] == ["vm/r0"] * 3  # ranks of one host: host/rank


def test_allreduce_busbw_needs_the_ranks(tmp_path):
    out = tmp_path / "a.jsonl"
    assert commbench("import", str(FIX / "osu_allreduce_4ranks_full.txt"), "-o", str(out)).code == 0
    (run,) = read_runs(out)
    assert "busbw" not in run.rows[0] and run.meta["metric"] == {"key": "time_us", "better": "lower"}
    out4 = tmp_path / "b.jsonl"
    assert commbench("import", str(FIX / "osu_allreduce_4ranks_full.txt"), "--ranks", "4", "-o", str(out4)).code == 0
    row = read_runs(out4)[0].rows[-1]
    assert row["busbw"] == pytest.approx(row["size"] / row["time_us"] / 1e3 * 2 * 3 / 4)  # nccl-tests' factor


def test_imported_osu_beside_a_commbench_run(tmp_path):
    """report --compare of a commbench run and OSU's output of the same benchmark: matched by size,
    OSU's mean against commbench's mean (OSU prints no median); summary and a report page too."""
    cb = tmp_path / "cb.jsonl"
    r = commbench("p2p-latency", "-t", "tcp", "-m", "1:64", "-i", "200", "-x", "20", "-o", str(cb))
    assert r.code == 0, r.err
    osu = tmp_path / "osu.jsonl"
    assert commbench("import", str(FIX / "osu_latency.txt"), "-o", str(osu)).code == 0
    rep = commbench("report", "--compare", str(osu), str(cb), "-o", str(tmp_path / "rep"))
    assert rep.code == 0, rep.err
    for size in (1, 2, 4, 8, 16, 32, 64):
        assert re.search(rf"^\S*\s*p2p-latency\s+{size}\b.*avg_us", rep.out, re.M), rep.out
    both = commbench("report", str(cb), str(osu), "-o", str(tmp_path / "page"))
    assert both.code == 0, both.err
    assert (tmp_path / "page" / "p2p-latency.png").stat().st_size > 0
    page = (tmp_path / "page" / "report.html").read_text()
    assert "(OMB 7.4) busy [avg_us]" in page and "<td>0.27</td>" in page  # OSU's line: its mean, marked
    s = commbench("summary", str(cb), str(osu))
    assert s.code == 0, s.err


def test_compare_with_values_rounded_to_zero(tmp_path):
    """nccl-tests prints busbw 0.00 for tiny messages: report --compare says there is no ratio there
    (it divided by zero: a traceback) and compares the rest."""
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    assert commbench("import", str(FIX / "all_reduce_perf_2ranks.txt"), "-o", str(a)).code == 0
    assert commbench("import", str(FIX / "all_reduce_perf_old_format.txt"), "-o", str(b)).code == 0
    r = commbench("report", "--compare", str(a), str(b), "-o", str(tmp_path / "rep"))
    assert r.code == 0, r.err
    assert re.search(r"^allreduce\s+8 2\s+busbw.*no ratio \(a zero\)$", r.out, re.M), r.out
    assert re.search(r"^allreduce\s+1024 256\s+busbw\s+0\.04\s+0\.1\s+2\.5\s+2\.50x better$", r.out, re.M), r.out


@pytest.mark.parametrize("text,needle", [
    ("# OSU MPI Latency Test v7.4\n# Datatype: MPI_CHAR.\n# Size       Avg Latency(us)\n", "no result lines"),
    ("hello\n", "not the output of a tool"),
    ("{\"start\": {\"connecting_to\": {}}}", "without end.sum_received"),
    ("{\"start\": {\"connecting_to\": {}}, \"error\": \"unable to connect to server\"}", "iperf3 reported an error"),
    ("sockperf: ====> avg-latency=27.948 (std-dev=30.804)\n", "give --size"),
    ("START mpiGraph v1.5\nMsgSize\t65536\nTimes\t10\n\nSend\ta:0\tb:1\t\na:0 to\t0.000\t5.0\t\n", "table has 1 rows"),
    ("START mpiGraph v1.5\nProcs\t2\n", "without its MsgSize"),
    ('{"version":3,"nccl_version":22703,"args":["all_reduce_perf"]}', "without a results list"),
])
def test_malformed_output_is_one_line_exit_2(tmp_path, text, needle):
    f = tmp_path / "out.txt"
    f.write_text(text)
    r = commbench("import", str(f))
    assert r.code == 2 and needle in r.err and len(r.err.strip().splitlines()) == 1, r.err


def test_unreadable_inputs_are_one_line_exit_2(tmp_path):
    (tmp_path / "bin").write_bytes(b"\x00\x01\x02")
    for args in (["import", str(tmp_path / "missing.txt")], ["import", str(tmp_path)],
                 ["import", str(tmp_path / "bin")], ["import", str(FIX / "osu_latency.txt"), "--ranks", "-1"],
                 ["import", str(FIX / "osu_latency.txt"), "-o", str(tmp_path / "x.txt")]):
        r = commbench(*args)
        assert r.code == 2 and len(r.err.strip().splitlines()) == 1 and "Traceback" not in r.err, (args, r.err)




