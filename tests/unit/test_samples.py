"""Durations in fixed memory (core/measure/samples.py): every sample kept up to the cap (percentiles
exact as before), the latest ``cap`` beyond it, and no memory added per sample."""

from __future__ import annotations

import tracemalloc

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from commbench.core.measure.samples import Samples


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 1 << 40), max_size=300), st.integers(1, 64))
def test_the_ring_keeps_all_up_to_its_cap_then_the_latest(values, cap):
    s = Samples(len(values), cap=cap)
    for v in values:
        s.add(v)
    assert s.n == len(values)
    if len(values) <= cap:
        assert s.tolist() == values  # exact where the run fits
    else:
        assert sorted(s.tolist()) == sorted(values[-cap:])  # the latest cap of them


def test_a_long_run_adds_no_memory_per_sample():
    s = Samples(10_000_000, cap=1 << 12)
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    for i in range(200_000):
        s.add(1_000_000_007 + i)  # big ints: a list would hold an object for each
    grown = sum(d.size_diff for d in tracemalloc.take_snapshot().compare_to(before, "filename") if d.size_diff > 0)
    tracemalloc.stop()
    assert grown < 64 * 1024, grown
    assert len(s.values()) == 1 << 12 and s.buf.nbytes == 8 << 12
    assert int(np.max(s.values())) == 1_000_000_007 + 199_999


def test_a_reservoir_keeps_every_sample_up_to_its_cap_and_a_uniform_sample_beyond():
    """Exact (every value, in order) up to the cap; beyond it the memory stays the cap's, the exact
    minimum and maximum are in it, and its quantiles are those of the whole within sampling error."""
    import numpy as np

    from commbench.core.measure.samples import Reservoir

    r = Reservoir(cap=1000)
    a = np.arange(1, 801, dtype=np.int64)
    r.add(a[:300])
    r.add(a[300:])
    assert list(r.values()) == list(a)
    rng = np.random.default_rng(5)
    whole = rng.lognormal(10, 1, 200_000).astype(np.int64)
    r = Reservoir(cap=20_000)
    for chunk in np.array_split(whole, 37):
        r.add(chunk)
    kept = r.values()
    assert len(kept) == 20_000 and r.buf.nbytes == 20_000 * 8
    assert kept.min() == whole.min() and kept.max() == whole.max()
    for q in (0.5, 0.9, 0.99):
        assert abs(np.quantile(kept, q) / np.quantile(whole, q) - 1) < 0.05, q
    late = np.concatenate([np.zeros(100_000, np.int64), np.ones(100_000, np.int64)])
    r = Reservoir(cap=10_000)
    for chunk in np.array_split(late, 10):
        r.add(chunk)
    assert 0.45 < r.values().mean() < 0.55  # the second half is as present as the first: uniform, not recent
