"""Buffer memory: where every message buffer lives, and how it is made ready before it is measured.

- Page backing is chosen, not inherited. Buffers come from anonymous mappings (page aligned, as
  OSU's posix_memalign'd buffers) advised either way: ``--hugepages off`` (the default, like OSU's
  plain malloc) forbids transparent huge pages (MADV_NOHUGEPAGE); ``on`` asks for them
  (MADV_HUGEPAGE, the mapping aligned to 2 MiB). numpy's own large arrays follow the same choice.
- Touched: every page of every buffer is written with non-constant bytes before a point is measured
  (OSU's touch_data), so no send reads the kernel's shared zero page and no receive takes page
  faults in a timed loop.

- Steady allocator: what a transport's library allocates per message (grpcio's ``bytes``) is not
  returned to the kernel between iterations. glibc's malloc otherwise trims the heap or unmaps a
  freed MiB-sized block and faults it in again on the next message (measured: 500 page faults per
  1 MiB gRPC round trip, 2.4x the one-way time). ``steady_malloc()`` sets ``MALLOC_TUNABLES`` with
  mallopt; bench/ gives reference programs the same through GLIBC_TUNABLES.

``backing()`` says what the kernel really gave (AnonHugePages of this process), for the metadata.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
from collections.abc import Sequence
from pathlib import Path

import numpy as np

HUGE = 2 << 20  # x86-64 transparent huge page
ALIGN = 64  # buffers carved from one mapping start on a cache line
TOUCH_BLOCK = 4096
_policy = {"hugepages": False, "malloc": "default"}
TRIM_THRESHOLD = 256 << 20  # freed heap kept up to this much
MMAP_THRESHOLD = 32 << 20  # glibc's largest: blocks below it come from the heap, reused
MALLOC_TUNABLES = f"glibc.malloc.trim_threshold={TRIM_THRESHOLD}:glibc.malloc.mmap_threshold={MMAP_THRESHOLD}"
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # malloc.h


def configure(hugepages: bool) -> None:
    """Set this process's page backing for every buffer allocated from now on."""
    _policy["hugepages"] = hugepages
    try:  # numpy's own allocations (scratch arrays): its madvise(MADV_HUGEPAGE) switch
        from numpy._core.multiarray import _set_madvise_hugepage  # type: ignore[attr-defined]
    except ImportError:  # numpy < 2
        from numpy.core.multiarray import _set_madvise_hugepage  # type: ignore[no-redef]
    _set_madvise_hugepage(hugepages)


def steady_malloc() -> None:
    """Keep freed memory in this process (see the module docstring); a no-op where libc is not glibc."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        ok = libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD) and libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    except (OSError, AttributeError):
        ok = False
    if ok:
        _policy["malloc"] = f"glibc mallopt trim_threshold={TRIM_THRESHOLD} mmap_threshold={MMAP_THRESHOLD}"


def region(nbytes: int) -> np.ndarray:
    """An untouched uint8 array over a fresh anonymous mapping advised by the current policy."""
    huge = _policy["hugepages"]
    # on: whole huge pages, 2 MiB aligned, so that a message of any size >= 4 KiB sits in huge pages
    # (a mapping smaller than one, or unaligned, would get 4 KiB pages however it is advised)
    span = -(-nbytes // HUGE) * HUGE + HUGE if huge and nbytes >= TOUCH_BLOCK else nbytes
    m = mmap.mmap(-1, max(span, 1), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    m.madvise(mmap.MADV_HUGEPAGE if huge else mmap.MADV_NOHUGEPAGE)
    raw = np.frombuffer(m, dtype=np.uint8)
    start = (-raw.ctypes.data) % HUGE if span != nbytes else 0
    return raw[start:start + nbytes]


def touch(arr: np.ndarray, salt: int = 0) -> None:
    """Write every byte (so every page) of arr with a seeded, non-constant pattern."""
    flat = arr.reshape(-1).view(np.uint8)
    if not len(flat):
        return
    block = np.random.default_rng([salt, 0x70C4]).integers(0, 256, TOUCH_BLOCK, dtype=np.uint8)
    whole = len(flat) // TOUCH_BLOCK * TOUCH_BLOCK
    if whole:
        flat[:whole].reshape(-1, TOUCH_BLOCK)[:] = block
    flat[whole:] = block[:len(flat) - whole]


def carve(sizes: Sequence[int], salt: int = 0) -> list[np.ndarray]:
    """Touched uint8 buffers of the given sizes, carved from one mapping, each cache-line aligned."""
    offsets, end = [], 0
    for s in sizes:
        offsets.append(end)
        end += -(-s // ALIGN) * ALIGN
    mem = region(end)
    touch(mem, salt)
    return [mem[o:o + s] for o, s in zip(offsets, sizes, strict=True)]


def array(count: int, dtype: np.dtype | type = np.float32) -> np.ndarray:
    """A touched array of ``count`` elements (contents arbitrary until the caller writes them)."""
    return carve([count * np.dtype(dtype).itemsize])[0].view(dtype)


def system_thp() -> str:
    """The kernel's transparent-huge-page mode (always, madvise or never), or 'unknown'."""
    try:
        text = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    except OSError:
        return "unknown"
    return text[text.find("[") + 1:text.find("]")] if "[" in text else text.strip()


def huge_kb() -> int | None:
    """This process's anonymous memory backed by huge pages, in KiB (None where Linux does not say)."""
    try:
        for line in Path("/proc/self/smaps_rollup").read_text().splitlines():
            if line.startswith("AnonHugePages:"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def backing() -> dict:
    """What the metadata records about page backing."""
    return {"hugepages": "on" if _policy["hugepages"] else "off", "system_thp": system_thp(),
            "allocator": "mmap, page aligned, madvise " + ("MADV_HUGEPAGE" if _policy["hugepages"]
                                                          else "MADV_NOHUGEPAGE"),
            "malloc": _policy["malloc"],
            "touched": "every page written with a seeded non-constant pattern before each point"}
