"""The results schema: every benchmark's rows hold only declared keys (one point on the in-process
wire), every key it always writes, no runner's key of its own, every printed column; the generated
reference pages match the declarations; a CSV's header is known when it opens and the file is never
rewritten; CSV carries every field JSONL carries."""

from __future__ import annotations

from pathlib import Path

import pytest
from wire import run_ranks, wire_config

from commbench import reference
from commbench.benchmarks import registry
from commbench.benchmarks.runner import RUNNER_KEYS
from commbench.core.measure.harness import Loops
from commbench.core.measure.payload import Payload
from commbench.core.output.results import ResultsWriter, read_runs

DOCS = Path(__file__).resolve().parents[2] / "docs" / "reference"


@pytest.mark.parametrize("name", sorted(n for n, c in registry().items() if "measure" not in vars(c)))
def test_row_keys(name):
    """Benchmarks measured point by point (a benchmark that schedules its own work, cluster, checks
    its rows against its declaration in its own tests: test_cluster.py)."""
    cls = registry()[name]
    config = wire_config(cls, 0, Payload("x", (4096, 8192)), Loops(3, 1), np=None)
    n = cls.ranks(config.bench, config.common)
    row = run_ranks(cls, n, Payload("x", (4096, 8192)), Loops(3, 1), validate="every")
    declared = cls.row_keys()
    assert not set(row) & set(RUNNER_KEYS), f"{name} writes the runner's keys"
    assert set(row) <= set(declared), f"{name} writes undeclared keys {sorted(set(row) - set(declared))}"
    always = {k for k, c in declared.items() if not c.optional}
    assert always <= set(row), f"{name} declares keys its rows lack: {sorted(always - set(row))}"
    assert {c.key for c in cls.columns} <= set(row), f"{name} prints columns its row lacks"
    assert all(c.doc for c in declared.values()), f"{name} declares keys without a meaning"
    assert row["wrong"] == 0


@pytest.mark.parametrize("page", sorted(reference.PAGES))
def test_reference_pages_are_generated_from_the_declarations(page):
    """docs/reference/*.md are what `python -m commbench.reference PAGE` prints (regenerate on a change)."""
    text = (DOCS / f"{page}.md").read_text()
    assert text == reference.PAGES[page](), f"docs/reference/{page}.md is stale: python -m commbench.reference " \
                                           f"{page} > docs/reference/{page}.md"


def test_a_row_with_an_undeclared_key_is_refused(tmp_path):
    for suffix in (".jsonl", ".csv"):
        w = ResultsWriter(tmp_path / f"r{suffix}", {"type": "meta", "bench": "x", "options": {}}, ["a", "b"])
        w.row({"a": 1})
        with pytest.raises(ValueError, match=r"row keys \['c'\] are not in the run's declared schema"):
            w.row({"a": 2, "c": 3})
        w.close()
        (run,) = read_runs(tmp_path / f"r{suffix}")
        assert [r["a"] for r in run.rows] == [1]


