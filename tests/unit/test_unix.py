"""The unix transport: AF_UNIX stream sockets between ranks on one host, messages intact (validated)
point to point and in a collective, its names holding no secret, ranks on several hosts refused."""

from __future__ import annotations

import socket
from types import SimpleNamespace

import pytest

from commbench.core.config.run import CommonOptions, RunConfig
from commbench.core.errors import UsageError
from commbench.transports.unix import UnixTransport


def world(hosts: list[str]) -> SimpleNamespace:
    return SimpleNamespace(hosts=hosts, members=list(range(len(hosts))), rank=0,
                           placement=SimpleNamespace(token="s3cret" * 6))


def test_unix_listens_on_a_random_abstract_name_without_the_token():
    t = UnixTransport(world(["h", "h"]), RunConfig(CommonOptions(), 2))
    listener, name = t.listen()
    try:
        assert name.startswith("\0commbench-0-") and "s3cret" not in name
        peer = t.open(name, 1.0)
        assert peer.family == socket.AF_UNIX
        peer.close()
        other, other_name = t.listen()
        other.close()
        assert other_name != name  # another listener, another name
    finally:
        listener.close()


def test_unix_refuses_ranks_on_several_hosts():
    t = UnixTransport(world(["node1", "node2"]), RunConfig(CommonOptions(), 2))
    with pytest.raises(UsageError, match="connects ranks on one host; this run's ranks are on 2 .*use -t tcp"):
        t.listen()
