"""The unix transport: AF_UNIX stream sockets between ranks on one host, messages intact (validated)
point to point and in a collective, its names holding no secret, ranks on several hosts refused."""

from __future__ import annotations

import socket
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from commbench.core.config.run import CommonOptions, RunConfig
from commbench.core.errors import PeerError, UsageError
from commbench.transports.tcp import TcpTransport
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


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
                    max_leaves=6)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(told=JSON)
def test_a_peers_address_is_taken_only_in_the_shape_listen_gives(told):
    """What a peer tells as its address comes over the network: a name (unix) or [host, port] (tcp),
    anything else ends the connect naming the peer, before any socket is opened with it."""
    w = world(["h", "h"])
    w.describe = lambda r: f"rank {r} on host h"
    t = TcpTransport(w, RunConfig(CommonOptions(), 2))
    shaped = isinstance(told, str) or (isinstance(told, list) and len(told) == 2 and isinstance(told[0], str)
                                       and type(told[1]) is int)
    if shaped:
        assert t.address(told, 1) == told
    else:
        with pytest.raises(PeerError, match="rank 1 on host h told its tcp address as"):
            t.address(told, 1)
