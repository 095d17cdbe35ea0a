"""IPoIB discovery against fake sysfs trees, the ipoib transport end to end, `commbench devices`,
and the real pyverbs' behaviour on a host without RDMA hardware."""


import pytest

from commbench.core.errors import UsageError
from commbench.transports.ipoib import choose, interfaces, ipoib_interfaces


def fake_sysfs(root, nets: dict[str, int]):
    for name, kind in nets.items():
        d = root / "class" / "net" / name
        d.mkdir(parents=True)
        (d / "type").write_text(f"{kind}\n")
        (d / "operstate").write_text("up\n")
        (d / "mtu").write_text("2044\n" if kind == 32 else "1500\n")
        (d / "speed").write_text("100000\n" if kind == 32 else "-1\n")
    return root


def test_discovery_in_a_fake_tree(tmp_path):
    root = fake_sysfs(tmp_path, {"eth0": 1, "ib0": 32, "ib1": 32, "lo": 772})
    assert ipoib_interfaces(root) == ["ib0", "ib1"]
    assert interfaces(root)["ib0"] == {"type": 32, "link": "infiniband", "state": "up", "mtu": 2044,
                                       "speed_mbps": 100000}
    assert interfaces(root)["eth0"]["speed_mbps"] is None
    assert choose(None, root) == "ib0" and choose("ib1", root) == "ib1"
    with pytest.raises(UsageError, match=r"'eth0' is not an IPoIB interface; IPoIB interfaces here: ib0, ib1"):
        choose("eth0", root)


def test_port_rate_from_speed_and_width_codes():
    from commbench.transports.devices import port_rate

    assert port_rate(32, 2) == 103.12  # EDR 4x: 25.78125 Gb/s per lane x 4
    assert port_rate(64, 2) == 212.5  # HDR 4x
    assert port_rate(1, 1) == 2.5 and port_rate(3, 2) is None


