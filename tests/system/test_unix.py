"""The unix transport: AF_UNIX stream sockets between ranks on one host, messages intact (validated)
point to point and in a collective, its names holding no secret, ranks on several hosts refused."""

from __future__ import annotations

from conftest import commbench

from commbench.core.output.results import read_runs


def test_unix_carries_every_size_intact(tmp_path):
    out = tmp_path / "u.jsonl"
    r = commbench("p2p-latency", "-t", "unix", "-m", "0,8,4K,64K,1M", "-i", "50", "-x", "5", "--validate",
                  "-o", str(out))
    assert r.code == 0, r.err
    (run,) = read_runs(out)
    assert [x["size"] for x in run.rows] == [0, 8, 4096, 65536, 1 << 20]
    assert all(x["transport"] == "unix" and x["wrong"] == 0 and x["p50_us"] > 0 for x in run.rows), run.rows
    r = commbench("p2p-bibw", "-t", "unix", "--poll", "busy", "--payload", "skew", "-i", "5", "--validate")
    assert r.code == 0 and "busy-poll" in r.out, r.err


def test_unix_runs_a_collective_on_four_ranks():
    r = commbench("allreduce", "-t", "unix", "--ranks", "4", "-b", "4K", "-e", "1M", "-f", "16", "--validate")
    assert r.code == 0, r.err
    rows = [line.split() for line in r.out.splitlines() if line[:1].isdigit()]
    assert len(rows) == 3 and all(row[-1] == "0" for row in rows), r.out




