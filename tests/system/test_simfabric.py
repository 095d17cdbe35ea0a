"""The simulated fabric (cluster --fabric sim), each run a process of its own (SimGrid runs one
simulation per process): bad command lines and scenarios in one line, the same planner and verdict as
a live run naming each planted fault, a simulated healthy run's spread against emulated runs', and a
simulated run's findings refused to the drain list and metrics."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import commbench


def _simgrid_reason() -> str | None:
    """Why SimGrid cannot run here, or None. Where Debian's python3-simgrid is installed (CI's set-up
    installs it) the module must import: that is a failure, never a skip."""
    try:
        import simgrid  # noqa: F401
        return None
    except ImportError as exc:
        if list(Path("/usr/lib/python3/dist-packages").glob("simgrid*.so")):
            raise AssertionError(f"python3-simgrid is installed but not importable here ({exc}): run "
                                 "bash launchers/setup.sh --dev") from None
        return f"SimGrid's Python module is not installed ({exc})"


SIMGRID_REASON = _simgrid_reason()
needs_simgrid = pytest.mark.skipif(SIMGRID_REASON is not None, reason=SIMGRID_REASON or "")


def _scenario(tmp_path: Path, **data) -> str:
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(data))
    return str(path)


@pytest.mark.parametrize("args, says", [
    (["--fabric", "sim"], "needs the hosts to simulate"),
    (["--scenario", "x.json"], "add --fabric sim"),
    (["--fabric", "sim", "--topology", "x.json", "--np", "4"], "leave --np and --hosts out"),
    (["--fabric", "sim", "--scenario", "/nonexistent.json"], "cannot read scenario file"),
])
def test_bad_sim_command_lines_are_one_line_and_exit_2(args, says):
    r = commbench("cluster", *args, timeout=60)
    assert r.code == 2 and says in r.err and len(r.err.strip().splitlines()) == 1 and "Traceback" not in r.err


@needs_simgrid
def test_a_scenario_naming_a_host_not_in_it_is_one_line(tmp_path):
    path = _scenario(tmp_path, hosts=4, faults=[{"kind": "host", "at": "n4", "share": 0.5}])
    r = commbench("cluster", "--fabric", "sim", "--scenario", path, timeout=60)
    assert r.code == 2 and "no such host" in r.err and len(r.err.strip().splitlines()) == 1


def _findings(out: Path) -> set[tuple]:
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    return {(r["kind"], r.get("a"), r.get("b")) for r in rows if r.get("test") == "finding"}


@needs_simgrid
@pytest.mark.parametrize("fault, expect", [
    (None, set()),
    ({"kind": "host", "at": "n5", "share": 0.5}, {("slow-host", "n5", None)}),
    ({"kind": "cable", "at": ["n1", "n2"], "share": 0.5}, {("slow-link", "n1", "n2")}),
    # below one host's rate (5 GB/s non-blocking at 15 %: 0.75 GB/s), so a pair alone through it is slow too
    ({"kind": "uplink", "at": "rack1", "share": 0.15}, {("slow-uplink", "rack1", None)}),
    ({"kind": "latency", "at": "n6", "add": "60us"}, {("slow-host-latency", "n6", None)}),
])
def test_the_verdict_names_each_planted_fault_on_the_simulated_fabric(tmp_path, fault, expect):
    """16 hosts in 4 racks under a non-blocking spine, the topology known: exactly the planted fault."""
    path = _scenario(tmp_path, hosts=16, racks=4, rate="10gbit", faults=[fault] if fault else [], seed=3)
    out = tmp_path / "r.jsonl"
    r = commbench("cluster", "--fabric", "sim", "--scenario", path, "--bw-time", "0.1", "--tests", "pairwise",
                  "-o", str(out), timeout=120)
    assert r.code == 0, r.err
    assert "# fabric: simulated on SimGrid" in r.out
    assert _findings(out) == expect, r.out[-3000:]


@needs_simgrid
@pytest.mark.parametrize("load", ["quiet", "busy"])
def test_a_simulated_healthy_runs_spread_is_the_emulated_runs_left_out_of_the_model(tmp_path, load):
    """The noise the simulated fabric draws (bench/noise_model.py, on emulated hosts at 200 Mbit/s)
    against emulated tournament runs the model was not made from: the two-sample Kolmogorov-Smirnov
    distance of the pairs' shares of their run's median stays below its 1 % critical value."""
    import numpy as np

    from commbench.emulators.simfabric import NOISE

    model = json.loads(NOISE.read_text())
    held, m = np.array(model["check"][load]["bw"]), model["check"][load]["pairs"]
    out = tmp_path / "r.jsonl"
    path = _scenario(tmp_path, hosts=24, rate="200mbit", noise=load, seed=11)
    r = commbench("cluster", "--fabric", "sim", "--scenario", path, "--tests", "pairwise", "--bw-size", "256K",
                  "-o", str(out), timeout=300)
    assert r.code == 0, r.err
    rows = [json.loads(line) for line in out.read_text().splitlines()[1:]]
    shares = np.sort([x["mb_s"] for x in rows if x.get("test") == "pairwise"])
    shares = shares / np.median(shares)
    n = len(shares)
    sim_cdf = np.arange(1, n + 1) / n
    emu_cdf = np.interp(shares, held, np.linspace(0, 1, len(held)), left=0.0, right=1.0)
    ks = float(np.max(np.abs(sim_cdf - emu_cdf)))
    critical = 1.628 * np.sqrt((n + m) / (n * m))  # alpha = 0.01
    assert n == 24 * 23 // 2 and ks < critical, (ks, critical, np.quantile(shares, [0.05, 0.5, 0.95]))


@needs_simgrid
def test_a_simulated_runs_findings_drain_and_export_nothing(tmp_path):
    """findings reads a simulated run as any other, but a drain list or metrics from it would act on
    hosts nothing measured (a rehearsal on the cluster's own topology names real nodes): refused."""
    path = _scenario(tmp_path, hosts=8, faults=[{"kind": "host", "at": "n3", "share": 0.4}], seed=1)
    out = tmp_path / "r.jsonl"
    assert commbench("cluster", "--fabric", "sim", "--scenario", path, "--tests", "pairwise", "--bw-time", "0.1",
                     "-o", str(out), timeout=120).code == 0
    plain = commbench("findings", str(out), timeout=60)
    assert plain.code == 1 and "slow-host: n3" in plain.out  # 1: a finding that fails the verdict
    for flag in ("--drain-list", "--metrics"):
        r = commbench("findings", str(out), flag, str(tmp_path / "x"), timeout=60)
        assert r.code == 2 and "simulated run" in r.err and not (tmp_path / "x").exists()


@needs_simgrid
def test_the_error_rate_harness_runs_its_small_seeded_plan(tmp_path):
    """bench/sim_errors.py --plan ci (the small seeded version of the error-rate tables): every run
    scored, no false finding on the healthy fabrics, each planted host and uplink named (a cable
    between racks is the tables' known miss: docs/notes/simulated-fabric.md)."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    r = subprocess.run([sys.executable, str(root / "bench" / "sim_errors.py"), str(tmp_path), "--plan", "ci"],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    runs = [json.loads(x) for x in (tmp_path / "runs.jsonl").read_text().splitlines()]
    assert len(runs) == 9 and all(x["exit"] in (0, 1) for x in runs)
    assert not [f for x in runs if x["kind"] == "healthy" for f in x["found"]]
    for x in runs:
        if x["kind"] in ("host", "uplink"):
            assert {(w["kind"], w["where"]) for w in x["want"]} <= {(f["kind"], f["where"]) for f in x["found"]}, x
    assert "| healthy | 16 |" in r.stdout
