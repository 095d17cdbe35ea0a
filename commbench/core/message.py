"""A message: an iovec-style list of preallocated buffers, plus the check pattern for ``--validate``.

Benchmarks allocate messages once, outside timed loops; transports send from and receive into
their ``views`` without allocating per buffer.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class Message:
    """A list of byte buffers of fixed sizes, backed by numpy arrays."""

    __slots__ = ("arrays", "views", "sizes", "nbytes", "cache")

    def __init__(self, sizes: Sequence[int]) -> None:
        self.sizes = tuple(int(s) for s in sizes)
        self.arrays = [np.zeros(s, dtype=np.uint8) for s in self.sizes]
        self.views = [memoryview(a) for a in self.arrays]
        self.nbytes = sum(self.sizes)
        # Per-transport precomputed state (framing headers, iovec lists), keyed by transport.
        self.cache: dict[str, object] = {}

    @classmethod
    def over(cls, arrays: Sequence[np.ndarray]) -> Message:
        """A message whose buffers are existing arrays (e.g. chunks of one tensor), not copies."""
        msg = cls.__new__(cls)
        msg.arrays = [np.ascontiguousarray(a).reshape(-1).view(np.uint8) for a in arrays]
        if any(m.base is None and a.size for m, a in zip(msg.arrays, arrays, strict=True)):
            raise ValueError("Message.over needs contiguous arrays (views, not copies)")
        msg.sizes = tuple(len(a) for a in msg.arrays)
        msg.views = [memoryview(a) for a in msg.arrays]
        msg.nbytes = sum(msg.sizes)
        msg.cache = {}
        return msg

    def __len__(self) -> int:
        return len(self.sizes)

    def __repr__(self) -> str:
        return f"Message({len(self.sizes)} buffers, {self.nbytes} B)"

    def copy_from(self, data: bytes | memoryview, offset: int = 0) -> None:
        """Scatter a contiguous byte string into the buffers (used by transports that get one blob)."""
        src = memoryview(data)
        for view, size in zip(self.views, self.sizes, strict=False):
            view[:] = src[offset:offset + size]
            offset += size

    def assign(self, bufs) -> bool:
        """Copy a received list of buffers in; False (nothing copied) if its layout is not this message's."""
        if len(bufs) != len(self.sizes) or any(len(b) != s for b, s in zip(bufs, self.sizes, strict=True)):
            return False
        for view, b in zip(self.views, bufs, strict=True):
            view[:] = b
        return True

    def fill(self, pattern: Pattern) -> None:
        for arr, expected in zip(self.arrays, pattern.arrays, strict=False):
            arr[:] = expected

    def clear(self) -> None:
        for arr in self.arrays:
            arr.fill(0)

    def matches(self, pattern: Pattern) -> bool:
        return all(np.array_equal(a, e) for a, e in zip(self.arrays, pattern.arrays, strict=False))


class Pattern:
    """The expected content of a message under ``--validate``: seeded, never zero bytes.

    Both ends derive the same pattern from (seed, sizes), so nothing about it crosses the wire.
    """

    def __init__(self, sizes: Sequence[int], seed: int) -> None:
        rng = np.random.default_rng([seed, 0x5EED])
        self.arrays = [rng.integers(1, 256, size=int(s), dtype=np.uint8) for s in sizes]
