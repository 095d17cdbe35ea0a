"""Real multi-process runs through the local launcher: every byte arrives, #wrong is 0,
a corrupted payload is counted, and the results file reads back as the printed table."""

import json
import os
import re
import subprocess
import sys

import pandas as pd
import pytest
from conftest import commbench, grpc_cpp, table_rows

from commbench.commands.show import render
from commbench.core.output.results import read_runs

GRPC_MODES = [("raw", "unary"), ("raw", "stream"), ("proto", "unary"), ("proto", "stream")]


def wrong_column(out: str) -> list[int]:
    return [int(r[-1]) for r in table_rows(out)]


@pytest.mark.parametrize("bench", ["p2p-latency", "p2p-bandwidth", "p2p-bibw"])
@pytest.mark.parametrize("poll", ["blocking", "busy"])
def test_tcp_validated(bench, poll):
    r = commbench(bench, "-t", "tcp", "--poll", poll, "-m", "0,1,1K,100K,3M", "-i", "20", "-x", "2", "-W", "8",
                  "--validate") if bench != "p2p-latency" else \
        commbench(bench, "-t", "tcp", "--poll", poll, "-m", "0,1,1K,100K,3M", "-i", "50", "-x", "5", "--validate")
    assert r.code == 0, r.err
    rows = table_rows(r.out)
    assert [row[0] for row in rows] == ["0", "1", "1024", "102400", "3145728"]
    assert wrong_column(r.out) == [0] * 5
    assert f"tcp ({'busy-poll' if poll == 'busy' else 'blocking'})" in r.out


@pytest.mark.parametrize("mode,call", GRPC_MODES)
def test_grpc_validated(mode, call):
    lat = commbench("p2p-latency", "-t", "grpc", "--grpc-mode", mode, "--grpc-call", call,
                    "-m", "0,7,64K,2M", "-i", "30", "-x", "3", "--validate")
    assert lat.code == 0, lat.err
    assert wrong_column(lat.out) == [0] * 4
    assert f"grpc ({mode}/{call})" in lat.out
    bw = commbench("p2p-bandwidth", "-t", "grpc", "--grpc-mode", mode, "--grpc-call", call,
                   "-m", "1,64K,2M", "-i", "5", "-x", "1", "-W", "16", "--validate")
    assert bw.code == 0, bw.err
    assert wrong_column(bw.out) == [0] * 3


@pytest.mark.parametrize("transport", [grpc_cpp("--grpc-call", "unary"), grpc_cpp("--grpc-call", "stream")])
def test_grpc_cpp_validated(transport):
    lat = commbench("p2p-latency", *transport, "-m", "0,7,64K,2M", "-i", "30", "-x", "3", "--validate")
    assert lat.code == 0, lat.err
    assert wrong_column(lat.out) == [0] * 4
    assert f"grpc-cpp (raw/{transport[-1]})" in lat.out
    for bench in ("p2p-bandwidth", "p2p-bibw"):
        bw = commbench(bench, *transport, "-m", "1,64K,2M", "-i", "5", "-x", "1", "-W", "16", "--validate")
        assert bw.code == 0, bw.err
        assert wrong_column(bw.out) == [0] * 3


@pytest.mark.parametrize("scheme", ["uniform", "random", "skew"])
@pytest.mark.parametrize("transport", [["-t", "tcp"], ["-t", "grpc", "--grpc-mode", "proto"], grpc_cpp()])
def test_payload_schemes_validated(scheme, transport):
    r = commbench("p2p-latency", *transport, "--payload", scheme, "--buffers", "12", "-i", "20", "-x", "2",
                  "--validate", "--seed", "3")
    assert r.code == 0, r.err
    assert f"# payload: {scheme} scheme, 12 buffers" in r.out
    assert wrong_column(r.out) == [0]


@pytest.mark.parametrize("args", [
    ["p2p-latency", "-t", "tcp"],
    ["p2p-latency", "-t", "grpc", "--grpc-mode", "proto"],
    ["p2p-bandwidth", "-t", "tcp", "-W", "4"],
    ["p2p-bandwidth", "-t", "grpc", "-W", "4"],
    grpc_cpp(before=("p2p-latency",)),
    grpc_cpp("-W", "4", before=("p2p-bandwidth",)),
])
def test_corruption_is_counted_and_fails_the_run(args):
    # every 5th message a rank sends carries one flipped byte: 20 round trips -> 4 wrong each way;
    # bandwidth: 20 windows of 4 from the sender -> 16 wrong
    r = commbench(*args, "-m", "1K:1K", "-i", "20", "-x", "0", "--validate", "--inject-corruption", "5")
    assert r.code == 1, r.out + r.err
    assert wrong_column(r.out) == [8 if args[0] == "p2p-latency" else 4 * 4]
    assert "#wrong" in r.err and "differs from what was sent" in r.err


def test_time_based_mode():
    r = commbench("p2p-latency", "-m", "8", "--time", "0.5", "--warmup-time", "0.2")
    assert r.code == 0, r.err
    assert "time-based: 0.5 s measured after 0.2 s warm-up" in r.out
    iters = int(table_rows(r.out)[0][1])
    assert iters > 100  # on the order of 0.5 s / round trip


def test_pairs_aggregate(tmp_out):
    out = tmp_out / "mr.jsonl"
    r = commbench("p2p-bandwidth", "--pairs", "2", "-m", "64K:64K", "-i", "5", "-x", "1", "-W", "8", "-o", str(out))
    assert r.code == 0, r.err
    (run,) = read_runs(out)
    assert run.meta["options"]["ranks"] == 4 and run.rows[0]["pairs"] == 2 and run.rows[0]["mb_s"] > 0


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_results_file_reads_back_as_printed(tmp_out, suffix):
    out = tmp_out / f"lat{suffix}"
    r = commbench("p2p-latency", "-m", "0:1K", "-i", "50", "-x", "5", "-o", str(out))
    assert r.code == 0, r.err
    assert render(str(out)) == r.out.splitlines()
    shown = commbench("show", str(out))
    assert shown.code == 0 and shown.out == r.out
    (run,) = read_runs(out)
    assert run.meta["bench"] == "p2p-latency" and run.meta["versions"]["grpcio"]
    assert run.meta["command"][1:] == ["p2p-latency", "-m", "0:1K", "-i", "50", "-x", "5", "-o", str(out)]
    assert [row["size"] for row in run.rows] == [0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
    # the documented pandas one-liners
    df = pd.read_csv(out, comment="#") if suffix == ".csv" else \
        pd.read_json(out, lines=True).query("type == 'row'")
    assert list(df["size"]) == [row["size"] for row in run.rows]
    assert df["avg_us"].tolist() == pytest.approx([row["avg_us"] for row in run.rows])


def test_jsonl_appends_runs(tmp_out):
    out = tmp_out / "both.jsonl"
    for t in ("tcp", "grpc"):
        assert commbench("p2p-latency", "-t", t, "-m", "8:8", "-i", "10", "-x", "1", "-o", str(out)).code == 0
    runs = read_runs(out)
    assert [r.meta["options"]["transport"] for r in runs] == ["tcp", "grpc"]
    lines = out.read_text().splitlines()
    assert [json.loads(line)["type"] for line in lines] == ["meta", "row", "meta", "row"]


def test_summary_from_saved_files(tmp_out):
    lat, bw = tmp_out / "lat.jsonl", tmp_out / "bw.jsonl"
    assert commbench("p2p-latency", "-m", "8,1M", "-i", "20", "-o", str(lat)).code == 0
    assert commbench("p2p-bandwidth", "-m", "4M:4M", "-i", "3", "-W", "4", "-o", str(bw)).code == 0
    r = commbench("summary", str(lat), str(bw))
    assert r.code == 0, r.err
    (row,) = table_rows(r.out)
    lat_rows = read_runs(lat)[0].rows
    assert row[:2] == ["tcp", "blocking"]
    assert float(row[2]) == pytest.approx(lat_rows[0]["p50_us"], abs=0.01)
    assert float(row[4]) == pytest.approx(read_runs(bw)[0].rows[0]["mb_s"], abs=0.1)
    assert row[5:] == ["1.00", "1.00"]


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_full_disk_is_one_line_and_keeps_whole_rows(tmp_path, suffix):
    """On a 4 KiB tmpfs the results file fills up mid-run: one line naming the file and the cause,
    exit 2 (the user's to fix, as bad input), every line in the file whole (no torn row), the rows
    before kept."""
    import subprocess

    disk = tmp_path / "tiny"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4k", "tmpfs", str(disk)], check=True)
    try:
        out = disk / f"r{suffix}"
        r = commbench("p2p-latency", "-m", "0:4M", "-i", "20", "-x", "2", "-o", str(out), "--buffers", "1")
        assert r.code == 2, (r.code, r.err)
        first = r.err.splitlines()[0]
        assert str(out) in first and "No space left on device" in first and "Traceback" not in r.err, r.err
        # (rank 1 may add one line saying rank 0 went away: the abort races rank 0's exit)
        text = out.read_text()
        assert text.endswith("\n")
        (run,) = read_runs(out)  # every line parses
        kept = int(re.search(r"the (\d+) rows measured before are kept", r.err).group(1))
        assert len(run.rows) == kept >= 1  # a CSV is written a row at a time too (its header known at open)
    finally:
        subprocess.run(["umount", str(disk)], check=False)


def test_ranks_run_the_plan_their_launcher_decided_not_their_command_line(tmp_path):
    """The local launcher hands its ranks the decided run (launch/plan.py): ranks whose command line
    would not even parse run what was decided, and write its rows."""
    out = tmp_path / "planned.jsonl"
    code = ("import sys\nfrom commbench import planning\nfrom commbench.launch.local import launch\n"
            f"b, t, c = planning.decide(planning.parse_benchmark(['p2p-latency', '-m', '8:16', '-i', '40', '-o', "
            f"{str(out)!r}]))\n"
            "sys.exit(launch(c.ranks, ['p2p-latency', '--no-such-flag'], 60, plan=planning.plan_of(b, c)))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    (run,) = read_runs(out)
    assert [(row["size"], row["iterations"]) for row in run.rows] == [(8, 40), (16, 40)]


def test_ranks_run_the_launchers_commbench_not_another_copy_where_they_start(tmp_path):
    """Started from a directory holding another `commbench` package (a second clone, a stale copy),
    the ranks import the launcher's own: their `python -m commbench` puts no working directory first."""
    from conftest import BIN, ENV

    fake = tmp_path / "commbench"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise SystemExit('imported the copy in the working directory')\n")
    (fake / "__main__.py").write_text("raise SystemExit('imported the copy in the working directory')\n")
    p = subprocess.run([str(BIN / "commbench"), "p2p-latency", "-m", "8:8", "-i", "20", "-x", "2"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=120, env=ENV)
    assert p.returncode == 0 and "the copy in the working directory" not in p.stderr, p.stderr[-800:]
