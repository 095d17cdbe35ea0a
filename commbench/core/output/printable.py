"""Text from files and peers made safe for a terminal: control characters (C0 but tab and newline,
DEL, C1) and the marks that reorder bidirectional text are shown as escapes (``\\x1b``, ``\\u202e``),
so that nothing a results file, a tool's output or a peer's host name holds can move the cursor,
clear the screen, retitle the window or make a line read otherwise than it is.

Every command's standard output passes through ``PrintableStream`` (cli.py) and every message through
``say``; the HTML report escapes its own way (html.escape), the Markdown report with ``markdown_cell``.
"""

from __future__ import annotations

from typing import Any, TextIO

_CONTROLS = [*range(0x00, 0x09), *range(0x0B, 0x20), 0x7F, *range(0x80, 0xA0)]
_BIDI = [0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
_TABLE = {**{c: f"\\x{c:02x}" for c in _CONTROLS}, **{c: f"\\u{c:04x}" for c in _BIDI}}


def printable(text: str) -> str:
    """``text`` with every control character and bidirectional mark but tab and newline escaped."""
    return text.translate(_TABLE)


class PrintableStream:
    """A text stream that writes ``printable`` text to the stream it wraps (the rest is the wrapped one's)."""

    def __init__(self, inner: TextIO) -> None:
        self._inner = inner

    def write(self, text: str) -> int:
        self._inner.write(printable(text))
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def markdown_cell(text: str) -> str:
    """``text`` as one Markdown table cell that renders as the text itself: printable, on one line, its
    HTML and the table's pipes escaped (GitHub renders raw HTML in a cell, and a pipe ends it)."""
    import html

    return html.escape(printable(" ".join(str(text).splitlines()))).replace("|", "\\|")
