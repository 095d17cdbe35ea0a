"""Every kind of result and how it is shown, from the declarations (benchmarks' classes, train,
predict): what ``report``, ``show`` and ``summary`` read instead of naming benchmarks."""

from __future__ import annotations

from commbench.core.output.presentation import Presentation

TRAFFIC = Presentation("bytes_step", "lower", "traffic", "size", ("transport", "mode", "payload"),
                       title="--traffic")


def presentations() -> dict[str, Presentation]:
    """bench name (as rows and metadata carry it) -> its Presentation; NAME-traffic rows: TRAFFIC."""
    from commbench import benchmarks
    from commbench.training import predict_rows, train

    out = {name: cls.presentation() for name, cls in benchmarks.registry().items()}
    out.update(train=train.PRESENTATION, predict=predict_rows.PRESENTATION)
    out["train-compute"] = train.COMPUTE_PRESENTATION
    return out


def of(bench: str | None, kinds: dict[str, Presentation] | None = None) -> Presentation | None:
    """The presentation of rows whose ``bench`` is this (None: unknown)."""
    kinds = presentations() if kinds is None else kinds
    if bench and bench.endswith("-traffic"):
        return TRAFFIC
    return kinds.get(bench or "")


def declared_keys(bench: str) -> dict:
    """Every key rows of this kind may hold, declared (empty for a kind not known here)."""
    from commbench import benchmarks
    from commbench.benchmarks.runner import RUNNER
    from commbench.core.capture import traffic
    from commbench.core.output.table import declared
    from commbench.training import predict_rows, train

    if bench.endswith("-traffic"):
        base = bench.removesuffix("-traffic")
        return declared(RUNNER, traffic.KEYS, train.schema(False).values() if base == "train" else [])
    if bench == "train":
        return train.schema(False)
    if bench == "train-compute":
        return train.compute_schema()
    if bench == "predict":
        return predict_rows.schema()
    cls = benchmarks.registry().get(bench)
    return declared(RUNNER, cls.row_keys().values()) if cls else {}


POINT_NUMBERS = ("size", "count", "batch", "workers", "ps")  # keys that tell points apart, besides a kind's x


def _flat(v: list) -> list:
    """The values of a list of values, or of lists of them (per step, per worker), as one list."""
    return [y for x in v for y in (_flat(x) if isinstance(x, list) else [x])]


def read_checked(path, need_rows: bool = True) -> list:
    """A results file's runs, every row's values checked against the declared schema: a key with a
    unit holds a number within its unit's bounds (value_problem) or nothing, and a kind's x axis is in
    every row. A row that is not so (a file edited or written by something else) is one UsageError
    naming the file, the row and the key."""
    from commbench.core.errors import UsageError
    from commbench.core.output.results import read_runs
    from commbench.core.output.table import value_problem

    runs = read_runs(path, need_rows=need_rows)
    kinds = presentations()
    schemas: dict[str, tuple[list, Presentation | None]] = {}  # per kind of row, worked out once
    for run in runs:
        for i, row in enumerate(run.rows, 1):
            bench = str(row.get("bench", run.meta.get("bench")))
            if bench not in schemas:
                schemas[bench] = ([(k, c) for k, c in declared_keys(bench).items() if c.unit], of(bench, kinds))
            numeric, p = schemas[bench]
            if not isinstance(row.get("bench", ""), str):
                raise UsageError(f"{path}: row {i}: bench is {str(row['bench'])[:40]!r}, not a benchmark's name; "
                                 "was the file edited?")
            for k, c in numeric:
                v = row.get(k)
                if v is None:
                    continue
                values = _flat(v) if isinstance(v, list) and c.many else [v]  # a list where one is declared: refused
                why = next((w for x in values if x is not None and (w := value_problem(x, c.unit))), "")
                if why:
                    raise UsageError(f"{path}: row {i}: {k} is {str(v)[:40]!r}, {why}; was the file edited?")
            scalars = (p.metric, p.x, *POINT_NUMBERS) if p is not None else POINT_NUMBERS
            for k in scalars:  # what rows are matched, sorted and drawn by: one number each
                v = row.get(k)
                if isinstance(v, (bool, list, dict, str)):
                    raise UsageError(f"{path}: row {i}: {k} is {str(v)[:40]!r}, not a number; was the file edited?")
            for k in (p.series if p is not None else ()):
                v = row.get(k)
                if isinstance(v, bool) or (v is not None and not isinstance(v, (str, int, float))):
                    raise UsageError(f"{path}: row {i}: {k} is {str(v)[:40]!r}, not a name; was the file edited?")
            if p is not None and p.columns and p.metric not in row:  # one row per run: it is the run's result
                raise UsageError(f"{path}: row {i} has no {p.metric}: not a {bench} row as commbench writes them")
            if p is not None and p.figure == "line" and p.x not in row:
                raise UsageError(f"{path}: row {i} has no {p.x}: not a {bench} row as commbench writes them")
    return runs
