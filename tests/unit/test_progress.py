"""Progress: plain lines on stderr when not a terminal (throttled), a rich bar on a terminal that
leaves the table's rows intact."""

from __future__ import annotations

import re

from commbench.core.output import progress


def test_plain_lines_are_throttled(monkeypatch, capsys):
    monkeypatch.setattr(progress, "PLAIN_EVERY", 0.0)
    p = progress.Progress("p2p-latency", 3)
    p.advance()
    p.advance()
    p.advance()  # the last point prints nothing: the run is done
    p.close()
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("commbench: p2p-latency: 1/3 points after") and len(err) == 2
    assert re.search(r"after \d+ s, about \d+ s left$", err[0]), err  # an estimate of the time remaining
    monkeypatch.setattr(progress, "PLAIN_EVERY", 3600.0)
    p = progress.Progress("p2p-latency", 3)
    p.advance()
    assert capsys.readouterr().err == ""  # short runs say nothing


