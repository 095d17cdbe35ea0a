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


RESERVOIR_CAP = 1 << 20  # samples a time-based point keeps: 8 MiB, whatever its length


class Reservoir:
    """A uniform sample of every duration added, in fixed memory: all of them (exact percentiles) up
    to ``cap``, beyond it a uniform random ``cap`` of them (reservoir sampling, Vitter's algorithm R,
    a batch at a time), with the exact minimum and maximum kept in it."""

    __slots__ = ("buf", "n", "low", "high", "rng")

    def __init__(self, cap: int = RESERVOIR_CAP, seed: int = 0) -> None:
        self.buf = np.zeros(cap, dtype=np.int64)
        self.n = 0
        self.low, self.high = np.iinfo(np.int64).max, np.iinfo(np.int64).min
        self.rng = np.random.default_rng(seed)

    def add(self, batch: np.ndarray) -> None:
        cap = len(self.buf)
        if not len(batch):
            return
        self.low, self.high = min(self.low, int(batch.min())), max(self.high, int(batch.max()))
        room = max(0, min(cap - self.n, len(batch)))
        self.buf[self.n:self.n + room] = batch[:room]
        rest = batch[room:]
        if len(rest):  # element j (0-based over all) replaces a random slot with probability cap / (j + 1)
            j = np.arange(self.n + room, self.n + len(batch))
            slot = (self.rng.random(len(rest)) * (j + 1)).astype(np.int64)
            hit = slot < cap
            self.buf[slot[hit]] = rest[hit]
        self.n += len(batch)

    def values(self) -> np.ndarray:
        out = self.buf[:min(self.n, len(self.buf))].copy()
        if self.n > len(self.buf):  # the extremes are exact: in the sample, in place of its own
            out[np.argmin(out)], out[np.argmax(out)] = self.low, self.high
        return out
