"""A message: an iovec-style list of preallocated, touched buffers, plus the check pattern for ``--validate``.

Benchmarks allocate messages once per point, outside timed loops (core/measure/buffers.py chooses the page
backing and writes every page); transports send from and receive into their ``views`` without
allocating per buffer.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from commbench.core.measure import buffers

_salts = itertools.count(1)  # every message gets different touch bytes


class Message:
    """A list of byte buffers of fixed sizes, backed by one touched mapping."""

    __slots__ = ("arrays", "views", "sizes", "nbytes", "cache")

    def __init__(self, sizes: Sequence[int]) -> None:
        self.sizes = tuple(int(s) for s in sizes)
        self.arrays = buffers.carve(self.sizes, next(_salts))
        self.views = [a.data for a in self.arrays]
        self.nbytes = sum(self.sizes)
        # Per-transport precomputed state (framing headers, iovec lists), keyed by transport.
        self.cache: dict[str, Any] = {}  # each transport knows what its keys hold

    @classmethod
    def over(cls, arrays: Sequence[np.ndarray]) -> Message:
        """A message whose buffers are existing arrays (e.g. chunks of one tensor), not copies."""
        msg = cls.__new__(cls)
        msg.arrays = [np.ascontiguousarray(a).reshape(-1).view(np.uint8) for a in arrays]
        if any(m.base is None and a.size for m, a in zip(msg.arrays, arrays, strict=True)):
            raise ValueError("Message.over needs contiguous arrays (views, not copies)")
        msg.sizes = tuple(len(a) for a in msg.arrays)
        msg.views = [a.data for a in msg.arrays]
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

    def fill(self, pattern: Pattern, iteration: int = 0) -> None:
        """Write the pattern's content for this iteration (every byte differs from the last iteration's)."""
        key = pattern.key(iteration)
        for arr, base in zip(self.arrays, pattern.arrays, strict=False):
            np.bitwise_xor(base, key, out=arr)

    def clear(self) -> None:
        for arr in self.arrays:
            arr.fill(0)

    def matches(self, pattern: Pattern, iteration: int = 0) -> bool:
        """True if the buffers hold exactly the pattern's content for this iteration."""
        key = pattern.key(iteration)
        for arr, base, scratch in zip(self.arrays, pattern.arrays, pattern.scratch, strict=False):
            np.bitwise_xor(arr, key, out=scratch)
            if not np.array_equal(scratch, base):
                return False
        return True


class Pattern:
    """The expected content of a message under ``--validate``: seeded bytes, folded with the iteration.

    Both ends derive the same pattern from (seed, origin rank, sizes), so nothing about it crosses the
    wire. Iteration i's content is the base XOR a key in 1..255 that changes every iteration (OSU
    folds the iteration into its value), so a stale, repeated or reordered delivery does not match.
    """

    def __init__(self, sizes: Sequence[int], seed: int, origin: int = 0) -> None:
        rng = np.random.default_rng([seed, origin, 0x5EED])
        self.arrays = [rng.integers(1, 256, size=int(s), dtype=np.uint8) for s in sizes]
        self.scratch = buffers.carve([int(s) for s in sizes])

    @staticmethod
    def key(iteration: int) -> np.uint8:
        return np.uint8(iteration % 255 + 1)
