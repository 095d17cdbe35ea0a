"""Size parsing and the TF-gRPC-Bench payload schemes, statistically over many draws."""

import contextlib
import io
from collections import Counter

import pytest

from commbench import cli
from commbench.core.errors import UsageError
from commbench.core.measure.payload import CATEGORIES, LARGE, MEDIUM, SMALL, SchemeSpec, category_of, sweep_payloads
from commbench.core.measure.sizes import format_size, parse_range, parse_size, sweep


@pytest.mark.parametrize("text,expected", [("0", 0), ("64", 64), ("4K", 4096), ("4k", 4096), ("1M", 1 << 20),
                                           ("2MiB", 2 << 20), ("1G", 1 << 30), (" 8 ", 8), ("10KB", 10240)])
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["4X", "", "-1", "1.5K", "K", "4 MB extra"])
def test_parse_size_rejects(text):
    with pytest.raises(UsageError, match="bad size"):
        parse_size(text)


def test_ranges_and_sweeps():
    assert parse_range("4M") == (0, 4 << 20)
    assert parse_range("8:1K") == (8, 1024)
    with pytest.raises(UsageError, match="minimum 1024 is larger than maximum 8"):
        parse_range("1K:8")
    assert sweep(0, 8) == [0, 1, 2, 4, 8]
    assert sweep(3, 16) == [3, 4, 8, 16]
    assert sweep(1, 10) == [1, 2, 4, 8, 10]
    assert len(sweep(0, 4 << 20)) == 24  # OSU's default 0 .. 4 MiB
    assert [p.sizes for p in sweep_payloads(1, 4)] == [(1,), (2,), (4,)]
    assert format_size(4096) == "4K" and format_size(1000) == "1000" and format_size(3 << 20) == "3M"


def test_categories_match_tf_grpc_bench():
    assert (SMALL.lo, SMALL.hi, SMALL.default) == (1, 1023, 10)
    assert (MEDIUM.lo, MEDIUM.hi, MEDIUM.default) == (1024, (1 << 20) - 1, 10240)
    assert (LARGE.lo, LARGE.hi, LARGE.default) == (1 << 20, 10 << 20, 1 << 20)
    assert category_of(1023) is SMALL and category_of(1024) is MEDIUM and category_of(1 << 20) is LARGE


def draws(scheme, n=2000, **kw):
    return [SchemeSpec(scheme, seed=s, **kw).draw() for s in range(n)]


def shares(payloads):
    c = Counter(category_of(size).letter for p in payloads for size in p.sizes)
    total = sum(c.values())
    return {k: c[k] / total for k in "SML"}


def test_skew_shares_over_many_draws():
    sh = shares(draws("skew"))
    assert abs(sh["L"] - 0.6) < 0.02 and abs(sh["M"] - 0.3) < 0.02 and abs(sh["S"] - 0.1) < 0.02
    sh = shares(draws("skew", bias="small"))
    assert abs(sh["S"] - 0.6) < 0.02 and abs(sh["M"] - 0.3) < 0.02 and abs(sh["L"] - 0.1) < 0.02


def test_skew_uses_category_sizes():
    for p in draws("skew", 200):
        assert set(p.sizes) <= {10, 10240, 1 << 20}
        assert len(p.sizes) == 10


def test_uniform_is_even_and_fixed():
    p = SchemeSpec("uniform", buffers=9).draw()
    assert p.sizes == (10, 10240, 1 << 20) * 3
    p = SchemeSpec("uniform", buffers=4, categories=("M",), sizes={"S": 10, "M": 4096, "L": 1 << 20}).draw()
    assert p.sizes == (4096,) * 4


def test_random_sizes_inside_ranges_and_categories_even():
    ps = draws("random", 1000, categories=("S", "L"))
    sizes = [s for p in ps for s in p.sizes]
    assert all(SMALL.lo <= s <= SMALL.hi or LARGE.lo <= s <= LARGE.hi for s in sizes)
    sh = shares(ps)
    assert sh["M"] == 0 and abs(sh["S"] - 0.5) < 0.03
    assert min(sizes) < 100 and max(sizes) > 9 << 20  # the whole range is drawn from


def test_same_seed_same_payload_different_seed_differs():
    a = SchemeSpec("random", seed=7).draw()
    b = SchemeSpec("random", seed=7).draw()
    c = SchemeSpec("random", seed=8).draw()
    assert a == b and a.sizes != c.sizes


@pytest.mark.parametrize("kw,msg", [
    (dict(scheme="random", categories=("L",)), "at least two categories"),
    (dict(scheme="skew", sizes={"S": 2048, "M": 10240, "L": 1 << 20}), "small buffer size 2048 B is outside"),
    (dict(scheme="uniform", sizes={"S": 10, "M": 100, "L": 1 << 20}), "medium buffer size 100 B is outside"),
    (dict(scheme="uniform", sizes={"S": 10, "M": 1024, "L": 11 << 20}), "large buffer size"),
    (dict(scheme="uniform", buffers=0), "--buffers"),
    (dict(scheme="uniform", categories=("X",)), "unknown buffer category"),
    (dict(scheme="zipf"), "unknown payload scheme"),
])
def test_scheme_rejects(kw, msg):
    with pytest.raises(UsageError, match=msg):
        SchemeSpec(**kw)


def test_categories_table():
    assert set(CATEGORIES) == {"S", "M", "L"}


def test_a_payload_path_too_long_is_one_line():
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = cli.main(["p2p-latency", "--payload", "/tmp/" + "a/" * 2500 + "x.csv"])
    assert code == 2 and err.getvalue().count("\n") == 1 and "File name too long" in err.getvalue()
