"""Transports, one module each. A module defines one ``Transport`` subclass with a ``name``;
it is found here without being listed anywhere else. Heavy imports (MPI, pyverbs, TensorFlow)
belong inside the transport's methods so that listing transports stays cheap."""

from __future__ import annotations

import importlib
import pkgutil

from commbench.core.errors import UsageError
from commbench.transports.base import Transport


def registry() -> dict[str, type[Transport]]:
    found: dict[str, type[Transport]] = {}
    for mod in pkgutil.iter_modules(__path__):
        if mod.name == "base" or mod.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{mod.name}")
        for obj in vars(module).values():
            if isinstance(obj, type) and issubclass(obj, Transport) and "name" in vars(obj):
                found[obj.name] = obj
    return dict(sorted(found.items()))


def get(name: str) -> type[Transport]:
    reg = registry()
    if name not in reg:
        raise UsageError(f"unknown transport {name!r}; choose one of {', '.join(reg)}")
    return reg[name]
