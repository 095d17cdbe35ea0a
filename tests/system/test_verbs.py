"""The verbs transport as users see it where pyverbs is installed and no RDMA device exists (this
machine, CI): one line, exit 2, naming the usable transports. The transport's code over an in-memory
fabric: tests/unit/test_verbs.py; on hardware: test_verbs_hw.py (-m rdma)."""

from __future__ import annotations

from conftest import commbench
from unit.test_verbs import no_device


# -- what a user sees here -------------------------------------------------------------------------
@no_device
def test_no_device_is_one_line_exit_2_naming_usable_transports():
    r = commbench("p2p-latency", "--transport", "verbs", "-m", "8")
    assert r.code == 2, r.err
    assert r.err.count("\n") == 1 and "Traceback" not in r.err
    assert "no RDMA device found (pyverbs: Failed to get devices list)" in r.err  # pyverbs' own error
    usable = r.err.split("usable transports here: ")[1].strip().split(", ")
    assert {"tcp", "grpc"} <= set(usable) and "verbs" not in usable and "ipoib" not in usable


@no_device
def test_no_device_with_every_benchmark_and_op():
    for args in (["p2p-bandwidth", "--verbs-op", "write"], ["ps-throughput", "--poll", "blocking"],
                 ["allreduce", "--ib-dev", "mlx5_0", "--ib-port", "2", "--gid-index", "3"]):
        r = commbench(*args, "--transport", "verbs")
        assert r.code == 2 and "no RDMA device found" in r.err and r.err.count("\n") == 1, (args, r.err)


def test_bad_verbs_flags_are_usage_errors():
    r = commbench("p2p-latency", "-t", "verbs", "--verbs-op", "read")
    assert r.code == 2 and "--verbs-op" in r.err and "Traceback" not in r.err
    r = commbench("p2p-latency", "-t", "verbs", "--verbs-pool-mb", "0")
    assert r.code == 2 and "argument --verbs-pool-mb: must be a finite number above 0" in r.err


# -- queue-pair info ------------------------------------------------------------------------------


# -- pool sizing, SGE mapping, credits, states, port checks ------------------------------------------
















