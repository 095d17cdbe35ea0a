"""Bad input over every subcommand, as a careless user types it: each case ends in exactly one line on
stderr naming the problem, exit status 2, no traceback, nothing on stdout, no hang, no file left."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent.parent / "fixtures"
BENCHMARKS = ("p2p-latency", "p2p-bandwidth", "p2p-bibw", "ps-throughput", "allreduce", "allgather", "alltoall",
              "broadcast", "cluster")
# (option values, the word the one line must contain): every benchmark gets every one of these
COMMON = [
    (["--time", "nan"], "--time"), (["--time", "inf"], "--time"), (["--time", "-1"], "--time"),
    (["--timeout", "nan"], "--timeout"), (["--timeout", "inf"], "--timeout"), (["--timeout", "0"], "--timeout"),
    (["--warmup-time", "nan"], "--warmup-time"), (["-i", "0"], "--iterations"), (["-i", "ten"], "--iterations"),
    (["-i", "10000000000000", "--timeout", "1"], "--iterations"), (["-x", "-1"], "--warmup"),
    (["--port", "1"], "--port"), (["--port", "70000"], "--port"), (["--port", "65535"], "--port"),
    (["--seed", "-1", "--payload", "random"], "--seed"), (["-m", "99999999999G"], "99999999999G"),
    (["-m", "9" * 5000], "size"), (["-m", "4X"], "4X"), (["--buffers", "0", "--payload", "uniform"], "--buffers"),
    (["--precision", "nan"], "--precision"), (["--max-time", "inf"], "--max-time"), (["--np", "0"], "--np"),
    (["--point-cap", "nan"], "--point-cap"), (["--point-cap", "-1"], "--point-cap"),
    (["--hosts", "-1"], "--hosts"), (["-t", "carrier-pigeon"], "carrier-pigeon"), (["--payload", "fractal"], "fractal"),
]
SPECIFIC = [
    (["p2p-bandwidth", "-W", "0"], "--window"), (["p2p-bandwidth", "-W", "nan"], "--window"),
    (["p2p-bandwidth", "--pairs", "0"], "--pairs"), (["p2p-bibw", "-W", "-3"], "--window"),
    (["allreduce", "--bucket-mb", "nan"], "--bucket-mb"), (["allreduce", "--bucket-mb", "-1"], "--bucket-mb"),
    (["allreduce", "--ranks", "0"], "--ranks"), (["allreduce", "--ranks", "1000"], "1000 ranks"),
    (["allreduce", "--algorithm", "telepathy"], "telepathy"), (["allreduce", "-f", "1"], "--stepfactor"),
    (["broadcast", "--root", "-1"], "--root"), (["ps-throughput", "--workers", "0"], "--workers"),
    (["ps-throughput", "--ps", "0"], "--ps"), (["p2p-latency", "-t", "grpc", "--poll", "busy"], "busy"),
    (["compare", "-i", "0"], "--iterations"), (["compare", "--timeout", "nan"], "--timeout"),
    (["compare", "--only", "nosuch"], "nosuch"), (["compare", "--output-dir", "{file}"], "{file}"),
    (["payloads", "teleport"], "teleport"), (["payloads", "show", "nosuch"], "nosuch"),
    (["hosts", "up", "0"], "0"), (["hosts", "up", "nan"], "nan"), (["hosts", "up", "1000"], "1000"),
    (["hosts", "sideways"], "sideways"),
    (["train", "--workers", "0"], "--workers"), (["train", "--batch", "-1"], "--batch"),
    (["train", "--lr", "nan"], "--lr"), (["train", "--steps", "0"], "--steps"),
    (["train", "--timeout", "inf"], "--timeout"),
    (["train", "--port", "1"], "--port"), (["train", "--strategy", "hope"], "hope"),
    (["predict", "--p2p", str(FIXTURES / "predict.jsonl"), "--compute-ms", "-5"], "--compute-ms"),
    (["predict", "--p2p", str(FIXTURES / "predict.jsonl"), "--compute-ms", "nan"], "--compute-ms"),
    (["predict", "--p2p", str(FIXTURES / "predict.jsonl"), "--batch", "-1"], "--batch"),
    (["predict", "--p2p", str(FIXTURES / "predict.jsonl"), "--workers", "0"], "--workers"),
    (["devices", "--frobnicate"], "--frobnicate"), (["report", "--format", "pdf", "x.jsonl"], "pdf"),
    (["p2p-latency", "-o", "results.txt"], "results.txt"),
    (["p2p-latency", "-o", "/nonexistent/x.jsonl"], "nonexistent"),
    (["nosuch-command"], "nosuch-command"), ([], "COMMAND"),
    # round 2 (issue 39): each of these hung, ran something else or ended in a traceback
    (["p2p-latency", "-o", "{dir}/fifo.jsonl"], "not a regular file"), (["p2p-latency", "-m", ""], "''"),
    (["predict", "--p2p", str(FIXTURES / "predict.jsonl"), "--compute-ms", "0"], "--compute-ms"),
    (["p2p-latency", "-o", "a" * 5000 + ".jsonl"], "File name too long"),
    (["p2p-latency", "--payload", "b" * 5000], "unknown model or profile"),
    (["p2p-latency", "--payload", "{dir}/huge.csv"], "this machine has"),
    (["p2p-latency", "--bind", "10.255.255.254"], "--bind 10.255.255.254"),
    (["p2p-latency", "--bind", "no-such-host.invalid"], "--bind no-such-host.invalid"),
    (["p2p-latency", "-t", "tcp", "--verbs-op", "write"], "--verbs-op"),
    (["summary", "{dir}/ps.jsonl"], "summary reads p2p-latency and p2p-bandwidth"),
    # round 3: accepted and ran nothing, blamed another run, or imported as a measurement
    (["p2p-latency", "--timeout", "1e-9"], "--timeout"), (["compare", "--timeout", "0.01"], "--timeout"),
    (["cluster", "--tests", "bisection", "--cuts", "0"], "--cuts 0"),
    (["import", "{dir}/neg-osu.txt"], "not a measurement"), (["import", "{dir}/inf-osu.txt"], "not a measurement"),
    (["import", "{dir}/neg-osu.txt", "--size", "1" + "0" * 30], "--size"),
    (["import", "{dir}/neg-osu.txt", "--ranks", "-1"], "--ranks"),
    # round 4: a file's values taken as data, tracebacks, runs past 60 s, an output through a link
    *[([*cmd, f"{{dir}}/{f}"], says) for cmd in (["findings"], ["diff", "{dir}/cluster-ok.jsonl"])
      for f, says in (("cluster-neg.jsonl", "below 0"), ("cluster-abc.jsonl", "not a number"),
                      ("cluster-big.jsonl", "beyond 1e+15"), ("cluster-neglat.jsonl", "lat_us"))],
    (["cluster", "--np", "2", "--baseline", "{dir}/cluster-neg.jsonl"], "below 0"),
    (["cluster", "--np", "2", "--resume", "{dir}/cluster-abc.jsonl"], "not a number"),
    (["findings", "{dir}/cluster-ok.jsonl", "--reference", "{dir}/long-cell.csv"], "not a CSV line"),
    (["findings", "{dir}/cluster-ok.jsonl", "--topology", "{dir}/million.conf"], "more than 200,000"),
    (["findings", "{dir}/cluster-ok.jsonl", "--topology", "{dir}/deep.conf"], "levels below its root"),
    (["cluster", "--np", "2", "--topology", "{dir}/million.conf"], "more than 200,000"),
    (["p2p-latency", "-o", "{dir}/link.jsonl"], "symbolic link"),
    (["findings", "{dir}/cluster-ok.jsonl", "--drain-list", "{dir}/fifo.csv"], "FIFO"),
    (["findings", "{dir}/cluster-ok.jsonl", "--metrics", "{dir}/link.jsonl"], "symbolic link"),
]
# a file given to each file-reading command
FILES = {
    "binary.jsonl": os.urandom(3000).replace(b"\n", b"x"),
    "empty.jsonl": b"",
    "meta-only.jsonl": b'{"type": "meta", "bench": "p2p-latency"}\n',
    "no-rows.jsonl": b'{"type": "meta", "bench": "p2p-latency", "options": {}}\n',
    "nan-row.jsonl": b'{"type": "meta", "bench": "p2p-latency", "options": {}}\n'
                     b'{"type": "row", "size": 8, "p50_us": NaN}\n',
    "inf-row.csv": b'# commbench-meta {"bench": "p2p-latency", "options": {}}\nsize,p50_us\n8,inf\n',
    "garbage.jsonl": b"GET / HTTP/1.1\r\n",
    "binary.csv": os.urandom(3000).replace(b"\n", b"x"),
    "wrong-header.csv": b"a,b\n1,2\n",
    "no-size.jsonl": b'{"type": "meta", "bench": "p2p-latency", "options": {"transport": "tcp"}}\n'
                     b'{"type": "row", "bench": "p2p-latency", "transport": "tcp", "p50_us": 3.0}\n',
    "abc-size.jsonl": b'{"type": "meta", "bench": "p2p-latency", "options": {"transport": "tcp"}}\n'
                      b'{"type": "row", "bench": "p2p-latency", "transport": "tcp", "size": "abc", "p50_us": 3.0}\n',
    "deep.jsonl": b"[" * 100_000 + b"\n",
    "deep.csv": b"# commbench-meta " + b"[" * 100_000 + b"\n",
}


def cluster_run(rate: str = "100.0", lat: str = "20.0") -> bytes:
    """A cluster run of four hosts, every pair at ``rate`` MB/s and ``lat`` us (JSON text: any value)."""
    names = ["n0", "n1", "n2", "n3"]
    rows = [f'{{"type": "row", "test": "pairwise", "round": 1, "a": "{a}", "b": "{b}", "mb_s": {rate}, '
            f'"lat_us": {lat}}}' for i, a in enumerate(names) for b in names[i + 1:]]
    meta = ('{"type": "meta", "bench": "cluster", "run_id": "r", "start": "2026-12-01T00:00:00", '
            '"options": {"transport": "tcp", "slow_pct": 25.0, "tests": "pairwise"}, '
            '"hosts": ["n0", "n1", "n2", "n3"], "endpoints": ["n0", "n1", "n2", "n3"]}')
    return "\n".join([meta, *rows, ""]).encode()


EXTRA = {  # files for cases above, not given to every reader
    "neg-osu.txt": b"# OSU MPI Latency Test v7.4\n# Size       Avg Latency(us)\n1 0.25\n8 -0.25\n",
    "inf-osu.txt": b"# OSU MPI Latency Test v7.4\n# Size       Avg Latency(us)\n1 0.25\n8 1e999\n",
    "huge.csv": b"# model: huge\nname,shape,dtype,bytes\nw,100000000000,float32,400000000000\n",
    "cluster-ok.jsonl": cluster_run(), "cluster-neg.jsonl": cluster_run(rate="-50.0"),
    "cluster-abc.jsonl": cluster_run(rate='"fast"'), "cluster-big.jsonl": cluster_run(rate="1e300"),
    "cluster-neglat.jsonl": cluster_run(lat="-3.0"),
    "long-cell.csv": b"link,metric,expected,warn_pct,fail_pct\nany,mb_s," + b"9" * 200_000 + b",10,20\n",
    "million.conf": b"".join(b"SwitchName=s%d Nodes=h%dx[0-99999]\n" % (i, i) for i in range(12)),
    "deep.conf": b"".join(b"SwitchName=c%d Switches=c%d\n" % (i, i + 1) for i in range(40)) + b"SwitchName=c40 "
                 b"Nodes=n[0-3]\n",
    "ps.jsonl": b'{"type": "meta", "bench": "ps-throughput", "options": {"transport": "tcp"}}\n'
                b'{"type": "row", "bench": "ps-throughput", "transport": "tcp", "size": 8, "workers": 2, '
                b'"steps_s": 1.0}\n',
}
READERS = [["show"], ["summary"], ["report"], ["predict", "--p2p"]]
PROFILE_FILES = ["binary.csv", "empty.csv", "wrong-header.csv"]
ENVS = [
    ({"OMPI_COMM_WORLD_RANK": "abc", "OMPI_COMM_WORLD_SIZE": "2"}, "OMPI_COMM_WORLD_RANK"),
    ({"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "2"}, "rank 5 of 2"),
    ({"OMPI_COMM_WORLD_RANK": "0"}, "OMPI_COMM_WORLD_SIZE"),
    ({"PMI_RANK": "0"}, "PMI_SIZE"), ({"PMI_SIZE": "2"}, "PMI_RANK"),
    ({"SLURM_PROCID": "0", "SLURM_STEP_ID": "0"}, "SLURM_STEP_NODELIST"),
    ({"SLURM_PROCID": "x", "SLURM_STEP_ID": "0", "SLURM_STEP_NODELIST": "n1"}, "SLURM_PROCID"),
    ({"SLURM_PROCID": "0", "SLURM_STEP_ID": "0", "SLURM_STEP_NODELIST": "n[1-"}, "SLURM_STEP_NODELIST"),
    ({"COMMBENCH_RANK": "0", "COMMBENCH_SIZE": "2", "COMMBENCH_ROOT": "127.0.0.1:5", "COMMBENCH_RDV_FD": "99"},
     "COMMBENCH_RDV_FD"),
    ({"COMMBENCH_RANK": "0", "COMMBENCH_SIZE": "2", "COMMBENCH_ROOT": "127.0.0.1:x"}, "COMMBENCH_ROOT"),
    ({"COMMBENCH_SIZE": "2"}, "COMMBENCH_RANK"),
    ({"COMMBENCH_PLAN_FD": "0"}, "not started by commbench's launcher"),
]


def cases() -> list[tuple[str, list[str], dict, str]]:
    out = [(f"{b} {' '.join(a)[:40]}", [b, *a, "-o", "out.jsonl"], {}, n) for b in BENCHMARKS for a, n in COMMON]
    out += [(" ".join(a)[:50], a, {}, n) for a, n in SPECIFIC]
    out += [(f"{' '.join(r)} {f}", [*r, f"{{dir}}/{f}"], {}, f) for r in READERS for f in (*FILES, "fifo.jsonl")]
    out += [(f"payloads show {f}", ["payloads", "show", f"{{dir}}/{f}"], {}, f) for f in (*PROFILE_FILES, "fifo.csv")]
    out += [(f"env {' '.join(e)}", ["p2p-latency", "-m", "8:8"], e, n) for e, n in ENVS]
    return out


def run_case(case, files: Path, cwd: Path) -> str | None:
    """None if the case behaved, else what went wrong."""
    name, args, env, needle = case
    cwd.mkdir()
    args = [a.replace("{dir}", str(files)).replace("{file}", str(files / "empty.jsonl")) for a in args]
    needle = needle.replace("{file}", str(files / "empty.jsonl"))
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("OMPI_", "PMI_", "SLURM_", "COMMBENCH_", "PMIX_"))}
    try:
        p = subprocess.run([sys.executable, "-m", "commbench", *args], capture_output=True, text=True, timeout=60,
                           cwd=cwd, env={**clean, **env, "PYTHONPATH": str(Path(__file__).parents[2])})
    except subprocess.TimeoutExpired:
        return f"{name}: hung (60 s)"
    lines = p.stderr.strip().splitlines()
    left = sorted(x.name for x in cwd.iterdir())
    if p.returncode != 2 or len(lines) != 1 or "Traceback" in p.stderr or p.stdout or left \
            or needle not in lines[0] or not lines[0].startswith("commbench: "):
        return f"{name}: exit {p.returncode}, files left {left}, stdout {p.stdout[:100]!r}, stderr {p.stderr[-400:]!r}"
    return None


PARTS = 8  # each part its own test: a loaded machine's slowness costs a part, not the suite's timeout on the whole


def test_the_table_covers_every_command_and_reader():
    got = cases()
    assert len(got) >= 350
    assert {a[0] for _, a, _, _ in got if a} >= {*BENCHMARKS, "compare", "import", "summary", "report", "train"}


@pytest.mark.slow
@pytest.mark.parametrize("part", range(PARTS))
def test_bad_inputs_are_one_line_each(tmp_path, part):
    files = tmp_path / "files"
    files.mkdir()
    for name, data in {**FILES, **EXTRA}.items():
        (files / name).write_bytes(data)
    (files / "empty.csv").write_bytes(b"")
    os.mkfifo(files / "fifo.jsonl")
    os.mkfifo(files / "fifo.csv")
    (files / "link.jsonl").symlink_to(files / "empty.jsonl")
    mine = cases()[part::PARTS]
    with ThreadPoolExecutor(max_workers=4) as pool:
        failures = [f for f in pool.map(lambda ic: run_case(ic[1], files, tmp_path / f"c{ic[0]}"), enumerate(mine))
                    if f]
    assert not failures, f"{len(failures)} of {len(mine)} bad inputs misbehaved:\n" + "\n".join(failures)
