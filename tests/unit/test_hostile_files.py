"""Hostile files for every reader of the cluster's files (results through findings and diff, --reference,
--topology) and of the launcher's plan, generated: each is judged, or refused in one line with exit 2;
never a traceback, never a value no measurement can have taken as data."""

from __future__ import annotations

import contextlib
import io
import json
import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from commbench import cli
from commbench.core.output.table import MAX_VALUE

HOSTS = ["n0", "n1", "n2", "n3"]
anything = st.one_of(st.none(), st.booleans(), st.integers(-10**20, 10**20), st.floats(allow_nan=False),
                     st.text(max_size=12), st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3),
                                                                                                   st.integers(),
                                                                                                   max_size=2))
names = st.one_of(st.sampled_from(HOSTS), st.text(max_size=12))
SETTINGS = settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(list(argv))
    return code, out.getvalue(), err.getvalue()


def judged_or_refused(code: int, out: str, err: str) -> None:
    if code == 2:
        assert len(err.strip().splitlines()) == 1 and err.startswith("commbench: "), err
    else:
        assert code in (0, 1) and "# findings" in out, (code, out, err)


def measurement(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and 0 <= v <= MAX_VALUE


@SETTINGS
@given(rows=st.lists(st.fixed_dictionaries({"test": st.sampled_from(["pairwise", "recheck", "alone", "ring-ordered"]),
                                            "a": names, "b": names, "mb_s": anything, "lat_us": anything},
                                           optional={"suspect": names, "role": st.sampled_from(["probe", "control"]),
                                                     "error": anything, "lost": names, "round": anything}),
                     min_size=1, max_size=12))
def test_a_results_file_of_any_values_is_judged_or_refused(tmp_path_factory, rows):
    path = tmp_path_factory.mktemp("f") / "run.jsonl"
    meta = {"type": "meta", "bench": "cluster", "run_id": "r", "options": {"transport": "tcp", "slow_pct": 25.0},
            "hosts": HOSTS, "endpoints": HOSTS}
    path.write_text("\n".join(json.dumps(x) for x in [meta, *({"type": "row", **r} for r in rows)]) + "\n")
    code, out, err = run("findings", str(path))
    judged_or_refused(code, out, err)
    if any(not measurement(r[k]) for r in rows for k in ("mb_s", "lat_us") if r[k] is not None):
        assert code == 2, out  # no value a measurement cannot have is judged
    judged_or_refused(*run("diff", str(path), str(path)))


OK_RUN = "\n".join(json.dumps(x) for x in [
    {"type": "meta", "bench": "cluster", "run_id": "r", "options": {"transport": "tcp", "slow_pct": 25.0},
     "hosts": HOSTS, "endpoints": HOSTS},
    *({"type": "row", "test": "pairwise", "round": 1, "a": a, "b": b, "mb_s": 100.0, "lat_us": 20.0}
      for i, a in enumerate(HOSTS) for b in HOSTS[i + 1:])]) + "\n"
cells = st.one_of(st.sampled_from(["any", "inside", "across", "mb_s", "lat_us", "10", "20", "-1", "nan", "1e999"]),
                  st.text(max_size=8), st.just("9" * 140_000))


@SETTINGS
@given(lines=st.lists(st.lists(cells, min_size=1, max_size=6), max_size=4), header=st.booleans())
def test_a_reference_file_of_any_cells_is_used_or_refused(tmp_path_factory, lines, header):
    d = tmp_path_factory.mktemp("r")
    (d / "run.jsonl").write_text(OK_RUN)
    text = "\n".join(([ "link,metric,expected,warn_pct,fail_pct"] if header else []) + [",".join(c) for c in lines])
    (d / "ref.csv").write_text(text + "\n")
    judged_or_refused(*run("findings", str(d / "run.jsonl"), "--reference", str(d / "ref.csv")))


words = st.one_of(st.sampled_from(["SwitchName=s0", "SwitchName=s1", "Nodes=n[0-1]", "Nodes=n[2-3]", "Switches=s0",
                                   "Switches=s[0-1]", "Nodes=x[0-99999]", "Nodes=n[0-", "LinkSpeed=1", "#"]),
                  st.text(max_size=10))


@SETTINGS
@given(lines=st.lists(st.lists(words, min_size=1, max_size=4), max_size=6))
def test_a_topology_file_of_any_words_is_used_or_refused(tmp_path_factory, lines):
    d = tmp_path_factory.mktemp("t")
    (d / "run.jsonl").write_text(OK_RUN)
    (d / "topo.conf").write_text("\n".join(" ".join(w) for w in lines) + "\n")
    judged_or_refused(*run("findings", str(d / "run.jsonl"), "--topology", str(d / "topo.conf")))


@SETTINGS
@given(body=st.dictionaries(st.sampled_from(["workers", "batch", "steps", "model", "lr", "timeout", "nonsense"]),
                            anything, max_size=4))
def test_a_sealed_plan_of_any_options_runs_checked_or_is_refused(body):
    """Even a plan the launcher sealed goes through the options' declared types: a value no command line
    could give is one UsageError, never a traceback or a run."""
    from commbench.core.errors import UsageError
    from commbench.training.train import TrainOptions, planned

    try:
        o = planned(body)
    except UsageError as exc:
        assert "\n" not in str(exc)
        return
    assert o == TrainOptions(**body)
    for k, v in body.items():
        assert v is None or isinstance(v, (str, int, float)) and not isinstance(v, (list, dict)), (k, v)


profile_cells = st.one_of(st.sampled_from(["w", "3x4", "float32", "48", "1", "0", "-4", "nan", "1e999", "int8"]),
                          st.text(max_size=8), st.just("9" * 140_000))


@SETTINGS
@given(lines=st.lists(st.lists(profile_cells, min_size=1, max_size=6), max_size=4), header=st.booleans())
def test_a_gradient_profile_of_any_cells_is_shown_or_refused(tmp_path_factory, lines, header):
    path = tmp_path_factory.mktemp("p") / "model.csv"
    rows = (["name,shape,dtype,bytes,trainable"] if header else []) + [",".join(c) for c in lines]
    path.write_text("# model: m\n" + "\n".join(rows) + "\n")
    code, out, err = run("payloads", "show", str(path))
    if code == 2:
        assert len(err.strip().splitlines()) == 1 and err.startswith("commbench: "), err
    else:
        assert code == 0 and out, err


def test_a_list_of_lists_of_values_is_checked_value_by_value(tmp_path):
    """train's grads_lag_ms holds a list per step of the workers' lags: each is checked, none refused
    for being nested."""
    from commbench import presentation
    from commbench.core.errors import UsageError

    def file(lags) -> str:
        p = tmp_path / "train.jsonl"
        p.write_text(json.dumps({"type": "meta", "bench": "train", "options": {}}) + "\n" + json.dumps(
            {"type": "row", "bench": "train", "workers": 2, "images_s": 100.0, "grads_lag_ms": lags}) + "\n")
        return str(p)

    assert presentation.read_checked(file([[1.5], [2.0]]))[0].rows[0]["grads_lag_ms"] == [[1.5], [2.0]]
    for bad in ([[1.5], [1e300]], [["x"]]):
        try:
            presentation.read_checked(file(bad))
        except UsageError as exc:
            assert "grads_lag_ms" in str(exc)
        else:
            raise AssertionError(f"{bad} taken")
