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
