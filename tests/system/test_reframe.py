"""contrib/reframe/commbench_checks.py run by ReFrame itself (reframe-hpc from PyPI) on its generic
system, whose local scheduler runs the checks' command and commbench's own launcher starts the ranks:
the checks pass and report their figures; a system's reference the run misses fails the check in
ReFrame's performance stage, as a site's would."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CHECKS = Path(__file__).resolve().parents[2] / "contrib" / "reframe" / "commbench_checks.py"
pytestmark = [pytest.mark.slow, pytest.mark.skipif(shutil.which("reframe", path=str(Path(sys.executable).parent))
                                                   is None, reason="reframe-hpc is not installed (pip: [dev])")]


def reframe(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "NO_COLOR": "1"}
    return subprocess.run([str(Path(sys.executable).parent / "reframe"), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


def test_the_checks_run_under_reframe_and_report_their_figures(tmp_path):
    r = reframe(tmp_path, "-c", str(CHECKS), "-r", "-n", "CommbenchP2P$")
    assert r.returncode == 0, r.stdout[-3000:]
    assert "Ran 1/1 test case(s)" in r.stdout and "0 failure(s)" in r.stdout, r.stdout[-2000:]
    lat = [ln for ln in r.stdout.splitlines() if ln.startswith("P: latency_8B: ")]
    bw = [ln for ln in r.stdout.splitlines() if ln.startswith("P: bandwidth_4M: ")]
    assert lat and 0 < float(lat[0].split()[2]) < 10_000 and bw and float(bw[0].split()[2]) > 0, r.stdout[-2000:]
    r = reframe(tmp_path, "-c", str(CHECKS), "-r", "-n", "CommbenchCluster$")
    # ranks of one machine, busy or not: every suspect a busy moment made is cleared when measured again
    assert r.returncode == 0 and "0 failure(s)" in r.stdout, r.stdout[-3000:]
    figure = [ln for ln in r.stdout.splitlines() if ln.startswith("P: pair_bandwidth: ")]
    (verdict,) = tmp_path.glob("output/**/CommbenchCluster/verdict.json")
    doc = json.loads(verdict.read_text())
    assert figure and float(figure[0].split()[2]) == doc["reference"]["mb_s"] > 0, r.stdout[-2000:]
    hosts = (verdict.parent / "hosts.txt").read_text().splitlines()
    assert doc["exit"] == 0 and hosts and all(line.endswith("\tok") for line in hosts), hosts


def test_a_systems_reference_the_run_misses_fails_the_check(tmp_path):
    check = tmp_path / "site_checks.py"
    check.write_text(f"""import sys
sys.path.insert(0, {str(CHECKS.parent)!r})
import reframe as rfm
from commbench_checks import CommbenchP2P


@rfm.simple_test
class CommbenchP2PSite(CommbenchP2P):
    reference = {{"generic:default": {{"latency_8B": (0.001, None, 0.1, "us"),
                                      "bandwidth_4M": (None, None, None, "MB/s")}}}}
""")
    r = reframe(tmp_path, "-c", str(check), "-r", "-n", "CommbenchP2PSite")
    assert r.returncode != 0 and "Failing phase: performance" in r.stdout, r.stdout[-3000:]
    assert "latency_8B=" in r.stdout and "expected 0.001" in r.stdout, r.stdout[-2000:]
