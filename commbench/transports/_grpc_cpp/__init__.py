"""The grpc-cpp transport's C++ extension (cbgrpc.cc): building it and loading it with ctypes.

``python -m commbench.transports._grpc_cpp`` builds it (launchers/setup.sh does) with g++ against the
system's gRPC C++ library found by pkg-config (Debian: libgrpc++-dev). The library's name carries a
hash of the source and of gRPC's version, so an edited source or an upgraded gRPC is never served by
a stale build. It goes beside the source if that is writable, else into ~/.cache/commbench/grpc-cpp.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
from functools import cache
from pathlib import Path

from commbench.core.errors import Unavailable

SOURCE = Path(__file__).with_name("cbgrpc.cc")
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "commbench" / "grpc-cpp"
INSTALL = "apt-get install libgrpc++-dev pkg-config g++ (Debian/Ubuntu), then bash launchers/setup.sh"


def _pkg_config(*args: str) -> str | None:
    if not shutil.which("pkg-config"):
        return None
    p = subprocess.run(["pkg-config", *args, "grpc++"], capture_output=True, text=True)
    return p.stdout.strip() if p.returncode == 0 else None


@cache
def runtime_version() -> str | None:
    """gRPC C++'s version from the development files, or None where they are missing (asked once)."""
    return _pkg_config("--modversion")


def _name(version: str) -> str:
    return f"libcbgrpc-{hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:12]}-{version}.so"


def _places() -> list[Path]:
    return [SOURCE.parent, CACHE]


def find() -> Path | None:
    """The built library for this source and this gRPC, if any."""
    version = runtime_version()
    for place in _places():
        # without the development files, a build of this source for whichever gRPC it was built against
        found = [place / _name(version)] if version else sorted(place.glob(_name("*")))
        if found and found[0].exists():
            return found[0]
    return None


def build(quiet: bool = False) -> Path:
    """Compile the extension; returns its path. Raises Unavailable naming what is missing."""
    version = runtime_version()
    if version is None:
        raise Unavailable(f"gRPC's C++ development files are not installed (pkg-config grpc++ fails): {INSTALL}")
    if not shutil.which("g++"):
        raise Unavailable(f"no C++ compiler (g++): {INSTALL}")
    flags = (_pkg_config("--cflags", "--libs") or "").split()
    errors = []
    for place in _places():
        try:
            place.mkdir(parents=True, exist_ok=True)
            out = place / _name(version)
            tmp = out.with_suffix(f".{os.getpid()}.tmp")
            p = subprocess.run(["g++", "-O2", "-std=c++17", "-shared", "-fPIC",
                                str(SOURCE), "-o", str(tmp), *flags], capture_output=True, text=True)
        except OSError as exc:
            errors.append(f"{place}: {exc}")
            continue
        if p.returncode:
            raise Unavailable(f"building {SOURCE.name} failed: {p.stderr.strip().splitlines()[-1:]}")
        tmp.replace(out)
        for old in place.glob("libcbgrpc-*.so"):
            if old != out:
                old.unlink(missing_ok=True)
        if not quiet:
            print(f"grpc-cpp: built {out} against gRPC {version}")
        return out
    raise Unavailable(f"cannot write the grpc-cpp extension anywhere: {'; '.join(errors)}")


@cache
def load() -> ctypes.CDLL:
    """The loaded extension, or Unavailable with the reason and the fix."""
    lib = find()
    if lib is None:
        if runtime_version() is None:
            raise Unavailable(f"the grpc-cpp transport needs gRPC's C++ library, not installed here: {INSTALL}")
        raise Unavailable("the grpc-cpp extension is not built: run bash launchers/setup.sh "
                          "(or python -m commbench.transports._grpc_cpp)")
    try:
        return ctypes.CDLL(str(lib))
    except OSError as exc:
        raise Unavailable(f"the grpc-cpp extension {lib.name} does not load ({exc}): {INSTALL}") from None
