"""Every kind of result and how it is shown, from the declarations (benchmarks' classes, train,
predict): what ``report``, ``show`` and ``summary`` read instead of naming benchmarks."""

from __future__ import annotations

from commbench.core.output.presentation import Presentation

TRAFFIC = Presentation("bytes_step", "lower", "traffic", "size", ("transport", "mode", "payload"),
                       title="--traffic")


def presentations() -> dict[str, Presentation]:
    """bench name (as rows and metadata carry it) -> its Presentation; NAME-traffic rows: TRAFFIC."""
    from commbench import benchmarks
    from commbench.training import predict, train

    out = {name: cls.presentation() for name, cls in benchmarks.registry().items()}
    out.update(train=train.PRESENTATION, predict=predict.PRESENTATION)
    return out


def of(bench: str | None, kinds: dict[str, Presentation] | None = None) -> Presentation | None:
    """The presentation of rows whose ``bench`` is this (None: unknown)."""
    kinds = presentations() if kinds is None else kinds
    if bench and bench.endswith("-traffic"):
        return TRAFFIC
    return kinds.get(bench or "")
