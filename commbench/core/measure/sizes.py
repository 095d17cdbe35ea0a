"""Byte sizes as users write them (``4K``, ``1M``, ``0:4M``) and as tables print them."""

from __future__ import annotations

import re

from commbench.core.errors import UsageError

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "KIB": 1 << 10,
          "M": 1 << 20, "MB": 1 << 20, "MIB": 1 << 20, "G": 1 << 30, "GB": 1 << 30, "GIB": 1 << 30}
_SIZE_RE = re.compile(r"^\s*(\d{1,30})\s*([A-Za-z]*)\s*$")
MAX_SIZE = 8 << 30  # bytes in one message or buffer at most


def parse_size(text: str, what: str = "size") -> int:
    """``'4K'`` -> 4096. Suffixes K, M, G are powers of 1024 (as OSU's ``-m``)."""
    m = _SIZE_RE.match(text)
    unit = m.group(2).upper() if m else None
    if m is None or unit not in _UNITS:
        raise UsageError(f"bad {what} {text!r}: write a number of bytes with an optional K, M or G suffix, "
                         "e.g. 64, 4K, 1M")
    value = int(m.group(1)) * _UNITS[unit]
    if value > MAX_SIZE:
        raise UsageError(f"{what} {text!r} is more than commbench sends in one message ({format_size(MAX_SIZE)}); "
                         "choose a smaller size")
    return value


def parse_range(text: str, default_min: int = 0) -> tuple[int, int]:
    """OSU's ``-m``: ``MAX`` or ``MIN:MAX``."""
    lo_text, sep, hi_text = text.partition(":")
    if sep:
        lo = parse_size(lo_text, "minimum size") if lo_text else default_min
        hi = parse_size(hi_text, "maximum size")
    else:
        lo, hi = default_min, parse_size(lo_text, "maximum size")
    if lo > hi:
        raise UsageError(f"bad size range {text!r}: minimum {lo} is larger than maximum {hi}; "
                         "write MIN:MAX with MIN <= MAX")
    return lo, hi


def sweep(lo: int, hi: int) -> list[int]:
    """Powers of two from lo to hi, as OSU sweeps: 0 first if asked, then 1, 2, 4, ..."""
    sizes = [0] if lo == 0 else []
    s = 1
    while s < max(lo, 1):
        s <<= 1
    if lo and s != lo:
        sizes.append(lo)
    while s <= hi:
        sizes.append(s)
        s <<= 1
    if sizes and sizes[-1] != hi and hi > 0:
        sizes.append(hi)
    return sizes


def format_size(n: int) -> str:
    """Compact human size: 4096 -> '4K', 1048576 -> '1M', 1000 -> '1000'."""
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return str(n)
