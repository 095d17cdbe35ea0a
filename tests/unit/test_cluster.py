"""commbench cluster: the schedule (every pair once, disjoint rounds), the endpoints, robust outliers,
bad input, runs on loopback, a rank killed mid-run (a finding, the run goes on), a run killed
mid-way (its rows kept), and, as root, the planted slow host found on 8 emulated hosts over tcp,
mpi and grpc-cpp, and a rack uplink seen by bisection but not by the pairs inside a rack."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from commbench.benchmarks._cluster.schedule import endpoints, random_ring, serial, tournament
from commbench.core.errors import UsageError
from commbench.core.measure.outliers import outliers


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 80))
def test_tournament_meets_every_pair_once_in_disjoint_rounds(n):
    rounds = tournament(n)
    assert len(rounds) == (n - 1 if n % 2 == 0 else n)
    seen = [p for r in rounds for p in r]
    assert sorted(seen) == [(a, b) for a in range(n) for b in range(a + 1, n)]
    for r in rounds:
        ranks = [x for p in r for x in p]
        assert len(ranks) == len(set(ranks)) and len(r) == n // 2  # disjoint, and everyone plays (one bye if odd)
    assert sorted(p for r in serial(n) for p in r) == sorted(seen) and all(len(r) == 1 for r in serial(n))
    assert [rounds.pairs_in(k) for k in range(len(rounds))] == [len(r) for r in rounds]  # counted, not made
    assert rounds[-1] == rounds[len(rounds) - 1] and rounds[1:3] == list(rounds)[1:3]


@given(st.integers(10_000, 100_000), st.data())
def test_a_large_tournaments_round_is_made_alone(n, data):
    """Rank 0 makes round k of 100,000 endpoints' tournament without the 5 billion pairs before it:
    disjoint pairs, everyone but a bye, and the pair (0, x) of round k is the one the circle method
    gives (0 meets each other endpoint once, in turn)."""
    rounds = tournament(n)
    k = data.draw(st.integers(0, len(rounds) - 1))
    rnd = rounds[k]
    ends = [e for p in rnd for e in p]
    assert len(rnd) == n // 2 and len(set(ends)) == len(ends) and all(0 <= e < n for e in ends)
    partner = [b for a, b in rnd if a == 0]
    m = n + n % 2
    assert partner == ([] if 1 + (m - 2 - k) % (m - 1) == n else [1 + (m - 2 - k) % (m - 1)])


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 40), st.integers(0, 2**32 - 1))
def test_the_random_ring_is_another_ring(n, seed):
    order = random_ring(np.random.default_rng(seed), n)
    assert sorted(order) == list(range(n))
    links = {frozenset((order[i], order[(i + 1) % n])) for i in range(n)}
    assert n <= 3 or links != {frozenset((i, (i + 1) % n)) for i in range(n)}


@settings(max_examples=80, deadline=None)
@given(st.lists(st.sampled_from(["a", "b", "c", "d"]), min_size=1, max_size=12), st.sampled_from(
    ["auto", "first", "all", "0", "1", "2"]))
def test_endpoints_take_one_rank_per_host_or_say_why_not(hosts, per_host):
    per = {h: [r for r, x in enumerate(hosts) if x == h] for h in dict.fromkeys(hosts)}
    try:
        chosen = endpoints(hosts, per_host)
    except UsageError as exc:
        text = str(exc)
        assert "\n" not in text
        assert len(per) == 1 or per_host.isdigit(), text
        return
    if per_host == "all" or (per_host == "auto" and len(per) == 1):
        assert chosen == list(range(len(hosts)))
    else:
        k = 0 if not per_host.isdigit() else int(per_host)
        assert chosen == [rs[k] for rs in per.values()]
    assert len(chosen) >= 2


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 5), st.integers(1, 4), st.integers(0, 2), st.integers(0, 12))
def test_tree_cuts_send_every_pair_through_one_uplink(leaves, per, levels, k):
    """With a topology, the first cuts pair the hosts below one switch with hosts below its siblings
    (top switches first): every pair of cut k climbs through that child's uplink."""
    from commbench.benchmarks._cluster.schedule import tree_cut
    from commbench.core.analysis.topology import Topology

    names = [f"h{i}" for i in range(leaves * per)]
    parent = {f"l{j}": f"m{j % 2}" if levels == 2 else "top" for j in range(leaves)}
    if levels == 2:
        parent.update({"m0": "top", "m1": "top"})
    topo = Topology({n: f"l{i // per}" for i, n in enumerate(names)}, parent if levels else {})
    left, right = tree_cut(names, list(range(len(names))), topo, k)
    if left is None:
        return
    assert len(left) == len(right) > 0 and not set(left) & set(right)
    shared = set.intersection(*(set(topo.uplinks(names[a], names[b])) for a, b in zip(left, right, strict=True)))
    assert shared, (left, right)  # one uplink every pair of the cut climbs through


def test_outliers_find_the_planted_value_and_nothing_in_noise():
    rng = np.random.default_rng(5)
    noisy = list(100 + rng.normal(0, 3, 16))
    assert outliers(noisy, 0.25, low=True) == [] and outliers(noisy, 0.25, low=False) == []
    planted = noisy[:5] + [30.0] + noisy[6:]
    assert outliers(planted, 0.25, low=True) == [5]
    assert outliers([100, 100, 100, 100, 70], 0.25, low=True) == [4]  # no spread: the gap alone decides
    assert outliers([100, 100, 100, 80], 0.25, low=True) == []  # 20 % is within the threshold
    assert outliers([float("nan"), 100, 100, 10], 0.25, low=True) == [3]












def test_a_load_bound_tournament_measures_each_host_alone():
    """Rows only: the best pair alone at 118 MB/s against a tournament reference of 44 is load-bound; each
    host alone beside the best then makes the slow one a suspect that the attribution of the rounds missed."""
    from commbench.core.analysis.evidence import BW, Evidence

    names = [f"n{i}" for i in range(6)]
    ev = Evidence(names)
    rng = np.random.default_rng(2)
    for a in range(6):
        for b in range(a + 1, 6):
            ev.add({"test": "pairwise", "a": names[a], "b": names[b], "mb_s": 44 * (1 + rng.normal(0, 0.1))})
    assert ev.suspects(BW, 25) == [] and ev.load_bound(25) is None  # no control alone yet
    ev.add({"test": "recheck", "suspect": "tournament", "role": "control", "a": "n0", "b": "n1", "mb_s": 118.0})
    assert ev.load_bound(25) is not None
    for i, v in ((2, 118.0), (3, 39.0), (4, 117.0), (5, 119.0)):
        ev.add({"test": "alone", "a": "n0", "b": names[i], "mb_s": v})
    (e,) = ev.suspects(BW, 25)
    assert (e.kind, e.name, e.basis) == ("host", "n3", "alone") and 0.3 < e.ratio < 0.36
    assert "own load held its pairs to 37 %" in ev.summary(25)[0]


@pytest.mark.parametrize("budgeted", [False, True])
def test_no_run_names_a_one_pair_suspect_it_did_not_measure_again(budgeted):
    """Rows only (a sparse matrix as --budget leaves it, or a file without its rechecks): one pair's
    latency out of the spread is a suspect named as not confirmed, saying why; a host slow in every
    pair it is in stays a finding either way."""
    from commbench.core.analysis.evidence import Evidence
    from commbench.core.analysis.verdict import findings

    names = [f"n{i}" for i in range(12)]
    ev = Evidence(names, budgeted=budgeted)
    rng = np.random.default_rng(3)
    for rnd in tournament(12)[:3]:
        for a, b in rnd:
            bw, lat = (12 if 3 in (a, b) else 24), (90.0 if (a, b) == (0, 11) else 25.0)
            ev.add({"test": "pairwise", "a": names[a], "b": names[b], "mb_s": bw * (1 + rng.normal(0, .01)),
                    "lat_us": lat * (1 + rng.normal(0, .01))})
    found, lines = findings(ev, 25)
    kinds = {(f["kind"], f["a"]) for f in found}
    assert ("slow-host", "n3") in kinds
    assert ("slow-link-latency", "n0") not in kinds
    told = [line for line in lines if "slow-link-latency n0 - n11 not confirmed" in line]
    assert len(told) == 1 and ("--budget left no time" in told[0]) == budgeted, lines


def test_a_suspect_is_measured_again_through_a_probe_pair_and_beside_a_control_pair():
    """Each suspect's probe pair goes through it (a host with a partner in its own switch; an uplink
    from behind it to outside it) and its control pair concerns no suspect; a suspect slow in both
    passes is named, one fast again is cleared."""
    from commbench.core.analysis.evidence import BW, Evidence, probe_and_control
    from commbench.core.analysis.topology import Topology
    from commbench.core.analysis.verdict import findings

    names = [f"n{i}" for i in range(8)]
    topo = Topology({n: f"r{i // 4}" for i, n in enumerate(names)}, {"r0": "spine", "r1": "spine"})
    ev = Evidence(names, topo)
    for a in range(8):
        for b in range(a + 1, 8):
            ev.add({"test": "pairwise", "a": names[a], "b": names[b], "mb_s": 6.0 if 5 in (a, b) else 24.0,
                    "lat_us": 10.0})
    (suspect,) = ev.suspects(BW, 25)
    probe, control = probe_and_control(suspect, [suspect], names, topo, ev.bw)
    assert 5 in probe and {n // 4 for n in probe} == {1} and 5 not in control  # its own switch: no uplink
    assert ev.recheck_plan(BW, 25) == [("host n5", (probe,), (control,))]
    ev.add({"test": "recheck", "suspect": "host n5", "role": "probe", "mb_s": 5.9})
    ev.add({"test": "recheck", "suspect": "host n5", "role": "control", "mb_s": 23.9})
    assert ev.recheck_plan(BW, 25, second=True) == [("host n5", (probe,), (control,))]  # slow once: once more
    for role, v in (("control-2", 23.8), ("probe-2", 6.1)):
        ev.add({"test": "recheck", "suspect": "host n5", "role": role, "mb_s": v})
    found, cleared = findings(ev, 25)
    assert [(f["kind"], f["a"]) for f in found] == [("slow-host", "n5")] and not cleared
    assert found[0]["ratio_lo"] <= found[0]["ratio"] <= found[0]["ratio_hi"] and 0.2 < found[0]["ratio"] < 0.3
    ev.rechecks[(BW, "host n5")]["probe-2"] = 22.0  # fast the second time: a busy moment, cleared
    found, cleared = findings(ev, 25)
    assert found == [] and "cleared" in cleared[0]


@pytest.mark.parametrize("slow_again", [True, False])
def test_an_uplink_is_measured_again_as_loaded_as_a_round_loads_it(slow_again):
    """24 hosts in 6 racks whose uplinks carry all their hosts at once; r2's at half its rate, so its
    crossing pairs ran at half the rest in rounds where its hosts all crossed. A pair alone does not
    fill that uplink: the probe is a pair from each of r2's hosts to a host under each other rack, at
    once, and the control as many through another rack's uplink; named where the probe's pairs are
    slow against the control's, cleared where they are not."""
    from commbench.core.analysis.evidence import BW, Evidence
    from commbench.core.analysis.topology import Topology
    from commbench.core.analysis.verdict import findings

    names = [f"n{i}" for i in range(24)]
    topo = Topology({n: f"r{i // 4}" for i, n in enumerate(names)}, {f"r{r}": "spine" for r in range(6)})
    ev = Evidence(names, topo)
    for a in range(24):
        for b in range(a + 1, 16):
            crosses_r2 = (a // 4 == 2) != (b // 4 == 2)
            ev.add({"test": "pairwise", "a": names[a], "b": names[b], "mb_s": 12.0 if crosses_r2 else 24.0,
                    "lat_us": 10.0})
    assert [e.name for e in ev.suspects(BW, 25)] == ["r2"]
    ((suspect, probe, control),) = ev.recheck_plan(BW, 25)
    assert suspect == "uplink r2" and len(probe) == len(control) == 4
    assert sorted(a for a, _ in probe) == [8, 9, 10, 11] and all(b // 4 != 2 for _, b in probe)  # r2's hosts send
    assert len({next(i // 4 for i in p if i // 4 != 2) for p in probe}) == 4  # to four other racks
    ctl = {i // 4 for p in control for i in p}
    assert 2 not in ctl and len({i for p in control for i in p}) == 8  # through another rack's uplink
    assert len({a // 4 for a, _ in control}) == 1 and len({b // 4 for _, b in control}) == 4
    for second in ("", "-2"):
        for role, pairs, v in (("probe", probe, 12.0 if slow_again else 23.5), ("control", control, 23.8)):
            for a, b in pairs:
                ev.add({"test": "recheck", "a": names[a], "b": names[b], "suspect": suspect, "role": role + second,
                        "mb_s": v + a / 100})
    found, lines = findings(ev, 25)
    if slow_again:
        assert [(f["kind"], f["a"]) for f in found] == [("slow-uplink", "r2")]
        assert "again 4 pairs through it at once, 12.1 MB/s a pair" in found[0]["note"], found[0]["note"]
    else:
        assert found == [] and any(line.startswith("slow-uplink r2 cleared") for line in lines), lines




@pytest.mark.parametrize("cleared", [True, False])
def test_suspects_past_the_rechecks_cap_follow_the_ones_measured_again(cleared):
    """A loaded tournament: 11 of 28 pairs' latency at 2.5x. The rechecks take 8 (one per endpoint); the
    3 left out are not findings either way: where most of those measured again were cleared, the load;
    where those were slow again, each a suspect not confirmed (one pair measured once), saying why."""
    from commbench.core.analysis.evidence import LAT, Evidence
    from commbench.core.analysis.verdict import findings

    names = [f"n{i}" for i in range(8)]
    ev = Evidence(names)
    slow = {(0, 1), (0, 2), (1, 4), (2, 3), (2, 4), (2, 7), (3, 5), (3, 6), (4, 6), (5, 6), (6, 7)}
    for a in range(8):
        for b in range(a + 1, 8):
            ev.add({"test": "pairwise", "a": names[a], "b": names[b], "mb_s": 24.0,
                    "lat_us": 25.0 + a / 10 if (a, b) in slow else 10.0 + b / 100})
    plan = ev.recheck_plan(LAT, 25)
    assert len(plan) == 8 and len(ev.suspects(LAT, 25)) == 11
    for suspect, _, _ in plan:
        for role, v in (("probe", 10.1 if cleared else 25.2), ("control", 10.0)):
            ev.add({"test": "recheck-latency", "suspect": suspect, "role": role, "lat_us": v})
    for suspect, _, _ in ev.recheck_plan(LAT, 25, second=True):
        for role, v in (("control-2", 10.0), ("probe-2", 25.1)):
            ev.add({"test": "recheck-latency", "suspect": suspect, "role": role, "lat_us": v})
    found, lines = findings(ev, 25)
    assert len(found) == (0 if cleared else 8) and not any("not measured again" in f["note"] for f in found)
    told = [line for line in lines if "not confirmed" in line]
    assert (told[0].startswith("latency suspects: 3 not confirmed") and "8 of the 8 measured again were cleared"
            in told[0]) if cleared else (len(told) == 3 and all("more suspects than the rechecks take" in x
                                                                 for x in told)), told


def test_a_host_lost_mid_run_is_one_finding_and_never_a_probe_or_a_control():
    """Rows only: n5 slow in every pair, then a cable n1 - n2 slow; then n1 is lost (a recheck's pair with
    it failed, the row saying so). The slow host is still rechecked, through pairs without n1; n1's own
    cable is no finding of its own but said in n1's one failed finding."""
    from commbench.core.analysis.evidence import BW, Evidence
    from commbench.core.analysis.verdict import findings

    names = [f"n{i}" for i in range(8)]
    ev = Evidence(names)
    for a in range(8):
        for b in range(a + 1, 8):
            ev.add({"test": "pairwise", "a": names[a], "b": names[b], "lat_us": 10.0,
                    "mb_s": 6.0 if 5 in (a, b) else 9.0 if (a, b) == (1, 2) else 24.0})
    assert {s for s, _, _ in ev.recheck_plan(BW, 25)} == {"host n5", "cable n1 - n2"}
    ev.add({"test": "recheck", "round": 1, "a": "n1", "b": "n2", "suspect": "cable n1 - n2", "role": "probe",
            "error": "rank 1 on host n1 stopped responding (no heartbeat for 12 s)", "lost": "n1"})
    plan = ev.recheck_plan(BW, 25)
    assert [s for s, _, _ in plan] == ["host n5"] and all(1 not in x for _, p, c in plan for x in p + c)
    found, _ = findings(ev, 25)
    assert [(f["kind"], f["a"]) for f in found] == [("slow-host", "n5"), ("failed", "n1")]
    note = found[1]["note"]
    assert note.startswith("n1 lost: 1 pair(s) failed") and "stopped responding" in note
    assert "suspected before it was lost (slow-link n1 - n2)" in note


@pytest.mark.parametrize("again", [True, False])
def test_a_lossy_host_is_told_by_its_retransmissions_at_full_rate(again):
    """Every pair at full rate, but host n5's pairs sent 1 % of their segments again (TCP_INFO's
    counters in the rows) and the cable n1 - n2 0.5 %: attribution names a lossy host and a lossy
    cable, each measured again (a probe, a control); named where the probe still loses, cleared
    where it does not. No slow-* finding: the rate is fine."""
    from commbench.core.analysis.evidence import Evidence
    from commbench.core.analysis.kinds import LOSS
    from commbench.core.analysis.verdict import findings

    names = [f"n{i}" for i in range(8)]
    ev = Evidence(names)
    for a in range(8):
        for b in range(a + 1, 8):
            again_ = 110 if 5 in (a, b) else 55 if (a, b) == (1, 2) else 0
            ev.add({"test": "pairwise", "a": names[a], "b": names[b], "mb_s": 24.0, "lat_us": 10.0,
                    "tcp_retrans": again_, "tcp_data_segs": 11000})
    plan = ev.recheck_plan(LOSS, 25)
    assert {s for s, _, _ in plan} == {"host n5", "cable n1 - n2"}
    for suspect, _, _ in plan:
        lossy = again or suspect == "cable n1 - n2"
        for role, n in (("probe", 110 if lossy else 0), ("control", 0), ("probe-2", 110 if lossy else 1),
                        ("control-2", 0)):
            ev.add({"test": "recheck-loss", "suspect": suspect, "role": role, "mb_s": 24.0, "tcp_retrans": n,
                    "tcp_data_segs": 11000})
    found, lines = findings(ev, 25)
    got = {(f["kind"], f["a"], f.get("b")) for f in found}
    assert got == ({("lossy-host", "n5", None)} if again else set()) | {("lossy-link", "n1", "n2")}, found
    if again:
        host = next(f for f in found if f["kind"] == "lossy-host")
        assert host["loss_pct"] == 1.0 and host["note"].startswith("n5: 1.00 % of its segments sent again, 1.00 % more")
        assert "again alone 1.00 % of its segments sent again, a control pair 0.00 %" in host["note"], host["note"]
    else:
        assert any(line.startswith("lossy-host n5 cleared") for line in lines), lines
