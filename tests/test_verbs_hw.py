"""On an RDMA device (hardware or Soft-RoCE: `rdma link add rxe0 type rxe netdev eth0`): RC SEND and
RDMA WRITE with immediate ping-pong at 8 B and 1 MiB, and a bandwidth run, between two processes on
one device, through the CLI as users run it. Elsewhere they skip with pyverbs' reason.

Run: .venv/bin/python -m pytest -m rdma   (add COMMBENCH_IB_DEV=mlx5_0 / COMMBENCH_GID_INDEX=3 for RoCE)
"""

from __future__ import annotations

import os

import pytest
from conftest import commbench, table_rows


def _no_device_reason() -> str | None:
    try:
        from pyverbs.device import get_device_list
        from pyverbs.pyverbs_error import PyverbsError
    except ImportError as exc:
        return f"pyverbs is not importable: {exc}"
    try:
        return None if get_device_list() else "no RDMA device (empty device list)"
    except PyverbsError as exc:
        return f"no RDMA device: pyverbs says {exc}"


REASON = _no_device_reason()
pytestmark = [pytest.mark.rdma, pytest.mark.skipif(REASON is not None, reason=REASON or "")]
DEV = [*(["--ib-dev", os.environ["COMMBENCH_IB_DEV"]] if "COMMBENCH_IB_DEV" in os.environ else []),
       *(["--gid-index", os.environ["COMMBENCH_GID_INDEX"]] if "COMMBENCH_GID_INDEX" in os.environ else [])]


@pytest.mark.parametrize("op", ["send", "write"])
def test_ping_pong(op):
    r = commbench("p2p-latency", "-t", "verbs", "--verbs-op", op, "-m", "8,1M", "-i", "200", "--validate", *DEV)
    assert r.code == 0, r.err
    rows = table_rows(r.out)
    assert [row[0] for row in rows] == ["8", "1048576"] and all(row[-1] == "0" for row in rows)
    assert f"verbs ({op}," in r.out


@pytest.mark.parametrize("op", ["send", "write"])
def test_bandwidth(op):
    r = commbench("p2p-bandwidth", "-t", "verbs", "--verbs-op", op, "-m", "64K,1M", "-i", "20", "--validate", *DEV)
    assert r.code == 0, r.err
    rows = table_rows(r.out)
    assert len(rows) == 2 and all(float(row[4]) > 0 and row[-1] == "0" for row in rows)  # MB/s, #wrong


def test_events_mode_and_skewed_buffers():
    r = commbench("p2p-latency", "-t", "verbs", "--poll", "blocking", "--payload", "skew", "-i", "100",
                  "--validate", *DEV)
    assert r.code == 0, r.err
    assert all(row[-1] == "0" for row in table_rows(r.out))
