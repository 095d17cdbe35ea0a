"""--resume: a cluster run killed part way continued. The rows the earlier run measured are kept, by the
step that measured them (each declared test's key: tests.py), and only the rest is measured.
"""

from __future__ import annotations

from collections.abc import Callable

from commbench.core.analysis.evidence import read_evidence
from commbench.core.errors import UsageError

SAME = ("transport", "tests", "per_host", "serial", "lat_size", "bw_size", "window", "bw_time", "iterations",
        "warmup", "transports", "seed")  # what a resumed run must share with the run it continues
StepKey = Callable[[dict], tuple]


def same_options(path: str, old: dict, options: dict) -> None:
    """UsageError where the run in ``path`` (its options ``old``) measured with other options than these."""
    differ = [k for k in SAME if old.get(k) != options.get(k)]
    if differ:
        k = differ[0]
        raise UsageError(f"--resume {path}: that run measured with --{k.replace('_', '-')} {old.get(k)}, this one "
                         f"{options.get(k)}: resume with the options it was started with")


class Resume:
    """The earlier run's rows by step; empty where the run resumes nothing."""

    def __init__(self, key: StepKey) -> None:
        self.key = key
        self.replay: dict[tuple, list[dict]] = {}
        self.resumed: dict | None = None  # which run, and how many of its rows are kept

    @classmethod
    def load(cls, path: str, names: list[str], options: dict, keys: set[str], key: StepKey) -> Resume:
        """The measured rows of the run in ``path`` (keys ``keys`` of them; UsageError where that run
        measured other hosts or with other options)."""
        run, _ = read_evidence(path)
        same_options(path, run.meta.get("options") or {}, options)
        if run.meta.get("endpoints") != names:
            were = ", ".join((run.meta.get("endpoints") or [])[:3])
            raise UsageError(f"--resume {path}: that run's endpoints ({were}...) are not this run's "
                             f"({', '.join(names[:3])}...): resume on the same hosts")
        steps: dict[tuple, list[dict]] = {}
        for row in run.rows:
            if row.get("test") not in ("finding", "summary"):
                steps.setdefault(key(row), []).append({k: v for k, v in row.items() if k in keys} | {"resumed": True})
        got = cls(key)
        # a step whose own rows failed is measured again (a via row's failure is that transport's finding)
        got.replay = {k: rows for k, rows in steps.items()
                      if any(not r.get("via") for r in rows) and not any(r.get("error") and not r.get("via")
                                                                         for r in rows)}
        got.resumed = {"file": path, "run_id": run.meta.get("run_id"), "rows": sum(map(len, got.replay.values()))}
        return got

    def take(self, row: dict) -> list[dict] | None:
        """The kept rows of the step that measures ``row`` (its test, round, pair, ...), once."""
        return self.replay.pop(self.key(row), None) if self.replay else None

    def has(self, row: dict) -> bool:
        return bool(self.replay) and self.key(row) in self.replay
