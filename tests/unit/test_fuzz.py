"""Bad input, generated (hypothesis): command lines of real subcommands and flags with hostile values
and random tokens, and results files damaged every way (truncated, wrong types, deep nesting, binary,
NaN), given to the commands users give them to. Whatever comes in: exit 0 or 2, never a traceback,
at most one line on stderr, and no hang (the test's timeout).

In-process (``main()`` as the console script runs it, an escaping exception being the traceback),
with the launch of ranks replaced by a stand-in: what is tested is everything before the ranks
start, where bad input must be refused."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import tempfile
import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from commbench import cli, planning
from commbench.launch import local, plan

FIX = Path(__file__).parent.parent / "fixtures"
# The same examples every run (CI stays a regression test); COMMBENCH_FUZZ_EXPLORE=1 draws new ones each
# run, to look for what is not found yet (do that before a change lands, several times).
FIXED = os.environ.get("COMMBENCH_FUZZ_EXPLORE") != "1"
SKIP = {"hosts", "train", "compare", "devices"}  # they start namespaces, TensorFlow or real runs: tested elsewhere


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {name: p for name, p in sub.choices.items() if name not in SKIP}


SUBS = subcommands()
FLAGS = {name: [a for a in p._actions if a.option_strings and not isinstance(a, argparse._HelpAction)]
         for name, p in SUBS.items()}

hostile = st.one_of(
    st.sampled_from(["0", "-1", "1", "8", "4K", "1M", "9" * 40, "nan", "inf", "-inf", "1e309", "0x10", "", " ",
                     "-", "--", "8:", ":8", "8:4", "1,2,,3", "4G:8G", "/dev/null", "/proc/self/mem", "/", "..",
                     "/nonexistent/x.jsonl", "x.jsonl", "x.csv", "x.txt", "tcp", "mpi", "verbs", "busy", "a=b",
                     "éü", "a" * 5000]),
    st.text(max_size=30).filter(lambda s: "\x00" not in s),
    st.integers(-(2 ** 70), 2 ** 70).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
)


@st.composite
def command_lines(draw):
    name = draw(st.sampled_from(sorted(SUBS)))
    argv = [name]
    for action in draw(st.lists(st.sampled_from(FLAGS[name]), max_size=4)) if FLAGS[name] else []:
        argv.append(draw(st.sampled_from(action.option_strings)))
        if action.nargs != 0:
            argv += [draw(hostile) for _ in range(action.nargs if isinstance(action.nargs, int) else 1)]
    if draw(st.booleans()):
        argv.insert(draw(st.integers(0, len(argv))), draw(hostile))  # a stray token anywhere
    return argv


def run(argv: list[str]) -> tuple[int, str]:
    """Exit status and stderr, a warning counted as the lines Python would print for it."""
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out), warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        rc = cli.main(argv)
    return rc, err.getvalue() + "".join(f"{x.category.__name__}: {x.message}\n" for x in w)


def handed(n, argv, how, what, handed_plan=None) -> int:
    """The launch of ranks, stood in for: the plan a rank would receive comes out of its side as it went
    in (planning.planned, then encoded again byte for byte), and the run ends as if its ranks had finished."""
    if handed_plan is not None:
        encoded = handed_plan()  # what the local launcher would hand its ranks
        job, body = plan.decode(plan.seal(encoded, "t"), "t")
        if job == "benchmark":
            bench_cls, _, config = planning.planned(body)
            assert planning.plan_of(bench_cls, config) == encoded, (argv, body)
    return 0


@pytest.fixture(scope="module")
def no_launch():
    """Ranks are never started (``handed`` stands in)."""
    mp = pytest.MonkeyPatch()
    mp.setattr(local, "here_or_launch", handed)
    yield
    mp.undo()


@pytest.mark.timeout(600)
@settings(max_examples=400, deadline=None, derandomize=FIXED,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(argv=command_lines())
def test_any_command_line_is_run_or_refused_in_one_line(no_launch, argv, tmp_path_factory):
    with tempfile.TemporaryDirectory() as d, contextlib.chdir(d):  # relative outputs land here
        rc, err = run(argv)
    assert rc in (0, 2), (argv, rc, err)
    assert "Traceback" not in err and len(err.strip().splitlines()) <= 1, (argv, err)


def damage(text: str, how: str, rng: random.Random) -> bytes:
    lines = text.splitlines()
    if how == "truncate":
        return text[:rng.randrange(len(text) + 1)].encode()
    if how == "binary":
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 400)))
    if how == "deep":
        n = rng.choice([50, 5000, 200000])
        return (lines[0] + "\n" + '{"type": "row", "size": ' + "[" * n + "]" * n + "}\n").encode()
    if how == "nan":
        return text.replace(": 0.", ": NaN").replace(": 1", ": Infinity", 1).encode()
    rows = [json.loads(x) for x in lines if x.strip()]
    row = rng.choice(rows[1:] or rows)
    key = rng.choice(sorted(row))
    row[key] = rng.choice(["abc", None, [], {}, True, -1, 1e308, "9" * 400, [1, "x"], {"a": [1]}])
    if how == "drop":
        row.pop(key)
    return "\n".join(json.dumps(r) for r in rows).encode()


READERS = [["show"], ["summary"], ["report", "-o", "rep"], ["predict", "--p2p"], ["report", "--compare", "A"],
           ["import"]]


@pytest.mark.timeout(600)
@settings(max_examples=150, deadline=None, derandomize=FIXED)
@given(name=st.sampled_from(sorted(p.name for p in FIX.glob("*.jsonl"))),
       how=st.sampled_from(["truncate", "binary", "deep", "nan", "types", "drop"]),
       reader=st.sampled_from(READERS), seed=st.integers(0, 2 ** 32))
def test_any_damaged_results_file_is_read_or_refused_in_one_line(name, how, reader, seed):
    data = damage((FIX / name).read_text(), how, random.Random(seed))
    with tempfile.TemporaryDirectory() as d, contextlib.chdir(d):
        Path("f.jsonl").write_bytes(data)
        argv = [*reader, "f.jsonl"] if reader[-1] != "A" else [*reader[:-1], "f.jsonl", str(FIX / name)]
        if reader == ["predict", "--p2p"]:
            argv += ["--model", "resnet50", "--compute-ms", "100"]
        rc, err = run(argv)
    assert rc in (0, 2), (argv, how, rc, err)
    assert "Traceback" not in err and len(err.strip().splitlines()) <= 1, (argv, how, err)
