"""iperf3 JSON output (``iperf3 -c HOST -J``): the received rate of a TCP (or UDP) stream.

Read from ``end.sum_received.bits_per_second`` (MB/s = 10^6 B/s), the write size from
``start.test_start.blksize``, the streams from ``num_streams``, the version from ``start.version``.
The JSON is parsed as data with a depth limit; nothing in it is evaluated.
"""

from __future__ import annotations

from commbench.core.errors import UsageError
from commbench.core.output.results import shallow_json
from commbench.importers.base import Imported


def looks_like(text: str) -> bool:
    head = text.lstrip()[:4096]
    return head.startswith("{") and '"start"' in head and ('"connecting_to"' in head or '"test_start"' in text)


def _get(obj, *path):
    for k in path:
        if not isinstance(obj, dict) or k not in obj:
            return None
        obj = obj[k]
    return obj


def parse(text: str, path: str, ranks: int = 0, size: int = 0) -> Imported:
    try:
        doc = shallow_json(text)
    except (ValueError, RecursionError) as exc:  # json.JSONDecodeError is a ValueError
        raise UsageError(f"{path}: not iperf3 -J output (JSON that does not parse: "
                         f"{getattr(exc, 'msg', 'nested too deeply')})") from None
    if not isinstance(doc, dict):
        raise UsageError(f"{path}: not iperf3 -J output (not a JSON object)")
    if isinstance(doc.get("error"), str):
        raise UsageError(f"{path}: iperf3 reported an error, not a result: {doc['error'][:200]}")
    bps = _get(doc, "end", "sum_received", "bits_per_second") or _get(doc, "end", "sum", "bits_per_second")
    block = _get(doc, "start", "test_start", "blksize")
    if not isinstance(bps, (int, float)) or not isinstance(block, int) or isinstance(bps, bool):
        raise UsageError(f"{path}: iperf3 -J output without end.sum_received.bits_per_second and "
                         "start.test_start.blksize (cut short?)")
    proto = str(_get(doc, "start", "test_start", "protocol") or "TCP").lower()
    streams = _get(doc, "start", "test_start", "num_streams")
    row = {"size": block, "mb_s": bps / 8e6}
    version = _get(doc, "start", "version")  # "iperf 3.12"
    version = str(version).removeprefix("iperf ").strip() if version else None
    imp = Imported("p2p-bandwidth", "iperf3", proto, "iperf3", [row], version,
                   poll="blocking")
    secs = _get(doc, "start", "test_start", "duration")
    if secs:
        imp.notes.append(f"{secs} s, {streams or 1} stream(s), {block} B writes")
    return imp
