"""Explicit framing for control messages: a fixed header, a small JSON part, an opaque blob.

Nothing received is ever unpickled or evaluated: the JSON part is parsed with ``json.loads``
and must be an object; sizes are bounded before anything is allocated.
"""

from __future__ import annotations

import json
import socket
import struct
import time

MAGIC = b"CBv1"
HEADER = struct.Struct("<4sBII")  # magic, kind, json length, blob length
MAX_JSON = 1 << 20
MAX_BLOB = 1 << 28


class FrameError(Exception):
    """The bytes on the wire are not a commbench frame (garbage, wrong version, too large)."""


def encode(kind: int, obj: dict, blob: bytes = b"") -> bytes:
    body = json.dumps(obj, separators=(",", ":")).encode()
    return HEADER.pack(MAGIC, kind, len(body), len(blob)) + body + blob


def recv_exact(sock: socket.socket, n: int, deadline: float | None = None) -> bytes:
    """n bytes; with ``deadline`` (time.monotonic()), all of them by then (a peer that trickles bytes
    cannot hold the connection open past it), else socket.timeout."""
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("timed out")
            sock.settimeout(left)
        k = sock.recv_into(view[got:])
        if k == 0:
            raise ConnectionError("connection closed")
        got += k
    return bytes(buf)


def decode_header(raw: bytes, max_json: int = MAX_JSON, max_blob: int = MAX_BLOB) -> tuple[int, int, int]:
    magic, kind, jlen, blen = HEADER.unpack(raw)
    if magic != MAGIC:
        raise FrameError(f"bad magic {magic!r}")
    if jlen > max_json or blen > max_blob:
        raise FrameError(f"frame too large ({jlen} + {blen} bytes)")
    return kind, jlen, blen


def read_frame(sock: socket.socket, max_json: int = MAX_JSON, max_blob: int = MAX_BLOB,
               deadline: float | None = None) -> tuple[int, dict, bytes]:
    """One frame; its sizes are checked against the limits before anything is allocated."""
    kind, jlen, blen = decode_header(recv_exact(sock, HEADER.size, deadline), max_json, max_blob)
    try:
        obj = json.loads(recv_exact(sock, jlen, deadline)) if jlen else {}
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise FrameError(f"bad JSON in frame: {exc}") from None
    if not isinstance(obj, dict):
        raise FrameError("frame JSON is not an object")
    blob = recv_exact(sock, blen, deadline) if blen else b""
    return kind, obj, blob


def send_frame(sock: socket.socket, kind: int, obj: dict, blob: bytes = b"") -> None:
    sock.sendall(encode(kind, obj, blob))
