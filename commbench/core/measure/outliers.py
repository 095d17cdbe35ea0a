"""Robust outliers: which values stand apart from the median by more than noise and by more than a
share that matters. Median and MAD, not mean and standard deviation, so that the one bad node
cannot hide itself by moving the yardstick (Iglewicz and Hoaglin's modified z-score)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

Z = 3.5  # Iglewicz and Hoaglin's cut for the modified z-score
MAD_SCALE = 0.6745  # the MAD of a normal distribution is 0.6745 standard deviations


def median_mad(values: Sequence[float]) -> tuple[float, float]:
    arr = np.asarray([v for v in values if v == v], dtype=np.float64)  # NaN (unmeasured) left out
    if not len(arr):
        return float("nan"), float("nan")
    med = float(np.median(arr))
    return med, float(np.median(np.abs(arr - med)))


def outliers(values: Sequence[float], share: float, low: bool) -> list[int]:
    """Indices of values below (``low``) or above the median by more than ``share`` of it (0.25: 25 %)
    and by more than Z modified z-scores (any amount where the MAD is zero), or by more than twice
    ``share`` whatever the spread (half the median's bandwidth is a finding on any cluster). NaN never
    stands out."""
    med, mad = median_mad(values)
    if med != med:
        return []
    out = []
    for i, v in enumerate(values):
        if v != v:
            continue
        gap = (med - v) / med if low else (v - med) / med
        z = MAD_SCALE * abs(v - med) / mad if mad > 0 else float("inf")
        if (gap > share and z > Z) or gap > 2 * share:
            out.append(i)
    return out
