"""The ipoib transport end to end, `commbench devices` and `compare` over what this host has (the
discovery over fake sysfs trees: tests/unit/test_devices.py)."""

import json
import os

import pytest
from conftest import GRPC_CPP_REASON, commbench, table_rows
from unit.test_devices import fake_sysfs

from commbench.core.errors import UsageError
from commbench.transports.ipoib import choose


def test_no_ipoib_names_what_exists(tmp_path):
    """Counted by kind, in a line as short with 300 interfaces (emulated hosts' veths) as with 2."""
    root = fake_sysfs(tmp_path, {"eth0": 1, "lo": 772, **{f"cbv{i}": 1 for i in range(300)}})
    with pytest.raises(UsageError, match=r"no IPoIB interface found .*; here: 301 ether, 1 loopback\): on a host "
                                         r"with an InfiniBand adapter, load ib_ipoib .* or use -t tcp$"):
        choose(None, root)
    r = commbench("p2p-latency", "-t", "ipoib", env={"COMMBENCH_SYSFS": str(root)})
    usable = "grpc, mpi, tcp" if GRPC_CPP_REASON else "grpc, grpc-cpp, mpi, tcp"
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1 and f"usable transports here: {usable}" in r.err


@pytest.mark.parametrize("over", ["tcp", "grpc"])
def test_ipoib_data_path_end_to_end(tmp_path, over):
    """A fake tree that calls lo an InfiniBand interface: the whole ipoib path runs over 127.0.0.1."""
    root = fake_sysfs(tmp_path, {"eth0": 1, "lo": 32})
    r = commbench("p2p-latency", "-t", "ipoib", "--over", over, "-m", "8,64K", "-i", "50", "--validate",
                  env={"COMMBENCH_SYSFS": str(root)})
    assert r.code == 0, r.err
    assert f"ipoib ({over} over lo," in r.out
    assert [row[-1] for row in table_rows(r.out)] == ["0", "0"]


def test_devices_json_here():
    r = commbench("devices", "--json")
    assert r.code == 0, r.err
    rep = json.loads(r.out)
    assert rep["transports"]["tcp"] == "usable" and rep["transports"]["grpc"] == "usable"
    assert "lo" in rep["interfaces"] and "127.0.0.1" in rep["interfaces"]["lo"]["ipv4"]
    assert rep["libraries"]["grpcio"]
    if not rep["rdma"]:
        assert rep["rdma_reason"]
    text = commbench("devices")
    assert text.code == 0 and "transports:" in text.out and "RDMA devices:" in text.out


def test_real_pyverbs_without_a_device():
    """The distribution's pyverbs is the real one; with no device it raises its own error."""
    device = pytest.importorskip("pyverbs.device", reason="python3-pyverbs not installed (launchers/setup.sh --dev)")
    from pyverbs.pyverbs_error import PyverbsError

    if os.path.isdir("/sys/class/infiniband") and os.listdir("/sys/class/infiniband"):
        pytest.skip("this host has RDMA devices")
    with pytest.raises(PyverbsError, match="Failed to get devices list"):
        device.get_device_list()


def test_compare_includes_ipoib_where_usable(tmp_path):
    """With lo posing as an IPoIB interface, `compare --only ipoib` runs ipoib over tcp and grpc."""
    root = fake_sysfs(tmp_path, {"eth0": 1, "lo": 32})
    r = commbench("compare", "--only", "ipoib", "-i", "50", env={"COMMBENCH_SYSFS": str(root)})
    assert r.code == 0, r.err
    summary = r.out[r.out.index("# commbench compare"):]
    assert "\nipoib tcp " in summary and "\nipoib grpc " in summary, summary
    assert "# transport: ipoib (tcp over lo" in r.out and "# transport: ipoib (grpc over lo" in r.out, r.out


def test_compare_of_unusable_transports_is_one_line():
    r = commbench("compare", "--only", "verbs")
    assert r.code == 2 and r.err.count("\n") == 1, r.err
    assert "none of the configurations asked for is usable here (verbs send: no RDMA device found" in r.err


def test_compare_that_runs_nothing_leaves_nothing(tmp_path):
    """`--only` matching nothing, or only unusable configurations: one line, exit 2, no empty results
    directory left in TMPDIR."""
    env = {"TMPDIR": str(tmp_path)}
    r = commbench("compare", "--only", "nosuch", env=env)
    assert r.code == 2 and r.err.count("\n") == 1 and "--only nosuch matches none of: tcp blocking" in r.err, r.err
    assert "[" not in r.err
    r = commbench("compare", "--only", "verbs", env=env)
    assert r.code == 2 and "none of the configurations asked for is usable here" in r.err, r.err
    assert not list(tmp_path.glob("commbench-compare-*"))
