"""perftest output (ib_send_lat, ib_write_lat, ib_send_bw, ib_write_bw, ...; linux-rdma/perftest).

The banner names the test (``Send Latency Test``, ``RDMA_Write BW Test``, ``BIDIRECTIONAL``) and the
device; then one result line per size. Latency tests report one-way times (round trip / 2) in us:
t_typical is the median (commbench's p50). Bandwidth tests report MB/sec in 2^20 B/s (MiB/s), or
Gb/sec with --report_gbits: converted to MB/s = 10^6 B/s.
"""

from __future__ import annotations

import re

from commbench.core.errors import UsageError
from commbench.importers.base import NUM, Imported, Rows, lines

TITLE = re.compile(r"^\s*(Send|RDMA_Write|RDMA_Read|Atomic\w*)\s+(BIDIRECTIONAL\s+)?(Latency|BW) Test\s*$", re.M)
OPS = {"Send": "send", "RDMA_Write": "write", "RDMA_Read": "read"}
TOOLS = {("send", "Latency"): "ib_send_lat", ("write", "Latency"): "ib_write_lat", ("read", "Latency"): "ib_read_lat",
         ("send", "BW"): "ib_send_bw", ("write", "BW"): "ib_write_bw", ("read", "BW"): "ib_read_bw"}
LAT_HEAD = re.compile(r"^\s*#bytes\s+#iterations\s+t_min\[usec\]", re.M)
BW_HEAD = re.compile(r"^\s*#bytes\s+#iterations\s+BW peak\[(MB|MiB|Gb)/sec\]", re.M)


def looks_like(text: str) -> bool:
    return TITLE.search(text) is not None and (LAT_HEAD.search(text) or BW_HEAD.search(text)) is not None


def _events_on(line: str) -> bool:
    """A header line saying completion events are on (``Using Events : ON``): the word before the
    line's first colon, ON after it. Read a line at a time, in time linear in the line."""
    key, sep, value = line.partition(":")
    return bool(sep) and value.strip()[:2].upper() == "ON" and re.search(r"(?i)\bevents\b", key) is not None


def _field(text: str, name: str) -> str | None:
    m = re.search(rf"{re.escape(name)}\s*:\s*(\S+)", text)
    return m.group(1) if m else None


def parse(text: str, path: str, ranks: int = 0, size: int = 0) -> Imported:
    m = TITLE.search(text)
    if m is None:
        raise UsageError(f"{path}: no perftest banner (e.g. 'Send Latency Test') in it: not perftest output")
    op = OPS.get(m.group(1), m.group(1).lower())
    kind, bidir = m.group(3), bool(m.group(2))
    device = _field(text, "Device") or "?"
    head = (LAT_HEAD if kind == "Latency" else BW_HEAD).search(text)
    if head is None:
        raise UsageError(f"{path}: no result header (#bytes #iterations {'t_min' if kind == 'Latency' else 'BW peak'}"
                         "...) in this perftest output")
    bench = "p2p-latency" if kind == "Latency" else "p2p-bibw" if bidir else "p2p-bandwidth"
    scale = {"MB": 1.048576, "MiB": 1.048576, "Gb": 125.0}.get(head.group(1) if head.groups() else "", 1.0)

    def rows():
        for line in lines(text, head.end()):
            f = line.split()
            if kind == "Latency":
                if len(f) >= 7 and f[0].isdigit() and f[1].isdigit() and all(re.fullmatch(NUM, x) for x in f[2:]):
                    v = [float(x) for x in f[2:]]
                    row = {"size": int(f[0]), "iterations": int(f[1]), "min_us": v[0], "max_us": v[1],
                           "p50_us": v[2], "avg_us": v[3], "stdev_us": v[4]}
                    if len(v) >= 7:
                        row.update(p99_us=v[5], p999_us=v[6])
                    yield row
            elif len(f) >= 5 and f[0].isdigit() and f[1].isdigit() and all(re.fullmatch(NUM, x) for x in f[2:5]):
                yield {"size": int(f[0]), "iterations": int(f[1]), "max_mb_s": float(f[2]) * scale,  # to 10^6 B/s
                       "mb_s": float(f[3]) * scale, "msg_s": float(f[4]) * 1e6}
    tool = TOOLS.get((op, kind), f"perftest {m.group(1)} {kind}")
    events = any(_events_on(line) for line in lines(text))
    imp = Imported(bench, tool, "verbs", f"{op}, {device} (perftest)", Rows(rows), _field(text, "perftest version"),
                   poll="blocking" if events else "busy")
    for name in ("Device", "Link type", "Mtu", "Connection type", "TX depth", "GID index"):
        if (said := _field(text, name)) is not None:
            imp.notes.append(f"{name.lower()} {said}")
    return imp
