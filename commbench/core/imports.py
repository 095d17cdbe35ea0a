"""Is an optional package importable? Looked up, not imported (TensorFlow takes seconds to import)."""

from __future__ import annotations

import importlib.util
import sys


def installed(name: str) -> bool:
    if name in sys.modules:
        return sys.modules[name] is not None
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False
