"""Explicit framing for control messages: a fixed header, a small JSON part, an opaque blob.

Nothing received is ever unpickled or evaluated: the JSON part is parsed with ``json.loads``
and must be an object; sizes are bounded before anything is allocated.
"""

from __future__ import annotations

import json
import socket
import struct

MAGIC = b"CBv1"
HEADER = struct.Struct("<4sBII")  # magic, kind, json length, blob length
MAX_JSON = 1 << 20
MAX_BLOB = 1 << 28


class FrameError(Exception):
    """The bytes on the wire are not a commbench frame (garbage, wrong version, too large)."""


def encode(kind: int, obj: dict, blob: bytes = b"") -> bytes:
    body = json.dumps(obj, separators=(",", ":")).encode()
    return HEADER.pack(MAGIC, kind, len(body), len(blob)) + body + blob


def recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:])
        if k == 0:
            raise ConnectionError("connection closed")
        got += k
    return bytes(buf)


def decode_header(raw: bytes) -> tuple[int, int, int]:
    magic, kind, jlen, blen = HEADER.unpack(raw)
    if magic != MAGIC:
        raise FrameError(f"bad magic {magic!r}")
    if jlen > MAX_JSON or blen > MAX_BLOB:
        raise FrameError(f"frame too large ({jlen} + {blen} bytes)")
    return kind, jlen, blen


def read_frame(sock: socket.socket) -> tuple[int, dict, bytes]:
    kind, jlen, blen = decode_header(recv_exact(sock, HEADER.size))
    try:
        obj = json.loads(recv_exact(sock, jlen)) if jlen else {}
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise FrameError(f"bad JSON in frame: {exc}") from None
    if not isinstance(obj, dict):
        raise FrameError("frame JSON is not an object")
    blob = recv_exact(sock, blen) if blen else b""
    return kind, obj, blob


def send_frame(sock: socket.socket, kind: int, obj: dict, blob: bytes = b"") -> None:
    sock.sendall(encode(kind, obj, blob))
