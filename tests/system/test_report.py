"""commbench report on saved results (tests/fixtures): the PNGs and the page; --compare's ratios;
bad input."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from conftest import commbench

FIX = Path(__file__).parent.parent / "fixtures"
ALL = sorted(str(p) for p in FIX.glob("*.jsonl"))


@pytest.mark.parametrize("fmt,page", [("html", "report.html"), ("md", "report.md")])
def test_report_makes_every_figure_and_the_page(tmp_path, fmt, page):
    out = tmp_path / "rep"
    r = commbench("report", *ALL, "-o", str(out), "--format", fmt)
    assert r.code == 0, r.err
    pngs = {p.name for p in out.glob("*.png")}
    assert pngs == {"p2p-latency.png", "p2p-bandwidth.png", "ps-throughput.png", "allreduce.png", "training.png"}
    assert all((out / p).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and (out / p).stat().st_size > 10_000 for p in pngs)
    text = (out / page).read_text()
    for title in ("p2p-latency (p50_us)", "p2p-bandwidth (mb_s)", "ps-throughput (steps_s)", "allreduce (busbw)",
                  "Training"):
        assert title in text
    if fmt == "html":
        assert text.count("data:image/png;base64,") == 5  # self-contained
        assert "grpc (raw/unary)" in text and "tcp (blocking)" in text and "p2p-latency" in text
    else:
        assert "![p2p-latency (p50_us)](p2p-latency.png)" in text and "| size |" in text
        assert "| measured_lo | measured_hi | measured_runs |" in text  # predictions beside their repeats' interval


def _latency_file(path: Path, values: dict[int, float], transport: str) -> None:
    meta = {"type": "meta", "bench": "p2p-latency", "hosts": ["h"], "command": ["commbench"],
            "options": {"transport": transport}, "metric": {"key": "avg_us", "better": "lower"}}  # as declared
    rows = [{"type": "row", "bench": "p2p-latency", "transport": transport, "mode": "m", "poll": "blocking",
             "payload": str(s), "size": s, "avg_us": v} for s, v in values.items()]
    path.write_text("\n".join(json.dumps(x) for x in [meta, *rows]) + "\n")


def test_compare_ratios(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    _latency_file(a, {8: 10.0, 1024: 20.0, 4096: 30.0}, "tcp")
    _latency_file(b, {8: 5.0, 1024: 40.0, 4096: 30.3}, "grpc")
    r = commbench("report", "--compare", str(a), str(b), "-o", str(tmp_path / "rep"))
    assert r.code == 0, r.err
    lines = {ln.split()[1]: ln for ln in r.out.splitlines() if ln.startswith("p2p-latency")}
    assert "0.5 " in lines["8"] and "2.00x better" in lines["8"]  # half the latency: twice as good
    assert " 2 " in lines["1024"] and "2.00x worse" in lines["1024"]
    assert "1.01" in lines["4096"] and lines["4096"].rstrip().endswith("same")
    assert "Comparison (B / A)" in (tmp_path / "rep" / "report.html").read_text()


def test_compare_says_not_significant_where_the_medians_intervals_overlap(tmp_path):
    """As pyperf: a ratio whose two medians' 95 % intervals overlap is "not significant", however far
    from 1; apart, better or worse; without intervals, the ratio alone."""
    def run(path: Path, points: dict[int, tuple[float, float, float] | tuple[float]]) -> None:
        meta = {"type": "meta", "bench": "p2p-latency", "hosts": ["h"], "command": ["commbench"],
                "options": {"transport": "tcp"}, "metric": {"key": "p50_us", "better": "lower"}}
        rows = [{"type": "row", "bench": "p2p-latency", "transport": "tcp", "mode": "m", "poll": "blocking",
                 "payload": str(s), "size": s, "p50_us": v[0],
                 **({"p50_ci_lo_us": v[1], "p50_ci_hi_us": v[2]} if len(v) == 3 else {})} for s, v in points.items()]
        path.write_text("\n".join(json.dumps(x) for x in [meta, *rows]) + "\n")

    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    run(a, {8: (10.0, 9.0, 14.0), 64: (10.0, 9.9, 10.1), 512: (10.0,)})
    run(b, {8: (13.0, 11.0, 20.0), 64: (13.0, 12.9, 13.1), 512: (13.0,)})
    r = commbench("report", "--compare", str(a), str(b), "-o", str(tmp_path / "rep"))
    assert r.code == 0, r.err
    lines = {ln.split()[1]: ln.rstrip() for ln in r.out.splitlines() if ln.startswith("p2p-latency")}
    assert lines["8"].endswith("not significant") and "1.3" in lines["8"], lines
    assert lines["64"].endswith("1.30x worse") and lines["512"].endswith("1.30x worse"), lines


def test_a_report_again_in_its_folder_leaves_no_figure_of_the_last(tmp_path):
    """report, then --compare into the same folder: the figures only the first made are gone; a PNG in a
    folder that held no report is not commbench's to remove."""
    out = tmp_path / "rep"
    assert commbench("report", *ALL, "-o", str(out)).code == 0
    assert (out / "training.png").exists()
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    _latency_file(a, {8: 10.0, 1024: 20.0}, "tcp")
    _latency_file(b, {8: 5.0, 1024: 40.0}, "grpc")
    assert commbench("report", "--compare", str(a), str(b), "-o", str(out)).code == 0
    assert {p.name for p in out.glob("*.png")} == {"p2p-latency.png"}
    other = tmp_path / "mine"
    other.mkdir()
    (other / "holiday.png").write_bytes(b"x")
    assert commbench("report", str(a), "-o", str(other)).code == 0
    assert (other / "holiday.png").exists()


def test_bad_input(tmp_path):
    r = commbench("report")
    assert r.code == 2 and "report needs results files" in r.err and r.err.count("\n") == 1
    bad = tmp_path / "cut.jsonl"
    shutil.copy(FIX / "latency_tcp.jsonl", bad)
    with bad.open("a") as f:
        f.write('{"type": "row", "size": 8, "avg_us"\n')
    lines = bad.read_text().count("\n")
    r = commbench("report", str(bad), "-o", str(tmp_path / "rep"))
    assert r.code == 2 and f"cut.jsonl:{lines}: not a JSON row" in r.err and "Traceback" not in r.err
    r = commbench("report", str(tmp_path / "missing.jsonl"))
    assert r.code == 2 and "cannot read results file" in r.err
    r = commbench("report", "--compare", str(FIX / "latency_tcp.jsonl"), str(FIX / "ps.jsonl"), "-o", str(tmp_path))
    assert r.code == 2 and "no points in common" in r.err


def test_a_cluster_section_names_its_transport_its_verdict_and_groups_hosts_by_switch(tmp_path):
    """From a cluster file alone (its topology and expected values in the metadata): the heading says
    the transport and the verdict, the per-host table has each host's switch, no NaN cells."""
    names = [f"cbh{i}" for i in range(6)]
    meta = {"type": "meta", "bench": "cluster", "run_id": "r1", "start": "2026-12-02T00:00:00+00:00",
            "options": {"slow_pct": 25.0, "transport": "tcp"}, "hosts": names, "endpoints": names,
            "metric": {"key": "mb_s", "better": "higher"},
            "topology": {"switch_of": {n: f"rack{i // 3}" for i, n in enumerate(names)}, "parent": {}},
            "expected": [{"link": "any", "metric": "mb_s", "value": 25.0, "warn": 5.0, "fail": 20.0}]}
    rows = [{"type": "row", "bench": "cluster", "run_id": "r1", "transport": "tcp", "test": "pairwise", "round": 1,
             "a": names[a], "b": names[b], "a_rank": a, "b_rank": b, "mb_s": 6.0 if 4 in (a, b) else 23.8,
             "lat_us": 20.0} for a in range(6) for b in range(a + 1, 6)]
    rows.append({"type": "row", "bench": "cluster", "run_id": "r1", "transport": "tcp", "test": "finding",
                 "kind": "slow-host", "a": "cbh4", "note": "cbh4: 6.0 MB/s"})
    f = tmp_path / "c.jsonl"
    f.write_text("\n".join(json.dumps(x) for x in [meta, *rows]) + "\n")
    out = tmp_path / "rep"
    r = commbench("report", str(f), "-o", str(out))
    assert r.code == 0, r.err
    page = (out / "report.html").read_text()
    assert "Cluster over tcp (cluster-tcp): slow-host cbh4" in page and "<th>switch</th>" in page
    assert ">rack1<" in page and "NaN" not in page and ">nan<" not in page
    assert {p.name for p in out.glob("*.png")} == {"cluster-tcp-pairs.png", "cluster-tcp-hosts.png"}


def test_show_of_a_folder_reads_its_results_files_and_leaves_other_tools_json(tmp_path):
    """A folder of results beside another tool's output (iperf3's .json, kept for `commbench import`):
    `show DIR` prints the results and does not take the .json for one."""
    shutil.copy(FIX / "latency_tcp.jsonl", tmp_path)
    shutil.copy(FIX / "import" / "iperf3_tcp.json", tmp_path)
    r = commbench("show", str(tmp_path))
    assert r.code == 0 and "iperf3" not in r.out + r.err, r.err
    assert r.out == commbench("show", str(FIX / "latency_tcp.jsonl")).out != ""


def test_a_report_never_writes_through_a_link_or_into_another_users_directory(tmp_path):
    """Links planted where the page and figures go are replaced, not followed; a directory that is a
    link, another user's, or writable by others is refused in one line."""
    victim = tmp_path / "victim"
    victim.write_text("precious")
    out = tmp_path / "rep"
    out.mkdir(mode=0o755)
    for name in ("report.html", "p2p-latency.png"):
        (out / name).symlink_to(victim)
    r = commbench("report", str(FIX / "latency_tcp.jsonl"), "-o", str(out))
    assert r.code == 0, r.err
    assert victim.read_text() == "precious"
    assert not (out / "report.html").is_symlink() and not (out / "p2p-latency.png").is_symlink()
    (tmp_path / "linked").symlink_to(out)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    cases = [(tmp_path / "linked", "is a symbolic link"), (shared, "can be written by others")]
    if os.geteuid() == 0:
        other = tmp_path / "other"
        other.mkdir(mode=0o755)
        os.chown(other, 65534, 65534)
        cases.append((other, "belongs to uid 65534"))
    for where, says in cases:
        r = commbench("report", str(FIX / "latency_tcp.jsonl"), "-o", str(where))
        assert r.code == 2 and says in r.err and len(r.err.strip().splitlines()) == 1, (where, r.err)
