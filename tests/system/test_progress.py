"""Progress: plain lines on stderr when not a terminal (throttled), a rich bar on a terminal that
leaves the table's rows intact."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest
from conftest import ENV, commbench, table_rows


def test_piped_run_has_no_progress_noise():
    r = commbench("p2p-latency", "-m", "8:1K", "-i", "50")
    assert r.code == 0 and r.err == "" and len(table_rows(r.out)) == 8


@pytest.mark.skipif(shutil.which("script") is None, reason="needs script(1) for a pseudo-terminal")
def test_terminal_shows_a_bar_and_keeps_the_rows():
    cmd = f"{sys.executable} -m commbench p2p-latency -m 8:64K -i 200"
    p = subprocess.run(["script", "-qec", cmd, "/dev/null"], capture_output=True, text=True, env=ENV, timeout=120)
    assert p.returncode == 0
    out = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "\n", p.stdout.replace("\r", "\n"))  # escapes end lines
    assert "p2p-latency (points)" in out  # the bar
    sizes = re.findall(r"^(\d+) +200 +[\d.]+", out, re.M)
    assert sizes == [str(8 << k) for k in range(14)]  # every row, whole and in order, despite the bar


@pytest.mark.skipif(shutil.which("script") is None, reason="needs script(1) for a pseudo-terminal")
def test_rows_are_not_wrapped_on_a_narrow_terminal():
    """On an 80-column terminal the bar must not fold the 104-column rows into two lines."""
    cmd = f"stty cols 80; {sys.executable} -m commbench p2p-latency -t tcp -m 8,16 -i 50"
    p = subprocess.run(["script", "-qec", cmd, "/dev/null"], capture_output=True, text=True, env=ENV, timeout=120)
    assert p.returncode == 0, p.stdout
    out = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "\n", p.stdout.replace("\r", "\n"))
    rows = [line.split() for line in out.splitlines() if re.match(r"^(8|16) +50 ", line)]
    assert [r[0] for r in rows] == ["8", "16"] and all(len(r) == 11 for r in rows), out
