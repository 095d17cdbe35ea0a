"""Durations kept in memory fixed from the start, whatever a run's length: a preallocated int64 ring.

Every sample is kept up to ``cap`` (so the percentiles are exact where they always were), the most
recent ``cap`` beyond it. A Python list of ints grew by an int object per sample written (28 B each:
a 3-minute ps-throughput run grew its ranks by 2-3 MB/min); the ring writes in place.
"""

from __future__ import annotations

import numpy as np

SAMPLE_CAP = 1 << 16  # per recorder: 512 KiB


class Samples:
    __slots__ = ("buf", "n")

    def __init__(self, expected: int = 0, cap: int = SAMPLE_CAP) -> None:
        self.buf = np.zeros(max(1, min(expected or cap, cap)), dtype=np.int64)
        self.n = 0  # samples added (the ring holds the last len(buf) of them)

    def add(self, ns: int) -> None:
        self.buf[self.n % len(self.buf)] = ns
        self.n += 1

    def values(self) -> np.ndarray:
        return self.buf[:min(self.n, len(self.buf))]

    def tolist(self) -> list[int]:
        return self.values().tolist()
