"""The decided run the local launcher hands its ranks (launch/plan.py; planning.plan_of and planned): it
comes out of a rank's side as it went in, is read once, and a plan that does not match its digest is
refused in one line."""

from __future__ import annotations

import contextlib
import io
import os

import pytest

from commbench import cli, planning
from commbench.core.errors import UsageError
from commbench.launch import plan

CASES = [
    ["p2p-latency", "-m", "8:1K", "-i", "30", "-x", "3"],
    ["p2p-bandwidth", "-t", "unix", "--payload", "skew", "--buffers", "7", "--seed", "5", "-W", "16"],
    ["p2p-latency", "--payload", "resnet50", "--tensors-per-message", "40", "--precision", "2"],
    ["p2p-latency", "-t", "grpc", "--grpc-call", "unary", "--time", "0.5", "--validate", "untimed"],
    ["allreduce", "--np", "4", "-b", "4K", "-e", "64K", "-o", "x.csv"],
    ["ps-throughput", "--payload", "random:vgg16", "--workers", "2"],
    ["cluster", "--tests", "pairwise,ring", "--np", "4"],
]


@pytest.mark.parametrize("argv", CASES, ids=[" ".join(a[:3]) for a in CASES])
def test_a_decided_run_reaches_the_ranks_as_decided(argv):
    bench_cls, transport_cls, config = planning.decide(planning.parse_benchmark(argv))
    job, body = plan.decode(planning.plan_of(bench_cls, config))
    assert job == "benchmark"
    assert planning.planned(body) == (bench_cls, transport_cls, config)


def test_the_plan_is_read_once_and_not_passed_on(monkeypatch):
    fd = plan.memfd(plan.encode("train", {"workers": 2, "model": "vgg16"}))
    monkeypatch.setenv(plan.ENV_PLAN_FD, str(fd))
    assert plan.received() == ("train", {"workers": 2, "model": "vgg16"})
    assert plan.ENV_PLAN_FD not in os.environ  # nothing this rank starts sees it
    with pytest.raises(OSError):
        os.fstat(fd)  # closed
    assert plan.received() is None


@pytest.mark.parametrize("damage,says", [
    (lambda b: b.replace(b'"workers": 2', b'"workers": 3'), "does not match its digest"),
    (lambda b: b[:-5], "unreadable"),
    (lambda b: b'{"job": "train", "body": [], "sha256": "00"}', "does not match its digest"),
    (lambda b: b"\xff" * 40, "unreadable"),
])
def test_a_damaged_plan_is_refused_in_one_line(monkeypatch, damage, says):
    good = plan.encode("train", {"workers": 2})
    with pytest.raises(UsageError, match=says):
        plan.decode(damage(good))
    fd = plan.memfd(damage(good))
    monkeypatch.setenv(plan.ENV_PLAN_FD, str(fd))
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert cli.main(["p2p-latency"]) == 2
    assert says in err.getvalue() and len(err.getvalue().strip().splitlines()) == 1


def test_a_descriptor_that_is_not_a_plan_is_refused(monkeypatch):
    monkeypatch.setenv(plan.ENV_PLAN_FD, "987")
    with pytest.raises(UsageError, match="unreadable"):
        plan.received()
