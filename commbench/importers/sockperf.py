"""sockperf ping-pong output (``sockperf ping-pong --tcp|udp -m SIZE``).

sockperf reports one-way latency (round trip / 2) in usec: ``avg-latency``, its std-dev, and
percentiles with ``<MIN>``/``<MAX>`` observations. It does not print its message size: give it
(``--size``, its -m).
"""

from __future__ import annotations

import re

from commbench.core.errors import UsageError
from commbench.importers.base import Imported, lines


def looks_like(text: str) -> bool:
    return "sockperf" in text and "avg-latency=" in text


def _num(pattern: str, text: str) -> float | None:
    m = re.search(pattern, text)
    return float(m.group(1)) if m else None


def _received(text: str) -> int | None:
    """ReceivedMessages= on the [Valid Duration] line: found with str.find, a line at a time (a pattern
    scanning from every "[Valid Duration]" to the line's end took time quadratic in a long line)."""
    for line in lines(text):
        at = line.find("[Valid Duration]")
        if at >= 0 and (got := line.find("ReceivedMessages=", at)) >= 0:
            digits = re.match(r"\d+", line[got + len("ReceivedMessages="):])
            return int(digits.group()) if digits else None
    return None


def parse(text: str, path: str, ranks: int = 0, size: int = 0) -> Imported:
    avg = _num(r"avg-latency=([\d.]+)", text)
    if avg is None:
        raise UsageError(f"{path}: no 'avg-latency=' line in this sockperf output (a ping-pong run cut short?)")
    if not size:
        raise UsageError(f"{path}: sockperf does not print its message size: give --size N (its -m)")
    proto = "udp" if re.search(r"#\s*UDP\b", text) else "tcp"
    row = {"size": int(size), "avg_us": avg, "stdev_us": _num(r"std-dev=([\d.]+)", text),
           "p50_us": _num(r"percentile 50\.000\s*=\s*([\d.]+)", text),
           "p99_us": _num(r"percentile 99\.000\s*=\s*([\d.]+)", text),
           "p999_us": _num(r"percentile 99\.900\s*=\s*([\d.]+)", text),
           "min_us": _num(r"<MIN> observation\s*=\s*([\d.]+)", text),
           "max_us": _num(r"<MAX> observation\s*=\s*([\d.]+)", text)}
    received = _received(text)
    if received is not None:
        row["iterations"] = received
    version = re.search(r"== version #([\w.\-]+)", text)
    imp = Imported("p2p-latency", "sockperf", proto, "sockperf ping-pong", [{k: v for k, v in row.items()
                                                                            if v is not None}],
                   version.group(1) if version else None, poll="blocking")
    if row["p50_us"] is None:
        imp.metric = {"key": "avg_us", "better": "lower"}
    return imp
