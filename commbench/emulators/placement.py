"""Which parameter-server shard holds each variable, as TensorFlow places them.

- ``round-robin``: variable i on shard i mod P (``tf.compat.v1.train.replica_device_setter``'s default).
- ``greedy``: each variable, in creation order, on the shard with the fewest bytes so far
  (``GreedyLoadBalancingStrategy`` with the byte-size load function); ties go to the lower shard.
"""

from __future__ import annotations

from collections.abc import Sequence

from commbench.core.errors import UsageError

POLICIES = ("round-robin", "greedy")


def place(sizes: Sequence[int], shards: int, policy: str = "round-robin") -> list[int]:
    if shards < 1:
        raise UsageError(f"--ps must be at least 1, not {shards}")
    if shards > len(sizes):
        raise UsageError(f"--ps {shards} is more shards than the payload has variables ({len(sizes)}); "
                         "use fewer shards or a payload with more buffers")
    if policy == "round-robin":
        return [i % shards for i in range(len(sizes))]
    if policy == "greedy":
        load = [0] * shards
        out = []
        for size in sizes:
            s = min(range(shards), key=lambda k: (load[k], k))
            load[s] += size
            out.append(s)
        return out
    raise UsageError(f"unknown placement {policy!r}; choose one of {', '.join(POLICIES)}")


def shard_bytes(sizes: Sequence[int], owners: Sequence[int], shards: int) -> list[int]:
    total = [0] * shards
    for size, s in zip(sizes, owners, strict=True):
        total[s] += size
    return total
