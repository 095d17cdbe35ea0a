"""``--traffic``: what a run's processes send each other, measured on the wire (``core.capture``),
per step and by role pair: bytes (TCP payload: for gRPC, messages with their HTTP/2 framing and
headers), segments, and RPCs by method (gRPC's names; TensorFlow's RecvTensor, RunComponentFunction,
Enqueue, ...).

The chief (rank 0) starts the capture before any connection of the run opens, so each is followed
from its first byte; sums cover only the measured window (rank 0's wall clock around the timed
steps; the kernel stamps each segment on the same clock), so set-up and warm-up are left out, and
the rendezvous's own connections are never counted. Bytes go by the direction they flow (from,
to); RPCs by who calls whom (client, server). Each rank names its own sockets (``/proc``), so a
connection is attributed to the roles of the processes at its two ends.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from commbench.core.capture.packets import Capture, Traffic, own_endpoints
from commbench.core.errors import UsageError
from commbench.core.imports import installed
from commbench.core.output.table import Column, header_line, key, row_line

__all__ = ["check_usable", "start", "own_endpoints", "rows", "show", "HELP"]

HELP = ("measure what crosses the wire between the ranks over the measured steps: bytes, segments and RPCs "
        "(by method) per step, by role pair (a packet capture: root, every rank on this machine)")
COLUMNS = [Column("from", "From", -7, doc="--traffic: the sending role (rank0, chief, worker, ps, ...)"),
           Column("to", "To", -7, doc="--traffic: the receiving role"),
           Column("bytes_step", "Bytes/step", 12, "{:.0f}", "B", "--traffic: TCP payload bytes per step, from -> to"),
           Column("segments_step", "Segs/step", 10, "{:.1f}", "count", "--traffic: TCP segments with payload per step"),
           Column("rpcs_step", "RPCs/step", 10, "{:.2f}", "count", "--traffic: gRPC calls from -> to per step"),
           Column("in_flight_max", "In flight", 10, "{:.0f}", "count",
                  "--traffic: the most gRPC calls from -> to open at once on one connection (called, not yet "
                  "answered: the server's END_STREAM)"),
           Column("methods", "RPCs per step by method (mean request/response B)", -50,
                  doc="--traffic: per gRPC method, {rpcs_step, request_b, response_b} (an object)")]
KEYS = [*COLUMNS, key("steps", "count", "--traffic: the steps the bytes are divided by")]


def check_usable() -> None:
    """--traffic's needs, each one line (exit 2) before any rank starts."""
    if os.geteuid() != 0:
        raise UsageError("--traffic captures packets, which needs root: run as root (or leave --traffic out)")
    if not installed("hpack"):
        raise UsageError("--traffic decodes gRPC's headers with hpack, which is not installed: pip install hpack")


def start(world, on_close: Callable[[Callable], object], netns: str | None) -> Capture | None:
    """On rank 0, a capture of every TCP connection but the rendezvous's, running before any rank goes
    on (a barrier); ``netns``: the ranks are in emulated hosts, whose links meet in the namespace of
    that name (this machine's own, named by `commbench hosts up`)."""
    here = world.allgather_json("traffic-host", socket.gethostname())
    if len(set(here)) > 1:
        raise UsageError("--traffic sees the wire of one machine: run every rank here (the local launcher or "
                         "--hosts), not across " + ", ".join(sorted(set(here))))
    capture = None
    if world.rank == 0:
        d = Path(tempfile.mkdtemp(prefix="commbench-traffic-"))
        on_close(lambda: shutil.rmtree(d, ignore_errors=True))
        capture = Capture(d / "capture.json", [world.root_address[1]], netns)
        on_close(capture.kill)
    world.barrier("traffic-capture")
    return capture


def owners(world) -> list | None:
    """Every rank's TCP endpoints, on rank 0 (None elsewhere): call while the run's connections are open."""
    return world.gather_json("tcp-endpoints", own_endpoints())


def rows(traffic: Traffic, owned: Sequence[Sequence[Sequence]], roles: Sequence[str], window: Sequence[int],
         steps: int, extra: Mapping | None = None) -> list[dict]:
    """One row per (from, to) role pair with anything in the window: per-step bytes, segments, RPCs, and
    per method its RPCs per step and mean request and response sizes (gRPC DATA bytes); ``roles[r]``
    is rank r's role, ``extra`` goes into every row."""
    where = {((str(a), int(p)), (str(pa), int(pp))): roles[r] for r, socks in enumerate(owned)
             for a, p, pa, pp in socks}
    cells = traffic.by_roles(where, window[0], window[1])
    out = []
    for (a, b), c in sorted(cells.items()):
        methods = {m: {"rpcs_step": n / steps, "request_b": req / n, "response_b": resp / n}
                   for m, (n, req, resp) in sorted(c["methods"].items(), key=lambda kv: (-kv[1][0], kv[0]))}
        out.append({**(extra or {}), "from": a, "to": b, "steps": steps, "bytes_step": c["bytes"] / steps,
                    "segments_step": c["segments"] / steps, "rpcs_step": c["rpcs"] / steps,
                    "in_flight_max": c["in_flight_max"], "methods": methods})
    return out


def methods_text(methods: Mapping[str, Mapping[str, float]]) -> str:
    """'RecvTensor 15x(79/17.6k)': RPCs per step, and mean request / response DATA bytes."""
    def b(x: float) -> str:
        return f"{x / 1e6:.3g}M" if x >= 1e6 else f"{x / 1e3:.3g}k" if x >= 1e3 else f"{x:.0f}"
    return " ".join(f"{m} {v['rpcs_step']:.3g}x({b(v['request_b'])}/{b(v['response_b'])})"
                    for m, v in methods.items()) or "-"


def show(out: Sequence[dict], writer, what: str) -> None:
    """The table on the terminal (``what``: the point or run it covers), and the rows into the results file."""
    print(f"# traffic on the wire, {what}: per step; bytes = TCP payload by direction; RPCs by caller -> callee\n"
          + header_line(COLUMNS), flush=True)
    for r in out:
        if writer:
            writer.row(r)
        print(row_line(COLUMNS, {**r, "methods": methods_text(r["methods"])}), flush=True)
