"""Payloads: what one message carries, as a list of buffer sizes.

Two kinds, as in OSU and TF-gRPC-Bench:
- a sweep of single buffers (OSU's ``-m MIN:MAX``), one point per power of two;
- a TF-gRPC-Bench scheme (uniform, random, skew) drawing ``buffers`` sizes from the
  Small / Medium / Large categories, seeded so that every rank computes the same list.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from commbench.core.errors import UsageError
from commbench.core.measure.sizes import format_size, sweep

KIB, MIB = 1 << 10, 1 << 20


@dataclass(frozen=True)
class Category:
    name: str
    letter: str
    lo: int  # inclusive
    hi: int  # inclusive
    default: int

    def check(self, size: int) -> int:
        if not self.lo <= size <= self.hi:
            raise UsageError(
                f"{self.name} buffer size {size} B is outside its category "
                f"[{format_size(self.lo)}, {format_size(self.hi)}]; pick a size in that range")
        return size


# TF-gRPC-Bench's categories: Small [1 B, 1 KiB), Medium [1 KiB, 1 MiB), Large [1 MiB, 10 MiB].
SMALL = Category("small", "S", 1, KIB - 1, 10)
MEDIUM = Category("medium", "M", KIB, MIB - 1, 10 * KIB)
LARGE = Category("large", "L", MIB, 10 * MIB, MIB)
CATEGORIES = {c.letter: c for c in (SMALL, MEDIUM, LARGE)}
SCHEMES = ("uniform", "random", "skew")
# Skew shares (TF-gRPC-Bench default 60 % Large, 30 % Medium, 10 % Small), by bias.
SKEW_SHARES = {
    "large": {"L": 0.6, "M": 0.3, "S": 0.1},
    "medium": {"M": 0.6, "L": 0.3, "S": 0.1},
    "small": {"S": 0.6, "M": 0.3, "L": 0.1},
}


def category_of(size: int) -> Category:
    if size < KIB:
        return SMALL
    return MEDIUM if size < MIB else LARGE


@dataclass(frozen=True)
class Payload:
    """One measured point's message layout."""

    label: str
    sizes: tuple[int, ...]
    scheme: str = "single"

    @property
    def nbytes(self) -> int:
        return sum(self.sizes)


@dataclass(frozen=True)
class SchemeSpec:
    """What the user asked for with ``--payload SCHEME`` and its knobs."""

    scheme: str
    buffers: int = 10
    categories: tuple[str, ...] = ("S", "M", "L")
    sizes: dict[str, int] = field(default_factory=lambda: {c.letter: c.default for c in (SMALL, MEDIUM, LARGE)})
    bias: str = "large"
    seed: int = 1
    # sizes to draw from per category (a model's tensor sizes, for SCHEME:MODEL); None: the fixed sizes/ranges
    pool: dict[str, tuple[int, ...]] | None = None
    source: str = ""

    def __post_init__(self) -> None:
        if self.scheme not in SCHEMES:
            raise UsageError(f"unknown payload scheme {self.scheme!r}; choose one of {', '.join(SCHEMES)}")
        if self.buffers < 1:
            raise UsageError(f"--buffers must be at least 1, not {self.buffers}")
        for letter in self.categories:
            if letter not in CATEGORIES:
                raise UsageError(f"unknown buffer category {letter!r}; use S, M and L (e.g. --categories S,L)")
        for letter, size in self.sizes.items():
            CATEGORIES[letter].check(size)
        if self.scheme == "random" and len(set(self.categories)) < 2 and self.pool is None:
            raise UsageError("the random scheme mixes at least two categories; "
                             "give --categories with two or more of S,M,L")
        if self.bias not in SKEW_SHARES:
            raise UsageError(f"unknown skew bias {self.bias!r}; choose large, medium or small")

    def draw(self) -> Payload:
        """The payload for this spec: the same list on every rank for the same seed."""
        rng = np.random.default_rng(self.seed)
        cats = [c for c in dict.fromkeys(self.categories) if self.pool is None or self.pool.get(c)]
        if not cats:
            raise UsageError(f"{self.source or 'the profile'} has no tensors in categories {','.join(self.categories)}")
        if self.scheme == "uniform":
            letters = [cats[i % len(cats)] for i in range(self.buffers)]
        elif self.scheme == "random":
            letters = [cats[i] for i in rng.integers(0, len(cats), self.buffers)]
        else:  # skew
            shares = SKEW_SHARES[self.bias]
            order = [c for c in shares if c in cats]
            p = np.array([shares[c] for c in order])
            letters = [order[i] for i in rng.choice(len(order), size=self.buffers, p=p / p.sum())]
        if self.pool is not None:  # a model's own tensor sizes, drawn uniformly within each category
            sizes = [int(self.pool[c][rng.integers(0, len(self.pool[c]))]) for c in letters]
        elif self.scheme == "random":
            sizes = [int(rng.integers(CATEGORIES[c].lo, CATEGORIES[c].hi + 1)) for c in letters]
        else:
            sizes = [self.sizes[c] for c in letters]
        counts = "/".join(f"{c}{letters.count(c)}" for c in "SML" if letters.count(c))
        label = f"{self.scheme}{':' + self.source if self.source else ''}[{counts}]={format_size(sum(sizes))}"
        return Payload(label, tuple(sizes), self.scheme)


def sweep_payloads(lo: int, hi: int) -> list[Payload]:
    """OSU-style points: one buffer per message, powers of two from lo to hi."""
    return [Payload(str(s), (s,)) for s in sweep(lo, hi)]
