"""Results files: a metadata row, then one row per measured point, each flushed as it is measured.

- ``.jsonl``: one JSON object per line; ``{"type": "meta", ...}`` starts each run (runs append).
- ``.csv``: a ``# commbench-meta {...}`` comment line, the header (the run's declared keys), then
  rows (an existing file is replaced).

Load into pandas: ``pd.read_json(path, lines=True).query("type == 'row'")`` or
``pd.read_csv(path, comment="#")``.
"""

from __future__ import annotations

import contextlib
import csv
import datetime as dt
import io
import json
import math
import os
import platform
import stat
import sys
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from importlib import metadata as importlib_metadata
from pathlib import Path

from commbench import __version__
from commbench.core.errors import ResultsError, UsageError
from commbench.core.output.paths import check_writable, kind_of, open_rows

META_PREFIX = "# commbench-meta "
FORMATS = (".jsonl", ".csv")


def check_output_path(path: str) -> Path:
    """Fail early (exit 2) on an output file that cannot be written, before any rank starts."""
    if Path(path).suffix not in FORMATS:
        raise UsageError(f"output file {path!r} must end in .jsonl or .csv")
    return check_writable(path, "output file", "choose another --output path (a file ending in .jsonl or .csv)")


def versions(*packages: str) -> dict[str, str]:
    out = {"commbench": __version__, "python": platform.python_version()}
    for name in packages:
        with contextlib.suppress(importlib_metadata.PackageNotFoundError):
            out[name] = importlib_metadata.version(name)
    return out


def program_name() -> str:
    """'commbench', also for ranks the local launcher started as `python -m commbench`."""
    name = Path(sys.argv[0]).name
    return "commbench" if name == "__main__.py" else name


def run_metadata(bench: str, options: dict, hosts: Sequence[str], packages: Sequence[str],
                 wireup: dict | None = None) -> dict:
    """``wireup``: how the ranks met (via pmix, mpi or store; its seconds; rank 0's store requests)."""
    return {
        "type": "meta",
        "bench": bench,
        "run_id": uuid.uuid4().hex[:12],
        "start": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": [program_name(), *sys.argv[1:]],
        "hosts": list(hosts),
        "platform": platform.platform(),
        "load": [round(x, 2) for x in os.getloadavg()],  # rank 0's host at the start: 1, 5, 15 min averages
        "cpus": os.cpu_count(),
        "versions": versions(*packages),
        "options": options,
        **({"wireup": wireup} if wireup else {}),
    }


class ResultsWriter:
    """Appends rows as they are measured; a killed run keeps every completed row.

    ``columns`` is the run's declared schema: every key a row may hold, known before the first row,
    so a CSV's header is written once with the metadata and never rewritten (lists and dicts as JSON
    text). A row with an undeclared key is a bug (ValueError), in either format. Every line goes to the
    file in whole (one write per line, flushed); a write that fails (a full disk) is cut back to the
    last whole line and ends the run with ResultsError naming the file.
    """

    def __init__(self, path: str | os.PathLike, meta: dict, columns: Sequence[str]) -> None:
        self.path = Path(path)
        self.csv = self.path.suffix == ".csv"
        self.columns = list(dict.fromkeys(columns))
        self.known = set(self.columns)
        self.written = 0
        self.fd = open_rows(self.path, append=not self.csv)
        if self.csv:
            self._append((META_PREFIX + json.dumps(meta) + "\n").encode() + self._csv_lines([], True))
        else:
            self._append((json.dumps(meta) + "\n").encode())

    def _append(self, data: bytes) -> None:
        start = os.lseek(self.fd, 0, os.SEEK_END)
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self.fd, view):]
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.ftruncate(self.fd, start)  # no torn line
            raise ResultsError(f"cannot write results to {self.path}: {exc.strerror}; the "
                               f"{self.written} rows measured before are kept") from None

    def _csv_lines(self, rows: Sequence[dict], header: bool) -> bytes:
        out = io.StringIO(newline="")
        writer = csv.DictWriter(out, fieldnames=self.columns)
        if header:
            writer.writeheader()
        writer.writerows(rows)
        return out.getvalue().encode()

    def row(self, row: dict) -> None:
        if "type" in row:
            raise ValueError("'type' marks JSONL records; name the column something else")
        undeclared = [k for k in row if k not in self.known]
        if undeclared:
            raise ValueError(f"row keys {undeclared} are not in the run's declared schema (declare them where the "
                             "row is made: a benchmark's columns or keys)")
        if self.csv:
            self._append(self._csv_lines([{k: _csv_value(v) for k, v in row.items()}], False))
        else:
            self._append((json.dumps({"type": "row", **row}) + "\n").encode())
        self.written += 1

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _csv_value(v: object) -> object:
    if isinstance(v, float):
        return repr(v)
    return json.dumps(v) if isinstance(v, (list, dict)) else v


@dataclass
class Run:
    """One run read back from a results file."""

    meta: dict
    rows: list[dict] = field(default_factory=list)


def results_files(paths: Sequence[str]) -> list[str]:
    """The results files these arguments name: a file as given, a directory (a folder `compare` wrote)
    as the .jsonl and .csv files in it, in name order; a directory without any is one UsageError."""
    out: list[str] = []
    for path in paths:
        p = Path(path)
        try:
            is_dir = p.is_dir()
        except OSError:  # a name too long to look up: reading it says so, in one line
            is_dir = False
        if not is_dir:
            out.append(path)
            continue
        found = sorted(str(f) for f in p.iterdir() if f.suffix in FORMATS and f.is_file())
        if not found:
            raise UsageError(f"{path} is a directory with no results files (.jsonl or .csv) in it")
        out += found
    return out


MAX_READ = 1 << 30  # bytes: a text file given to a command, at most


def read_text_file(path: str | os.PathLike, what: str) -> str:
    """A user-given text file's contents; anything else (missing, a FIFO or directory, binary, huge)
    is one UsageError naming the file. Never blocks on a FIFO: it is refused before it is opened."""
    p = Path(path)
    try:
        st = p.stat()
    except OSError as exc:
        raise UsageError(f"cannot read {what} {str(p)!r}: {exc.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(f"{str(p)!r} is {kind_of(st.st_mode)}: give a {what} (a regular file)")
    if st.st_size > MAX_READ:
        raise UsageError(f"{str(p)!r} is {st.st_size} bytes, more than a {what} can be; is it the right file?")
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read {what} {str(p)!r}: {exc.strerror}") from None
    try:
        if b"\0" in data:
            raise UnicodeError
        return data.decode("utf-8")
    except UnicodeError:
        raise UsageError(f"{str(p)!r} is not text (binary data): give a {what}") from None


def csv_rows(lines: Iterable[str], where: str) -> Iterator[tuple[int, list[str]]]:
    """A user's CSV lines as (line number, cells); a line csv cannot take (a field past its limit, a
    NUL, a quote left open) is one UsageError naming ``where`` and the line."""
    reader = csv.reader(lines)
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise UsageError(f"{where} line {reader.line_num}: not a CSV line ({exc}); was the file edited?") from None
        yield reader.line_num, row


def read_runs(path: str | os.PathLike, need_rows: bool = False) -> list[Run]:
    """Parse a results file; a line that does not parse is named with file and line (exit 2), and so
    is a file without rows where the caller needs some (``need_rows``: the commands that show them)."""
    p = Path(path)
    text = read_text_file(p, "results file (.jsonl or .csv)")
    runs = list(_read_csv(p, text) if p.suffix == ".csv" else _read_jsonl(p, text))
    if not runs:
        raise UsageError(f"{p}: no commbench results in this file (no metadata row)")
    for run in runs:
        if not isinstance(run.meta.get("bench"), str) or not isinstance(run.meta.get("options"), dict):
            raise UsageError(f"{p}: a metadata row without the benchmark and its options: not written by commbench")
        for key, kind in META_SHAPES.items():
            v = run.meta.get(key)
            if v is not None and not _shaped(v, kind):
                raise UsageError(f"{p}: the metadata's {key} is {str(v)[:40]!r}, not {kind[1]}; was the file edited?")
    if need_rows and not any(run.rows for run in runs):
        raise UsageError(f"{p}: no result rows in this file (only metadata: the run ended before its first point)")
    return runs


META_SHAPES = {"hosts": (list, "a list of host names"), "endpoints": (list, "a list of endpoint names"),
               "command": (list, "a command line (a list of words)"),
               "versions": (dict, "a table of versions"), "metric": (dict, "a metric (key, better)"),
               "imported": (dict, "an import's description")}


def _shaped(v: object, kind: tuple) -> bool:
    if not isinstance(v, kind[0]):
        return False
    if kind[0] is list:
        return all(isinstance(x, str) for x in v)
    return all(isinstance(k, str) for k in v)


def _finite(p: Path, lineno: int, row: dict) -> dict:
    """A row as read; NaN or infinity in it means the file was edited or damaged."""
    for k, v in row.items():
        if isinstance(v, float) and not math.isfinite(v):
            raise UsageError(f"{p}:{lineno}: {k} is {v}: commbench never writes that; was the file edited?")
    return row


MAX_NESTING = 64  # a commbench row nests 3 deep; a line nested past this is refused before it is parsed


def shallow_json(text: str, limit: int = MAX_NESTING) -> object:
    """json.loads for text from a user's file, refusing (RecursionError) nesting past ``limit`` before
    parsing: the parser's own limit is the interpreter's recursion limit, and unwinding from it
    prints 'Exception ignored' lines to stderr."""
    if text.count("[") + text.count("{") > limit:
        depth = 0
        in_string = escaped = False
        for ch in text:
            if in_string:
                if escaped:
                    escaped = False
                elif ch == "\\":
                    escaped = True
                elif ch == '"':
                    in_string = False
            elif ch == '"':
                in_string = True
            elif ch in "[{":
                depth += 1
                if depth > limit:
                    raise RecursionError(f"nested more than {limit} deep")
            elif ch in "]}":
                depth -= 1
    return json.loads(text)


def _read_jsonl(p: Path, text: str) -> Iterator[Run]:
    run = None
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = shallow_json(line)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{p}:{lineno}: not a JSON row ({exc.msg}); was the file cut short or edited?") from None
        except RecursionError:
            raise UsageError(f"{p}:{lineno}: JSON nested too deeply to be a commbench row") from None
        row: dict = obj if isinstance(obj, dict) else {}
        kind = row.get("type")
        if kind == "meta":
            if run:
                yield run
            run = Run(row)
        elif kind == "row" and run is not None:
            row.pop("type")
            run.rows.append(_finite(p, lineno, row))
        else:
            raise UsageError(f"{p}:{lineno}: not a commbench row (expected a metadata row first)")
    if run:
        yield run


def _read_csv(p: Path, text: str) -> Iterator[Run]:
    lines = text.splitlines()
    if not lines or not lines[0].startswith(META_PREFIX):
        raise UsageError(f"{p}:1: not a commbench CSV (the first line should start with {META_PREFIX.strip()!r})")
    try:
        meta = shallow_json(lines[0][len(META_PREFIX):])
    except json.JSONDecodeError as exc:
        raise UsageError(f"{p}:1: bad metadata line ({exc.msg})") from None
    except RecursionError:
        raise UsageError(f"{p}:1: bad metadata line (JSON nested too deeply)") from None
    if not isinstance(meta, dict):
        raise UsageError(f"{p}:1: bad metadata line (not a JSON object)")
    run = Run(meta)
    # a cell copying a text field of the metadata (run_id, bench) stays text: a hex run_id such as
    # 123e4567 or 905112 would otherwise read as a number (inf, an int)
    text_of_meta = {k: v for k, v in meta.items() if isinstance(v, str)}
    rows = csv_rows(lines[1:], str(p))
    header = next(rows, (0, []))[1]
    for lineno, cells in rows:
        if not cells:  # a blank line
            continue
        if len(cells) != len(header):
            raise UsageError(f"{p}:{lineno + 1}: wrong number of fields")
        run.rows.append(_finite(p, lineno + 1, {k: v if text_of_meta.get(k) == v else _parse_scalar(v)
                                                for k, v in zip(header, cells, strict=True)}))
    yield run


def _parse_scalar(v: str) -> object:
    if v == "":
        return None  # CSV's empty cell: a value the row did not have (e.g. p99 below 100 samples)
    for kind in (int, float):
        try:
            return kind(v)
        except ValueError:
            pass
    return v
