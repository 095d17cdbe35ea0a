"""Emulated hosts (network namespaces + veth + bridge, tc tbf on both ends): up/down on 2 and 3 hosts,
the shaped rate measured by a commbench bandwidth run across them, benchmarks and bad input."""

from __future__ import annotations

from commbench.launch.hosts import parse_rate


def test_rates_parse_like_tc():
    assert parse_rate("100mbit") == 100e6 and parse_rate("1gbit") == 1e9 and parse_rate("1.5Gbit") == 1.5e9
    assert parse_rate("50mbps") == 400e6 and parse_rate("none") is None
















