"""The verdict offline, in-process: ``commbench findings`` and ``commbench diff`` over small synthetic
results files give the same output every time (golden lines, pyperf-style), exit as the finding
kinds' declarations say, and take no name from a file that a host could not have."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from commbench.cli import main
from commbench.core.analysis import kinds
from commbench.core.analysis.evidence import ENDPOINT, from_rows
from commbench.core.analysis.verdict import drained, one_line


def write_run(path: Path, names: list[str], rate, *, lat=None, topology: dict | None = None,
              transports: tuple[str, ...] = (), recheck: dict | None = None, failed: tuple = (),
              start: str = "2026-12-01T00:00:00", recheck_latency: dict | None = None,
              options: dict | None = None) -> Path:
    """A cluster run's results file: every pair of ``names`` at ``rate(a, b)`` MB/s (and ``lat(a, b)``
    us), measured over -t tcp and each of ``transports``; ``recheck``: suspect -> (probe, control)
    MB/s, both passes (``recheck_latency``: us); ``failed``: (a, b, lost) pairs that failed."""
    meta = {"type": "meta", "bench": "cluster", "run_id": f"r{len(names)}", "start": start,
            "options": {"transport": "tcp", "slow_pct": 25.0, "tests": "pairwise", "budget": None, **(options or {})},
            "hosts": [n.split("/")[0] for n in names], "endpoints": names}
    if topology is not None:
        meta["topology"] = topology
    rows = []
    for i, a in enumerate(names):
        for j in range(i + 1, len(names)):
            b = names[j]
            if any({a, b} == {x, y} for x, y, _ in failed):
                lost = next(z for x, y, z in failed if {a, b} == {x, y})
                rows.append({"test": "pairwise", "round": 1, "a": a, "b": b, "a_rank": i, "b_rank": j,
                             "error": f"rank of {lost} died", "lost": lost})
                continue
            for via in ("", *transports):
                row = {"test": "pairwise", "round": 1, "a": a, "b": b, "a_rank": i, "b_rank": j,
                       "mb_s": float(rate(a, b)), "lat_us": float(lat(a, b) if lat else 20.0)}
                rows.append({**row, "via": via} if via else row)
    for test, key, again in (("recheck", "mb_s", recheck), ("recheck-latency", "lat_us", recheck_latency)):
        for suspect, (probe, control) in (again or {}).items():
            for n in ("", "-2"):
                for role, v in (("probe", probe), ("control", control)):
                    rows.append({"test": test, "round": 1, "a": names[0], "b": names[1], "suspect": suspect,
                                 "role": role + n, key: float(v)})
    with path.open("w") as f:
        f.write(json.dumps(meta) + "\n")
        for r in rows:
            f.write(json.dumps({"type": "row", **r}) + "\n")
    return path


def run(capsys, *argv: str) -> tuple[int, list[str], str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out.splitlines(), err


HOSTS = [f"n{i}" for i in range(6)]


def healthy(a, b):
    return 100.0


def slow_n3(a, b):
    return 50.0 if "n3" in (a, b) else 100.0


def test_findings_of_a_slow_host_golden(tmp_path, capsys):
    f = write_run(tmp_path / "run.jsonl", HOSTS, slow_n3, recheck={"host n3": (50, 100)})
    code, lines, err = run(capsys, "findings", str(f), "--drain-list", str(tmp_path / "drain"))
    assert code == 1 and err == ""
    assert lines[1:] == [
        f"#   derived again from {f} (run r6 of 2026-12-01T00:00:00, tcp)",
        "#   pairwise: reference 100.0 MB/s, 20.00 us (the median host's); slowest pair 50.0 MB/s",
        "#   slow-host: n3: 50.0 MB/s, 50 % (95 % CI 50-50 %) of the reference 100.0 MB/s over every pair it is in "
        "(5 of 5 pairs slow); again alone 50.0 MB/s, a control pair 100.0 (50 %); again alone 50.0 MB/s, a control "
        "pair 100.0 (50 %)",
        f"# drain list: 1 host(s) written to {tmp_path / 'drain'} (n3); reasons in {tmp_path / 'drain'}.reasons"]
    assert (tmp_path / "drain").read_text() == "n3\n"


def test_latency_is_said_as_a_factor_of_the_reference_not_as_a_share(tmp_path, capsys):
    """A host whose pairs take 6 times the reference's latency is '6.0x' it (not '17 %' of it), the
    whole cluster's latency up 1.6x is '1.6x the baseline's', and a class of links 28 % slower than
    its expected latency is '28 % worse'."""
    def lat(a, b):
        return 120.0 if "n3" in (a, b) else 20.0

    f = write_run(tmp_path / "run.jsonl", HOSTS, healthy, lat=lat, recheck_latency={"host n3": (120, 20)})
    code, lines, _ = run(capsys, "findings", str(f))
    assert code == 1
    assert ("#   slow-host-latency: n3: 120.00 us, 6.0x (95 % CI 6.0-6.0x) the reference 20.00 us over every pair "
            "it is in (5 of 5 pairs slow); again alone 120.00 us, a control pair 20.00 (6.0x); again alone 120.00 "
            "us, a control pair 20.00 (6.0x)") in lines, lines
    old = write_run(tmp_path / "old.jsonl", HOSTS, healthy)
    new = write_run(tmp_path / "new.jsonl", HOSTS, healthy, lat=lambda a, b: 32.0, start="2026-12-08T00:00:00")
    code, lines, _ = run(capsys, "diff", str(old), str(new))
    assert code == 1 and "#   latency: the median pair at 1.6x the baseline's" in lines, lines
    assert "#   lost-cluster-latency: every pair: the median at 1.6x the baseline's of 2026-12-01 (latency)" in lines
    ref = tmp_path / "ref.csv"
    ref.write_text("link,metric,expected,warn_pct,fail_pct\nany,lat_us,25,20,50\n")
    code, lines, _ = run(capsys, "findings", str(new), "--reference", str(ref))
    assert any("reference any lat_us: median 32.00 against 25 (28 % worse; warn beyond 20 % worse, fail beyond "
               "50 %): warn" in line for line in lines), lines


def test_a_finding_says_which_of_its_pairs_its_figure_is_over(tmp_path, capsys):
    """In an oversubscribed tree whose crossing pairs are all uplink-bound, a slow host is judged on its
    pairs inside its switch, and says so (not 'every pair it is in (3 of 3 pairs slow)' for a host in
    15 pairs)."""
    names = [f"n{i}" for i in range(16)]
    topo = {"switch_of": {h: f"r{i // 4}" for i, h in enumerate(names)}, "parent": {f"r{i}": "spine" for i in range(4)}}

    def rate(a, b):
        if int(a[1:]) // 4 != int(b[1:]) // 4:
            return 25.0
        return 50.0 if "n5" in (a, b) else 100.0

    f = write_run(tmp_path / "run.jsonl", names, rate, topology=topo, recheck={"host n5": (50, 100)})
    _, lines, _ = run(capsys, "findings", str(f))
    host = [x for x in lines if x.startswith("#   slow-host: n5: ")]
    assert len(host) == 1 and "over its pairs inside its switch (3 of 3 pairs slow)" in host[0], lines


@pytest.mark.parametrize("serial", [False, True])
def test_a_suspect_cleared_is_put_down_to_what_its_schedule_could_do(tmp_path, capsys, serial):
    """A suspect fast when measured again was the tournament's cross-traffic or a busy moment; in a
    --serial run (one pair at a time) there was no cross-traffic to blame."""
    f = write_run(tmp_path / "run.jsonl", HOSTS, slow_n3, recheck={"host n3": (100, 100)}, options={"serial": serial})
    _, lines, _ = run(capsys, "findings", str(f))
    (cleared,) = [x for x in lines if "slow-host n3 cleared" in x]
    assert cleared.endswith("a busy moment (one pair at a time: no cross-traffic)" if serial else
                            "the tournament's cross-traffic or a busy moment"), cleared


def test_metrics_are_in_base_units(tmp_path, capsys):
    """--metrics: bytes per second and seconds (Prometheus' base units), not MB/s and us."""
    from prometheus_client.parser import text_string_to_metric_families

    f, prom = write_run(tmp_path / "run.jsonl", HOSTS, healthy), tmp_path / "run.prom"
    assert run(capsys, "findings", str(f), "--metrics", str(prom))[0] == 0
    families = {x.name: x for x in text_string_to_metric_families(prom.read_text())}
    assert {s.value for s in families["commbench_link_bandwidth_bytes_per_second"].samples} == {100e6}
    assert {round(s.value, 12) for s in families["commbench_link_latency_seconds"].samples} == {20e-6}
    assert {s.value for s in families["commbench_host_findings"].samples} == {0.0}
    assert "commbench_finding" not in families or not families["commbench_finding"].samples


def test_the_verdict_as_json_and_a_state_per_host(tmp_path, capsys):
    """--json: each finding with its kind, what it names, its effect, whether it was measured again,
    whether it fails and drains, what to do; --host-status: HOST<tab>state for every host, in the
    run's order: the slow host slow, a lost one lost, a slow cable's ends suspect, the rest ok."""
    names = [f"n{i}" for i in range(8)]

    def rate(a, b):
        return 50.0 if "n3" in (a, b) else 70.0 if {a, b} == {"n5", "n6"} else 100.0

    f = write_run(tmp_path / "run.jsonl", names, rate, recheck={"host n3": (50, 100), "cable n5 - n6": (70, 100)},
                  failed=(("n0", "n7", "n7"),))
    out, status = tmp_path / "v.json", tmp_path / "hosts.txt"
    code, _, err = run(capsys, "findings", str(f), "--json", str(out), "--host-status", str(status))
    assert code == 1 and err == ""
    doc = json.loads(out.read_text())
    assert doc["exit"] == 1 and doc["slow_pct"] == 25.0 and doc["transport"] == "tcp"
    by = {(x["kind"], x["a"], x.get("b")): x for x in doc["findings"]}
    host, cable = by[("slow-host", "n3", None)], by[("slow-link", "n5", "n6")]
    assert host["names"] == "host" and host["drains"] and host["fails"] and host["measured_again"] is True
    assert host["ratio_lo"] <= host["ratio"] == 0.5 <= host["ratio_hi"] and host["mb_s"] == 50.0
    assert "drain it" in host["action"] and "port or cable" in cable["action"] and not cable["drains"]
    assert ("failed", "n7", None) in by and by[("failed", "n7", None)]["measured_again"] is None
    assert doc["hosts"] == {"n0": "ok", "n1": "ok", "n2": "ok", "n3": "slow", "n4": "ok", "n5": "suspect",
                            "n6": "suspect", "n7": "lost"}
    assert status.read_text().splitlines() == [f"{h}\t{v}" for h, v in doc["hosts"].items()]


def test_hosts_under_a_slow_uplink_are_suspects_not_slow():
    """A slow uplink drains no host: the hosts under it are suspects (from the topology)."""
    from commbench.core.analysis.topology import Topology
    from commbench.core.analysis.verdict import host_status

    topo = Topology({f"n{i}": f"r{i // 2}" for i in range(4)}, {"r0": "s", "r1": "s"})
    found = [{"kind": "slow-uplink", "a": "r1", "note": "r1: ..."}]
    assert host_status(found, [f"n{i}" for i in range(4)], topo) == {"n0": "ok", "n1": "ok", "n2": "suspect",
                                                                      "n3": "suspect"}


def test_a_healthy_new_host_is_no_regression(tmp_path, capsys):
    """diff exits 0 when a healthy host joins (its kind, new-host, does not fail the verdict)."""
    old = write_run(tmp_path / "old.jsonl", HOSTS, healthy)
    new = write_run(tmp_path / "new.jsonl", [*HOSTS, "n6"], healthy, start="2026-12-08T00:00:00")
    code, lines, err = run(capsys, "diff", str(old), str(new))
    assert (code, err) == (0, ""), (lines, err)
    assert "#   new-host: n6: not in the baseline of 2026-12-01" in lines
    code, lines, _ = run(capsys, "diff", str(new), str(old))  # and one that left: said, no regression
    assert code == 0 and "#   gone-host: n6: in the baseline of 2026-12-08, not in this run" in lines


def test_diff_names_what_lost_and_fails(tmp_path, capsys):
    old = write_run(tmp_path / "old.jsonl", HOSTS, healthy)
    new = write_run(tmp_path / "new.jsonl", HOSTS, slow_n3, recheck={"host n3": (50, 100)})
    code, lines, _ = run(capsys, "diff", str(old), str(new))
    assert code == 1
    assert any(line.startswith("#   lost-host: host n3 lost 50 % since 2026-12-01") for line in lines), lines
    assert "#   new: slow-host n3 (not in the baseline of 2026-12-01)" in lines


def test_fixed_only_where_the_new_run_measured_it(tmp_path, capsys):
    """A finding of the baseline is fixed only where the new run measured it again: a host the new run
    did not measure is neither fixed nor new."""
    old = write_run(tmp_path / "old.jsonl", HOSTS, slow_n3, recheck={"host n3": (50, 100)})
    new = write_run(tmp_path / "new.jsonl", HOSTS, healthy)
    _, lines, _ = run(capsys, "diff", str(old), str(new))
    assert "#   fixed: slow-host n3 (in the baseline of 2026-12-01, not now)" in lines
    gone = write_run(tmp_path / "gone.jsonl", [h for h in HOSTS if h != "n3"], healthy)
    _, lines, _ = run(capsys, "diff", str(old), str(gone))
    assert not any(line.startswith("#   fixed") for line in lines), lines


TOPO = {"switch_of": {h: f"r{i // 3}" for i, h in enumerate(HOSTS)}, "parent": {"r0": "spine", "r1": "spine"}}


def test_findings_topology_reaches_every_transport(tmp_path, capsys):
    """--topology judges the pairs over --transports' others too: the same rows with the topology given
    offline or kept in the run's metadata give the same verdict (a degraded uplink over every transport,
    not over tcp only)."""
    names = [f"n{i}" for i in range(9)]
    conf = tmp_path / "topo.conf"
    conf.write_text("SwitchName=r0 Nodes=n[0-2]\nSwitchName=r1 Nodes=n[3-5]\nSwitchName=r2 Nodes=n[6-8]\n"
                    "SwitchName=spine Switches=r[0-2]\n")
    topo = {"switch_of": {h: f"r{i // 3}" for i, h in enumerate(names)}, "parent": {f"r{j}": "spine" for j in range(3)}}

    def uplink(a, b):
        return 50.0 if (a in names[3:6]) != (b in names[3:6]) else 100.0

    plain = write_run(tmp_path / "plain.jsonl", names, uplink, transports=("mpi",), recheck={"uplink r1": (50, 100)})
    kept = write_run(tmp_path / "kept.jsonl", names, uplink, transports=("mpi",), topology=topo,
                     recheck={"uplink r1": (50, 100)})
    _, offline, _ = run(capsys, "findings", str(plain), "--topology", str(conf))
    _, live, _ = run(capsys, "findings", str(kept))
    finding = [line for line in offline if line.startswith("#   slow-")]
    assert finding == [line for line in live if line.startswith("#   slow-")]
    assert len(finding) == 1 and finding[0].startswith("#   slow-uplink: r1:"), finding
    assert "slow over every transport (tcp, mpi)" in finding[0], finding


def test_findings_topology_places_several_ranks_a_host(tmp_path, capsys):
    """A --per-host all run names its endpoints host/rN: --topology places each under its host's switch."""
    names = [f"n{i // 2}/r{i}" for i in range(8)]
    conf = tmp_path / "topo.conf"
    conf.write_text("SwitchName=r0 Nodes=n[0-1]\nSwitchName=r1 Nodes=n[2-3]\nSwitchName=spine Switches=r[0-1]\n")
    f = write_run(tmp_path / "all.jsonl", names, lambda a, b: 100.0)
    code, lines, err = run(capsys, "findings", str(f), "--topology", str(conf))
    assert (code, err) == (0, ""), err
    assert "#   switch r0: 4 hosts, median pair 100.0 MB/s inside, 100.0 to the others" in lines


def test_a_hostile_host_name_is_refused_and_the_slow_hosts_still_drained(tmp_path, capsys):
    hostile = "n8 reason=evil nodename=login1"
    names = [*HOSTS, hostile, "n9\nno outliers", "n[1-3]", "n\x1b]0;x\x07"]
    f = write_run(tmp_path / "run.jsonl", names, slow_n3, recheck={"host n3": (50, 100)},
                  failed=((hostile, "n0", hostile), (hostile, "n1", hostile), (hostile, "n2", hostile)))
    drain = tmp_path / "drain"
    code, lines, err = run(capsys, "findings", str(f), "--drain-list", str(drain))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "4 endpoint name(s) that are no host's ('n8 reason=evil nodename=login1' and more" in err, err
    assert drain.read_text() == "n3\n"
    assert drain.with_name("drain.reasons").read_text().splitlines()[0].startswith("n3\tcommbench slow-host: n3:")
    assert not any("no outliers" in line or "login1" in line for line in lines), lines


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.text(min_size=1, max_size=80))
def test_no_name_from_a_file_reaches_the_drain_list_unless_a_host_could_have_it(name):
    ev = from_rows({"endpoints": ["n0", "n1", name]}, [], "t")
    assert (name in ev.names) == bool(ENDPOINT.fullmatch(name)) and (name in ev.refused) != (name in ev.names)
    hosts = drained([{"kind": "slow-host", "a": name, "note": name}, {"kind": "failed", "a": name, "b": None,
                                                                      "note": name}])
    for host, why in hosts.items():
        assert ENDPOINT.fullmatch(host) and "/" not in host
        assert why.isprintable() and why.isascii() and "\n" not in why
    assert "\n" not in one_line(name)


def test_every_kind_the_verdict_makes_is_declared():
    """The declarations decide exit status and the drain list: failing kinds are the slow, failed,
    lost and new ones and a failed reference; only host findings drain."""
    assert kinds.kind("new-host").fails is False and kinds.kind("gone-host").fails is False
    assert {k.name for k in kinds.KINDS.values() if k.drains} == {
        "slow-host", "slow-host-latency", "lossy-host", "lost-host", "lost-host-latency", "failed"}
    assert kinds.drains({"kind": "failed", "a": "n1", "b": None}) and not kinds.drains(
        {"kind": "failed", "a": "n1", "b": "n2"})
    for factor in ("host", "switch", "uplink", "group", "cable"):
        for m in (kinds.BANDWIDTH, kinds.LATENCY):
            assert kinds.slow(factor, m).fails and kinds.changed("lost", factor, m).fails
            assert not kinds.changed("gained", factor, m).fails
        assert kinds.slow(factor, kinds.LOSS).fails and kinds.slow(factor, kinds.LOSS).name.startswith("lossy-")


@pytest.mark.parametrize("flag", ["--drain-list", "--json", "--host-status"])
@pytest.mark.parametrize("target", ["fifo", "link"])
def test_the_drain_list_replaces_only_a_regular_file(tmp_path, capsys, target, flag):
    import os

    f = write_run(tmp_path / "run.jsonl", HOSTS, slow_n3, recheck={"host n3": (50, 100)})
    out = tmp_path / "drain"
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    if target == "fifo":
        os.mkfifo(out)
    else:
        out.symlink_to(victim)
    code, _, err = run(capsys, "findings", str(f), flag, str(out))
    says = "is a FIFO, not a regular file" if target == "fifo" else "is a symbolic link: commbench writes through none"
    assert code == 2 and says in err and len(err.strip().splitlines()) == 1, err
    assert victim.read_text() == "keep\n"


def test_resuming_a_csv_into_itself_is_refused(tmp_path):
    """A CSV results file is written anew: resuming it into itself would lose its rows to a kill."""
    from commbench.benchmarks.cluster import Cluster, ClusterOptions
    from commbench.core.config.run import CommonOptions
    from commbench.core.errors import UsageError
    from commbench.core.output.results import ResultsWriter

    p = tmp_path / "run.csv"
    same = {**CommonOptions(np=2).plain(), **ClusterOptions().plain()}  # the options the run measured with
    w = ResultsWriter(p, {"type": "meta", "bench": "cluster", "run_id": "r", "options": same,
                          "endpoints": ["n0", "n1"]}, ["test", "a", "b", "mb_s"])
    w.row({"test": "pairwise", "a": "n0", "b": "n1", "mb_s": 10.0})
    w.close()
    with pytest.raises(UsageError, match="a CSV results file is written anew"):
        Cluster.ranks(ClusterOptions(resume=str(p)), CommonOptions(output=str(p), np=2))
    assert Cluster.ranks(ClusterOptions(resume=str(p)), CommonOptions(output=str(tmp_path / "b.csv"), np=2)) == 2
    assert p.read_text().count("\n") == 3  # untouched
    with pytest.raises(UsageError, match="measured with --bw-size 1M, this one 4M: resume with the options"):
        Cluster.ranks(ClusterOptions(resume=str(p), bw_size="4M"), CommonOptions(output=str(tmp_path / "b.csv"), np=2))


def test_a_cable_of_a_slow_host_no_slower_than_it_is_the_hosts_finding():
    """Without a topology a slow host's pairs that also shared uplinks stand out further and are taken
    for cables; measured again as slow as the host, such a cable is cleared naming its host, and one
    clearly slower than its host stays a finding."""
    from commbench.core.analysis.kinds import BANDWIDTH
    from commbench.core.analysis.verdict import _host_cables

    found = [{"kind": "slow-host", "a": "n1", "_name": "n1"},
             {"kind": "slow-link", "a": "n1", "b": "n2", "_name": "n1 - n2"},
             {"kind": "slow-link", "a": "n3", "b": "n1", "_name": "n3 - n1"},
             {"kind": "slow-link", "a": "n4", "b": "n5", "_name": "n4 - n5"}]
    share = {"n1": 0.5, "n1 - n2": 0.48, "n3 - n1": 0.2, "n4 - n5": 0.5}
    cleared: list = []
    kept = _host_cables(found, share, 0.75, BANDWIDTH, cleared)
    assert [f["_name"] for f in kept] == ["n1", "n3 - n1", "n4 - n5"]
    assert [c[1] for c in cleared] == ["n1 - n2"] and "as slow-host n1 (50 %)" in cleared[0][2]
