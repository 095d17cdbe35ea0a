"""The simulated fabric (cluster --fabric sim): scenarios checked like command lines, and the same
planner and verdict as a live run naming each planted fault on SimGrid (one process a run: SimGrid
runs one simulation per process)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from commbench.core.analysis.topology import Topology
from commbench.core.errors import UsageError
from commbench.emulators.simfabric import racks, scenario_from
from tests.conftest import commbench


def _simgrid_reason() -> str | None:
    """Why SimGrid cannot run here, or None. Where Debian's python3-simgrid is installed (CI's set-up
    installs it) the module must import: that is a failure, never a skip."""
    try:
        import simgrid  # noqa: F401
        return None
    except ImportError as exc:
        if list(Path("/usr/lib/python3/dist-packages").glob("simgrid*.so")):
            raise AssertionError(f"python3-simgrid is installed but not importable here ({exc}): run "
                                 "bash launchers/setup.sh --dev") from None
        return f"SimGrid's Python module is not installed ({exc})"


SIMGRID_REASON = _simgrid_reason()
needs_simgrid = pytest.mark.skipif(SIMGRID_REASON is not None, reason=SIMGRID_REASON or "")
TOPO = racks(8, 2)


def test_racks_lay_hosts_out_as_hosts_up_does():
    t = racks(8, 2)
    assert t.switch_of["n3"] == "rack0" and t.switch_of["n4"] == "rack1" and t.parent == {"rack0": "spine",
                                                                                          "rack1": "spine"}
    assert racks(4, 1) == Topology({f"n{i}": "switch0" for i in range(4)})


@pytest.mark.parametrize("data, says", [
    ([], "a JSON object"),
    ({"hosts": 8, "flavour": 1}, "'flavour' is not a scenario key"),
    ({}, "say the platform"),
    ({"hosts": 7, "racks": 2}, "a whole number per rack"),
    ({"hosts": 1}, "from 2 to"),
    ({"hosts": True}, "from 2 to"),
    ({"hosts": 8, "rate": "fast"}, "tc's notation"),
    ({"hosts": 8, "rate": 10}, "a rate in tc's notation"),
    ({"hosts": 8, "oversubscription": 0.5}, "from 1 (non-blocking)"),
    ({"hosts": 8, "latency": "-1us"}, "not a time from 0 to 10 s"),
    ({"hosts": 8, "faults": [{"kind": "host", "at": "n9", "share": 0.5}]}, "no such host"),
    ({"hosts": 8, "faults": [{"kind": "host", "at": "n1", "share": 0}]}, "share 0 is not a share"),
    ({"hosts": 8, "faults": [{"kind": "host", "at": "n1", "share": 2}]}, "share 2 is not a share"),
    ({"hosts": 8, "faults": [{"kind": "host", "at": "n1"}]}, "share None is not a share"),
    ({"hosts": 8, "faults": [{"kind": "flood", "at": "n1", "share": 0.5}]}, "with K one of host, cable"),
    ({"hosts": 8, "faults": [{"kind": "cable", "at": "n1", "share": 0.5}]}, "two hosts"),
    ({"hosts": 8, "faults": [{"kind": "cable", "at": ["n1", "n1"], "share": 0.5}]}, "with itself"),
    ({"hosts": 8, "racks": 2, "faults": [{"kind": "uplink", "at": "rack7", "share": 0.5}]}, "no such switch"),
    ({"hosts": 8, "racks": 2, "faults": [{"kind": "uplink", "at": "spine", "share": 0.5}]}, "top of the tree"),
    ({"hosts": 8, "faults": [{"kind": "latency", "at": "n1"}]}, "says how much it adds"),
    ({"hosts": 8, "faults": [{"kind": "host", "at": "n1", "share": 0.5, "why": 1}]}, "not a fault's key"),
    ({"hosts": 8, "seed": -1}, "a whole number"),
])
def test_a_bad_scenario_is_one_usage_error_naming_it(data, says):
    with pytest.raises(UsageError) as exc:
        scenario_from(data, "--scenario s.json")
    assert says in str(exc.value) and "\n" not in str(exc.value) and "--scenario s.json" in str(exc.value)


@settings(max_examples=80, deadline=None)
@given(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-5, 5), st.text(max_size=5),
                 st.none(), st.booleans()))
def test_a_fault_share_is_accepted_only_strictly_between_0_and_1(share):
    data = {"hosts": 4, "faults": [{"kind": "cable", "at": ["n0", "n1"], "share": share}]}
    ok = isinstance(share, (int, float)) and not isinstance(share, bool) and 0 < share < 1
    if ok:
        assert scenario_from(data, "s").faults[0].share == share
    else:
        with pytest.raises(UsageError):
            scenario_from(data, "s")


def _scenario(tmp_path: Path, **data) -> str:
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(data))
    return str(path)


@pytest.mark.parametrize("args, says", [
    (["--fabric", "sim"], "needs the hosts to simulate"),
    (["--scenario", "x.json"], "add --fabric sim"),
    (["--fabric", "sim", "--topology", "x.json", "--np", "4"], "leave --np and --hosts out"),
    (["--fabric", "sim", "--scenario", "/nonexistent.json"], "cannot read scenario file"),
])
def test_bad_sim_command_lines_are_one_line_and_exit_2(args, says):
    r = commbench("cluster", *args, timeout=60)
    assert r.code == 2 and says in r.err and len(r.err.strip().splitlines()) == 1 and "Traceback" not in r.err


@needs_simgrid
def test_a_scenario_naming_a_host_not_in_it_is_one_line(tmp_path):
    path = _scenario(tmp_path, hosts=4, faults=[{"kind": "host", "at": "n4", "share": 0.5}])
    r = commbench("cluster", "--fabric", "sim", "--scenario", path, timeout=60)
    assert r.code == 2 and "no such host" in r.err and len(r.err.strip().splitlines()) == 1


def _findings(out: Path) -> set[tuple]:
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    return {(r["kind"], r.get("a"), r.get("b")) for r in rows if r.get("test") == "finding"}


@needs_simgrid
@pytest.mark.parametrize("fault, expect", [
    (None, set()),
    ({"kind": "host", "at": "n5", "share": 0.5}, {("slow-host", "n5", None)}),
    ({"kind": "cable", "at": ["n1", "n2"], "share": 0.5}, {("slow-link", "n1", "n2")}),
    # below one host's rate (5 GB/s non-blocking at 15 %: 0.75 GB/s), so a pair alone through it is slow too
    ({"kind": "uplink", "at": "rack1", "share": 0.15}, {("slow-uplink", "rack1", None)}),
    ({"kind": "latency", "at": "n6", "add": "60us"}, {("slow-host-latency", "n6", None)}),
])
def test_the_verdict_names_each_planted_fault_on_the_simulated_fabric(tmp_path, fault, expect):
    """16 hosts in 4 racks under a non-blocking spine, the topology known: exactly the planted fault."""
    path = _scenario(tmp_path, hosts=16, racks=4, rate="10gbit", faults=[fault] if fault else [], seed=3)
    out = tmp_path / "r.jsonl"
    r = commbench("cluster", "--fabric", "sim", "--scenario", path, "--bw-time", "0.1", "--tests", "pairwise",
                  "-o", str(out), timeout=120)
    assert r.code == 0, r.err
    assert "# fabric: simulated on SimGrid" in r.out
    assert _findings(out) == expect, r.out[-3000:]
