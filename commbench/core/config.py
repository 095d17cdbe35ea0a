"""A run's configuration, decided once by the CLI and only read after: the parsed options, frozen,
plus what is derived from them (rank count, poll mode, the points, the loops).

Nothing writes options on the way down (no side channels through the argparse namespace): a value
the CLI works out goes into ``RunConfig``; ``FrozenArgs`` refuses assignment, so a benchmark or
transport that tries fails at once.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from commbench.core.harness import Loops
from commbench.core.payload import Payload


class FrozenArgs(argparse.Namespace):
    """Parsed options that can be read but not changed."""

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"options are read-only after parsing (tried to set {name!r}); "
                             "put derived values in RunConfig")


def plain_options(args: argparse.Namespace, lists: bool = False) -> dict:
    """The options with plain values (str, int, float, bool, None; and lists if asked), as results keep them."""
    kinds = (str, int, float, bool, list, type(None)) if lists else (str, int, float, bool, type(None))
    return {k: v for k, v in vars(args).items() if isinstance(v, kinds)}


def freeze(args: argparse.Namespace) -> FrozenArgs:
    frozen = FrozenArgs()
    vars(frozen).update(vars(args))
    return frozen


@dataclass(frozen=True)
class RunConfig:
    """What one benchmark run measures and how; the same on every rank (the CLI builds it from argv)."""

    args: FrozenArgs
    ranks: int
    poll: str = "blocking"
    points: tuple[Payload, ...] = ()
    payload_spec: str | None = None  # the payload's description for the header (None for a size sweep)
    loops: Loops = field(default_factory=Loops)

    @property
    def largest_message(self) -> int:
        """Bytes of the largest point's message (transports size registered pools by it)."""
        return max((p.nbytes for p in self.points), default=0)

    def options(self) -> dict:
        """The options as saved with the results (plain values only)."""
        return plain_options(self.args, lists=True)
