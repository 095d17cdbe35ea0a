"""Option types for argparse: numbers checked where they are parsed, so every bad value is one line.

``integer(lo, hi)`` and ``number(lo, hi, above=...)`` return argparse ``type=`` callables. NaN and
infinity are never numbers here; bounds say what the option can mean (a count of at least 1, seconds
above 0, a port). argparse reports a failure as ``argument --time: must be ..., not 'nan'``.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

MAX_DIGITS = 30  # longer numerals are typos (and Python refuses to parse very long ones)


def integer(lo: int | None = None, hi: int | None = None, what: str = "") -> Callable[[str], int]:
    """An int in [lo, hi]."""
    def parse(text: str) -> int:
        try:
            if len(text.strip()) > MAX_DIGITS:
                raise ValueError
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a whole number{_range(lo, hi)}{what}, not {text!r}") from None
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            raise argparse.ArgumentTypeError(f"must be a whole number{_range(lo, hi)}{what}, not {value}")
        return value
    parse.__name__ = "integer"
    return parse


def number(lo: float | None = None, hi: float | None = None, above: float | None = None,
           what: str = "") -> Callable[[str], float]:
    """A finite float in [lo, hi] (or (above, hi])."""
    def parse(text: str) -> float:
        try:
            if len(text.strip()) > MAX_DIGITS:
                raise ValueError
            value = float(text)
        except ValueError:
            value = math.nan
        ok = math.isfinite(value) and (lo is None or value >= lo) and (above is None or value > above) \
            and (hi is None or value <= hi)
        if not ok:
            bound = f" above {_n(above)}" + (f" and at most {_n(hi)}" if hi is not None else "") if above is not None \
                else _range(lo, hi)
            raise argparse.ArgumentTypeError(f"must be a finite number{bound}{what}, not {text!r}")
        return value
    parse.__name__ = "number"
    return parse


def _n(x: float) -> str:
    return f"{int(x):,}" if float(x).is_integer() else f"{x:g}"


def _range(lo: float | None, hi: float | None) -> str:
    if lo is not None and hi is not None:
        return f" from {_n(lo)} to {_n(hi)}"
    if lo is not None:
        return f" of at least {_n(lo)}"
    return f" of at most {_n(hi)}" if hi is not None else ""


SECONDS = number(above=0, hi=7 * 86400, what=" (seconds)")
# a wait for a peer: shorter than a handshake's round trips can take, and every rank gives up before it meets
TIMEOUT = number(lo=0.1, hi=7 * 86400, what=" (seconds to wait for a peer; ranks need a round trip or two to meet)")
_UNITS = {"s": 1, "m": 60, "h": 3600}


def DURATION(text: str) -> float:  # noqa: N802 (an argparse type, named like the others)
    """A time span in seconds: 90, 90s, 10m, 1.5h (above 0, at most a week)."""
    t = text.strip().lower()
    scale = _UNITS.get(t[-1:], 0)
    try:
        value = SECONDS(t[:-1] if scale else t) * (scale or 1)
        if value > 7 * 86400:
            raise argparse.ArgumentTypeError("too long")
        return value
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"must be a time above 0 and at most a week: seconds, or a number with s, "
                                         f"m or h (90, 90s, 10m, 1.5h), not {text!r}") from None
_port = integer(0, 65535)


def PORT(text: str) -> int:  # noqa: N802 (an argparse type, named like the others)
    """0 (free ports) or an unprivileged port; the run also uses the ports above it (rank r: P + 1 + r)."""
    value = _port(text)
    if 0 < value < 1024:
        raise argparse.ArgumentTypeError(f"must be 0 (free ports) or from 1024 to 65535, not {value}: ports below "
                                         "1024 belong to system services")
    return value
SEED = integer(0, 2**32 - 1)
RANKS = integer(1, 4096)
MAX_ITERATIONS = 10_000_000  # -i beyond this: use --time
