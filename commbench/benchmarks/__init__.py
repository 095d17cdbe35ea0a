"""Benchmarks, one module each; a module's ``Benchmark`` subclasses with a ``name`` are found here."""

from __future__ import annotations

import importlib
import pkgutil

from commbench.benchmarks.base import Benchmark


def registry() -> dict[str, type[Benchmark]]:
    found: dict[str, type[Benchmark]] = {}
    for mod in pkgutil.iter_modules(__path__):
        if mod.name in ("base", "runner") or mod.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{mod.name}")
        for obj in vars(module).values():
            if isinstance(obj, type) and issubclass(obj, Benchmark) and "name" in vars(obj):
                found[obj.name] = obj
    return found
