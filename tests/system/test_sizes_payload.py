"""Size parsing and the TF-gRPC-Bench payload schemes, statistically over many draws."""


from conftest import commbench, table_rows


def test_bare_max_says_it_sweeps_from_zero():
    """OSU's -m MAX means 0:MAX; the header says so and how to ask for one size."""
    r = commbench("p2p-latency", "-m", "64", "-i", "5", "-x", "1")
    assert r.code == 0, r.err
    assert "# sizes: -m 64 sweeps 0 to 64 in powers of two (OSU's -m MAX); one size alone: -m 64:64" in r.out
    assert [row[0] for row in table_rows(r.out)] == ["0", "1", "2", "4", "8", "16", "32", "64"]
    one = commbench("p2p-latency", "-m", "64:64", "-i", "5", "-x", "1")
    assert "# sizes" not in one.out and [row[0] for row in table_rows(one.out)] == ["64"]
