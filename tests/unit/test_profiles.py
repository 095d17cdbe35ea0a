"""Gradient-tensor profiles: the shipped CSVs against an independent reading, against Keras itself,
malformed files, and payloads drawn from a model's tensor sizes."""

import statistics

import pytest

from commbench.core.measure.payload import SchemeSpec, category_of
from commbench.profiles import store

# ../shared/reference/environment.md, measured independently (Keras 3.15, weights=None)
REFERENCE = {  # tensors, MB, params, S, M, L, min B, median B, max B
    "resnet50": (214, 102.33, 25.58, 45, 140, 29, 256, 2048, 9437184),
    "resnet152": (622, 241.07, 60.27, 69, 434, 119, 256, 2048, 9437184),
    "inception_v3": (190, 95.27, 23.82, 76, 93, 21, 128, 3728, 8192000),
    "inception_resnet_v2": (490, 223.25, 55.81, 182, 246, 62, 128, 8320, 12779520),
    "vgg16": (32, 553.43, 138.36, 4, 16, 12, 256, 16384, 411041792),
    "mobilenet_v2": (158, 14.02, 3.50, 60, 95, 3, 64, 1792, 5120000),
    "bert_base": (199, 437.93, 109.48, 0, 124, 75, 3072, 3072, 93763584),
}


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_shipped_profile_matches_reference(name):
    p = store.load(name)
    n, mb, params, s, m, lg, lo, med, hi = REFERENCE[name]
    sizes = [t.nbytes for t in p.tensors]
    h = p.histogram()
    assert len(p.tensors) == n and round(p.nbytes / 1e6, 2) == mb and round(p.parameters / 1e6, 2) == params
    assert (h["S"][0], h["M"][0], h["L"][0]) == (s, m, lg)
    assert (min(sizes), statistics.median(sizes), max(sizes)) == (lo, med, hi)
    assert p.meta["parameters"] == str(p.parameters) and p.meta["tensors"] == str(n)


def test_scheme_over_model_sizes():
    p = store.load("resnet50")
    pool = p.sizes_by_category()
    all_sizes = {t.nbytes for t in p.tensors}
    draws = [SchemeSpec("skew", seed=s, pool=pool, source="resnet50").draw() for s in range(500)]
    sizes = [x for d in draws for x in d.sizes]
    assert set(sizes) <= all_sizes
    large = sum(category_of(x).letter == "L" for x in sizes) / len(sizes)
    assert abs(large - 0.6) < 0.03
    bert = store.load("bert_base")  # no Small tensors: skew draws from M and L only
    bpool = bert.sizes_by_category()
    d = SchemeSpec("skew", seed=1, pool=bpool).draw()
    assert all(category_of(x).letter in "ML" for x in d.sizes)


