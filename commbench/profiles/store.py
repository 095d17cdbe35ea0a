"""Profiles on disk: ``payloads/<name>.csv`` with a commented header, then one row per variable in
creation order, trainable (1: its gradient is what payloads send) or not (0: batch-norm statistics,
which TensorFlow's PS training moves too). Profiles without the trainable column list trainable
variables only.

    # model: resnet50
    # framework: tensorflow 2.21.0, keras 3.15.1
    # parameters: 25583592
    # source: keras.applications.ResNet50(weights=None)
    name,shape,dtype,bytes,trainable
    conv1_conv/kernel,7x7x3x64,float32,37632,1

Reading needs no TensorFlow. A malformed file is named with its line number.
"""

from __future__ import annotations

import csv
import io
import os
from dataclasses import dataclass
from math import prod
from pathlib import Path

from commbench.core.errors import UsageError
from commbench.core.measure.payload import category_of
from commbench.core.output.paths import write_whole
from commbench.core.output.results import csv_rows, read_text_file

ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int32": 4, "int64": 8, "int8": 1, "uint8": 1}
COLUMNS = ["name", "shape", "dtype", "bytes"]
COLUMNS_ALL = [*COLUMNS, "trainable"]  # every variable, in creation order; older profiles: trainable only


@dataclass(frozen=True)
class Tensor:
    name: str
    shape: tuple[int, ...]
    dtype: str
    nbytes: int
    trainable: bool = True


@dataclass(frozen=True)
class Profile:
    """A model's variables: ``tensors`` the trainable ones (a gradient each: what payloads send),
    ``variables`` all of them in creation order (TensorFlow places them in that order), the
    non-trainable ones (batch-norm statistics) included where the profile lists them."""

    name: str
    meta: dict[str, str]
    variables: tuple[Tensor, ...]

    @property
    def tensors(self) -> tuple[Tensor, ...]:
        return tuple(t for t in self.variables if t.trainable)

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in self.tensors)

    @property
    def parameters(self) -> int:
        return sum(prod(t.shape) for t in self.tensors)

    def sizes_by_category(self) -> dict[str, tuple[int, ...]]:
        """Tensor sizes per Small / Medium / Large category: what SCHEME:MODEL payloads draw from."""
        return {c: tuple(t.nbytes for t in self.tensors if category_of(t.nbytes).letter == c) for c in "SML"}

    def histogram(self) -> dict[str, tuple[int, int]]:
        """Small / Medium / Large (TF-gRPC-Bench's categories): (tensor count, bytes)."""
        out = {c: [0, 0] for c in "SML"}
        for t in self.tensors:
            c = category_of(t.nbytes).letter
            out[c][0] += 1
            out[c][1] += t.nbytes
        return {c: (n, b) for c, (n, b) in out.items()}


def search_path() -> list[Path]:
    """Where profiles are looked for: $COMMBENCH_PAYLOADS, then the package's payloads (in a source
    tree ``commbench/payloads`` links to the repository's ``payloads/``; an install copies them)."""
    dirs = [Path(p) for p in os.environ.get("COMMBENCH_PAYLOADS", "").split(os.pathsep) if p]
    return [*dirs, Path(__file__).parent.parent / "payloads"]


def known() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for d in search_path():
        for f in sorted(d.glob("*.csv")) if d.is_dir() else ():
            found.setdefault(f.stem, f)
    return found


def load(name_or_path: str) -> Profile:
    """A profile by name (``resnet50``) or by path to a CSV."""
    p = Path(name_or_path)
    try:
        there = p.suffix == ".csv" and p.exists()
    except OSError as exc:  # a name too long, a component that is a file
        raise UsageError(f"profile {name_or_path!r}: {exc.strerror or exc}; give the path of a CSV file "
                         "(make one with 'commbench payloads profile')") from None
    if not there:
        profiles = known()
        if name_or_path not in profiles:
            raise UsageError(f"unknown model or profile {name_or_path!r}; known: {', '.join(profiles) or 'none'} "
                             "(or give a CSV path; make one with 'commbench payloads profile')")
        p = profiles[name_or_path]
    return parse(p)


def parse(path: Path) -> Profile:
    meta: dict[str, str] = {}
    tensors: list[Tensor] = []
    header_seen = False
    lines = read_text_file(path, "gradient profile (CSV)").splitlines()
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if line.startswith("#"):
            key, sep, value = line[1:].partition(":")
            if sep:
                meta[key.strip()] = value.strip()
            continue
        fields = next(csv_rows([line], f"{path}:{lineno}"))[1]
        if not header_seen:
            if fields not in (COLUMNS, COLUMNS_ALL):
                raise UsageError(f"{path}:{lineno}: expected the header {','.join(COLUMNS_ALL)} (or without "
                                 f"trainable), found {line!r}")
            header_seen, width = True, len(fields)
            continue
        tensors.append(_tensor(path, lineno, fields, width))
    if not any(t.trainable for t in tensors):
        raise UsageError(f"{path}: no trainable tensors in this profile")
    return Profile(meta.get("model", path.stem), meta, tuple(tensors))


def _tensor(path: Path, lineno: int, fields: list[str], width: int = 4) -> Tensor:
    where = f"{path}:{lineno}"
    if len(fields) != width:
        raise UsageError(f"{where}: expected {width} fields ({','.join(COLUMNS_ALL[:width])}), found {len(fields)}")
    name, shape_text, dtype, nbytes_text = fields[:4]
    trainable = fields[4] if width == 5 else "1"
    if trainable not in ("0", "1"):
        raise UsageError(f"{where}: trainable must be 1 or 0, not {trainable!r}")
    try:
        shape = tuple(int(d) for d in shape_text.split("x")) if shape_text else ()
        nbytes = int(nbytes_text)
    except ValueError:
        raise UsageError(f"{where}: shape {shape_text!r} and bytes {nbytes_text!r} must be integers "
                         "(shape as 3x3x64x64)") from None
    if dtype not in ITEMSIZE:
        raise UsageError(f"{where}: unknown dtype {dtype!r}; one of {', '.join(ITEMSIZE)}")
    if any(d < 0 for d in shape) or nbytes != prod(shape) * ITEMSIZE[dtype]:
        raise UsageError(f"{where}: {nbytes} bytes do not match shape {shape_text} of {dtype}")
    return Tensor(name, shape, dtype, nbytes, trainable == "1")


def write(path: Path, profile_meta: dict[str, str], tensors: list[Tensor]) -> None:
    """The profile as a CSV file, written whole (core/output/paths.py)."""
    out = io.StringIO(newline="")
    for k, v in profile_meta.items():
        out.write(f"# {k}: {v}\n")
    w = csv.writer(out)
    w.writerow(COLUMNS_ALL)
    for t in tensors:
        w.writerow([t.name, "x".join(str(d) for d in t.shape), t.dtype, t.nbytes, int(t.trainable)])
    write_whole(str(path), out.getvalue().encode(), "payload profile", "choose another -o")
