"""The decided run the local launcher hands its ranks (launch/plan.py; planning.plan_of and planned): it
comes out of a rank's side as it went in, is read once; a plan whose HMAC does not hold with the run's
token, one handed to a process the launcher did not start, and options no command line could give are
refused in one line."""

from __future__ import annotations

import contextlib
import io
import os

import pytest

from commbench import cli, planning
from commbench.core.errors import UsageError
from commbench.core.run.placement import ENV_TOKEN
from commbench.launch import plan

TOKEN = "0123456789abcdef0123456789abcdef"


@pytest.fixture
def a_rank(monkeypatch):
    """This process as a rank the local launcher started: its parent named, the run's token given."""
    monkeypatch.setenv(plan.ENV_LAUNCHER, str(os.getppid()))
    monkeypatch.setenv(ENV_TOKEN, TOKEN)

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
    job, body = plan.decode(plan.seal(planning.plan_of(bench_cls, config), TOKEN), TOKEN)
    assert job == "benchmark"
    assert planning.planned(body) == (bench_cls, transport_cls, config)


def test_the_plan_is_read_once_and_not_passed_on(monkeypatch, a_rank):
    fd = plan.memfd(plan.seal(plan.encode("train", {"workers": 2, "model": "vgg16"}), TOKEN))
    monkeypatch.setenv(plan.ENV_PLAN_FD, str(fd))
    assert plan.received() == ("train", {"workers": 2, "model": "vgg16"})
    assert plan.ENV_PLAN_FD not in os.environ  # nothing this rank starts sees it
    with pytest.raises(OSError):
        os.fstat(fd)  # closed
    assert plan.received() is None


FORGED = "was not made by this run's launcher"


@pytest.mark.parametrize("damage,says", [
    (lambda b: b.replace(b'"workers": 2', b'"workers": 3'), FORGED),
    (lambda b: b[:-5], FORGED),
    (lambda b: b'{"job": "train", "body": {"workers": 2}}', FORGED),  # no HMAC
    (lambda b: plan.seal(plan.encode("train", {"workers": 2}), "another run's token"), FORGED),
    (lambda b: b"\xff" * 40, FORGED),
    (lambda b: plan.seal(b"\xff" * 40, TOKEN), "unreadable"),
    (lambda b: plan.seal(b'{"job": "train", "body": []}', TOKEN), "is not a plan"),
])
def test_a_damaged_or_forged_plan_is_refused_in_one_line(monkeypatch, a_rank, damage, says):
    good = plan.seal(plan.encode("train", {"workers": 2}), TOKEN)
    with pytest.raises(UsageError, match=says):
        plan.decode(damage(good), TOKEN)
    fd = plan.memfd(damage(good))
    monkeypatch.setenv(plan.ENV_PLAN_FD, str(fd))
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert cli.main(["p2p-latency"]) == 2
    assert says in err.getvalue() and len(err.getvalue().strip().splitlines()) == 1


def test_a_plan_variable_left_for_another_process_is_refused(monkeypatch):
    """`commbench show x` with the variable in its environment ran a benchmark: a process whose parent
    is not the launcher that named itself takes no plan."""
    fd = plan.memfd(plan.seal(plan.encode("train", {"workers": 2}), TOKEN))
    monkeypatch.setenv(plan.ENV_PLAN_FD, str(fd))
    monkeypatch.setenv(ENV_TOKEN, TOKEN)
    monkeypatch.setenv(plan.ENV_LAUNCHER, str(os.getpid()))  # itself, not its parent
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert cli.main(["show", "x.jsonl"]) == 2
    assert "not started by commbench's launcher" in err.getvalue() and len(err.getvalue().strip().splitlines()) == 1


@pytest.mark.parametrize("change,says", [
    (lambda b: b["common"].update(iterations=10**12), "--iterations"),
    (lambda b: b["common"].update(inject_corruption=-1), "--inject-corruption"),
    (lambda b: b["common"].update(transport="nothing"), "unknown transport"),
    (lambda b: b["common"].update(nonsense=1), "no options of this command"),
    (lambda b: b["own"].update(window=0), "--window"),
    (lambda b: b.pop("loops"), "is not a run's"),
])
def test_options_in_a_plan_go_through_their_declared_types(change, says):
    """A plan sealed by the launcher is trusted to be its, and still checked as a command line would be."""
    bench_cls, _, config = planning.decide(planning.parse_benchmark(["p2p-bandwidth", "-i", "30"]))
    _, body = plan.decode(plan.seal(planning.plan_of(bench_cls, config), TOKEN), TOKEN)
    change(body)
    with pytest.raises(UsageError, match=says):
        planning.planned(body)


def test_a_descriptor_that_is_not_a_plan_is_refused(monkeypatch, a_rank):
    monkeypatch.setenv(plan.ENV_PLAN_FD, "987")
    with pytest.raises(UsageError, match="unreadable"):
        plan.received()
