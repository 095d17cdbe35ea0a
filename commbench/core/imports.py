"""Is an optional package importable? Looked up, not imported (TensorFlow takes seconds to import)."""

from __future__ import annotations

import contextlib
import importlib.util
import sys
from collections.abc import Callable

# what a long import runs in: a run's watchdog sets it (core/run/watchdog.py), so that the other ranks
# take no silence for a stop while loading TensorFlow's libraries holds this process's GIL
holding_gil: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext


def installed(name: str) -> bool:
    if name in sys.modules:
        return sys.modules[name] is not None
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


# TensorFlow's start-up lines that say nothing about the run (absl's pre-init notice, oneDNN's info)
TF_NOISE = ("WARNING: All log messages before absl::InitializeLog()", "oneDNN custom operations are on",
            "Unable to register cu", "Could not find cuda drivers", "TF-TRT Warning", "computation placer already")


def import_tensorflow(missing: str):
    """Import TensorFlow with its C++ and Python INFO/WARNING logs off (TF_CPP_MIN_LOG_LEVEL=2 unless
    set; set to 0 or 1, both speak) and its start-up notices, written to fd 2 before any log level
    applies, dropped; anything else it writes then is passed on. ``missing``: the one-line error if it
    is not installed."""
    import os
    import tempfile

    from commbench.core import errors

    if "tensorflow" in sys.modules and sys.modules["tensorflow"] is not None:
        return sys.modules["tensorflow"]
    asked = os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2") in ("0", "1")  # the user wants TF's logs
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as caught, holding_gil():
        os.dup2(caught.fileno(), 2)
        errors.said_to = saved
        try:
            import tensorflow as tf
        except ImportError:
            tf = None
        finally:
            os.dup2(saved, 2)
            errors.said_to = None
            os.close(saved)
            caught.seek(0)
            kept = [line for line in caught.read().decode(errors="replace").splitlines(keepends=True)
                    if not any(n in line for n in TF_NOISE)]
    sys.stderr.write("".join(kept))
    if tf is None:
        raise errors.Unavailable(missing)
    if not asked:  # TF's Python logger (e.g. its retracing warnings) too, which the variable does not reach
        tf.get_logger().setLevel("ERROR")
    return tf
