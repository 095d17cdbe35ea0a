"""The simulated fabric's scenarios (cluster --fabric sim), in-process: a scenario checked like a
command line (one UsageError naming the problem), racks laid out as ``hosts up --racks`` lays them."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from commbench.core.analysis.topology import Topology
from commbench.core.errors import UsageError
from commbench.emulators.simfabric import racks, scenario_from


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
