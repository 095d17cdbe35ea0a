"""The start-of-run check of what else the machine is doing: busy-polling ranks that would share cores
with other work get a warning line in the table's header (and in `show`'s, from the metadata)."""

from __future__ import annotations

from commbench.benchmarks.p2p_latency import P2PLatency
from commbench.core.measure import machine


def test_busy_cpus_reads_proc_stat():
    got = machine.busy_cpus(0.05)
    assert got is not None and 0 <= got["busy"] <= got["cpus"] * 1.05 + 0.5 and got["cpus"] >= 1


def test_crowded_only_when_the_spinning_ranks_and_the_work_there_exceed_the_cpus():
    assert machine.crowded({"busy": 0.1, "cpus": 2}, 2) is None  # an idle 2-core machine, two ranks spinning
    assert machine.crowded({"busy": 1.2, "cpus": 2}, 0) is None  # blocking ranks: nothing spins
    assert machine.crowded({"busy": 3.0, "cpus": 16}, 2) is None
    warn = machine.crowded({"busy": 1.2, "cpus": 2}, 2)
    assert warn.startswith("# warning: 1.2 of 2 CPUs") and "--poll blocking" in warn
    assert machine.crowded(None, 2) is None


def test_the_header_says_it_from_the_metadata():
    meta = {"options": {"transport": "tcp", "mode": "busy-poll", "ranks": 2, "loops": "OSU", "validate": None},
            "hosts": ["vm", "vm"], "versions": {"commbench": "0"}}
    assert not any("warning" in line for line in P2PLatency.header(meta))
    meta["cpu"] = {"busy": 1.5, "cpus": 2, "spinning": 2}
    assert any(line.startswith("# warning: 1.5 of 2 CPUs") for line in P2PLatency.header(meta))
