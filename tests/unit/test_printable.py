"""Nothing from a file or a peer reaches the terminal or a report raw: control characters and the marks
that reorder bidirectional text are escaped on every command's standard output, in every message, and
in the Markdown report's cells (core/output/printable.py)."""

from __future__ import annotations

import contextlib
import io
import json
import unicodedata
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from commbench import cli
from commbench.core.errors import say
from commbench.core.output.printable import markdown_cell, printable

FIX = Path(__file__).parent.parent / "fixtures"
EVIL = "\x1b]0;pwned\x07\x1b[2J\x1b[1;1H\x9b31m\u202eevil\x00\r"


def raw(text: str) -> list[str]:
    """The characters a terminal would act on (control characters but tab and newline, bidi marks)."""
    return [c for c in text if (unicodedata.category(c) == "Cc" and c not in "\t\n")
            or unicodedata.bidirectional(c) in ("LRE", "RLE", "LRO", "RLO", "PDF", "LRI", "RLI", "FSI", "PDI")
            or c in "\u200e\u200f\u061c"]


@given(st.text())
def test_printable_leaves_nothing_a_terminal_acts_on(text):
    out = printable(text)
    assert raw(out) == []
    assert printable(out) == out  # escaping twice changes nothing more
    if not raw(text):
        assert out == text  # plain text stays as it is


def test_show_prints_a_poisoned_results_file_as_plain_text(tmp_path):
    lines = (FIX / "latency_tcp.jsonl").read_text().splitlines()
    meta = json.loads(lines[0])
    meta.update(hosts=[f"node{EVIL}", "vm"], command=["commbench", EVIL], platform=EVIL)
    meta["options"]["transport"] = "tcp"
    poisoned = tmp_path / f"run{EVIL[:6].replace('/', '')}.jsonl"
    poisoned.write_text("\n".join([json.dumps(meta), *lines[1:]]) + "\n")
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["show", str(poisoned)])
    assert code == 0, err.getvalue()
    assert "node\\x1b]0;pwned\\x07" in out.getvalue() and raw(out.getvalue()) == []
    assert raw(err.getvalue()) == []


def test_messages_escape_what_they_quote():
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        say(f"rank 1 on host {EVIL} left the run")
    assert raw(err.getvalue()) == [] and err.getvalue().count("\n") == 1


def test_a_markdown_cell_renders_as_its_text():
    assert markdown_cell("<img src=x onerror=alert(1)>|a\nb") == "&lt;img src=x onerror=alert(1)&gt;\\|a b"
    assert raw(markdown_cell(EVIL)) == []


def test_import_prints_a_poisoned_tool_output_as_plain_text(tmp_path):
    text = (FIX / "import" / "ib_send_lat.txt").read_text()
    assert "Device         : rxe0" in text
    poisoned = tmp_path / "ib_send_lat.txt"
    poisoned.write_text(text.replace("Device         : rxe0", f"Device         : rxe0{EVIL.replace(chr(0), '')}", 1))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.chdir(tmp_path), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["import", str(poisoned)])
    assert code in (0, 2), err.getvalue()
    assert raw(out.getvalue()) == [] and raw(err.getvalue()) == []
    assert "\\x1b" in out.getvalue() + err.getvalue()  # the poisoned name was shown, escaped

