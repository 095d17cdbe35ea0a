"""Explicit framing for control messages: a fixed header, a small JSON part, an opaque blob.

Nothing received is ever unpickled or evaluated: the JSON part is parsed with ``json.loads``
and must be an object; sizes are bounded before anything is allocated.

After the handshake (core/run/auth.py) a connection's frames are sealed: each carries a ``TAG``-byte
HMAC-SHA256 under the session key both sides derived from the token and the handshake's two nonces,
over the direction, the frame's number on the connection and the frame itself. A frame injected,
altered, replayed, dropped or reordered on the way (a relay, a spoofed address) fails its check, and
the connection ends naming it (``Tampered``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import socket
import struct
import time

MAGIC = b"CBv1"
HEADER = struct.Struct("<4sBII")  # magic, kind, json length, blob length
MAX_JSON = 1 << 20
MAX_BLOB = 1 << 28


TAG = 16  # bytes of a sealed frame's MAC (128 bits of HMAC-SHA256)
_NUMBER = struct.Struct("<Q")


class FrameError(Exception):
    """The bytes on the wire are not a commbench frame (garbage, wrong version, too large)."""


class Tampered(FrameError):
    """A sealed frame whose MAC does not check: not sent by the peer that proved itself, or changed since."""


class Seal:
    """One connection's session key after the handshake, and the number of frames each way so far.
    ``dialer``: this side opened the connection (the two directions are MACed apart, so a frame cannot
    be reflected back to its sender)."""

    __slots__ = ("_key", "_out", "_in", "_sent", "_read")

    def __init__(self, key: bytes, dialer: bool) -> None:
        self._key = key
        self._out, self._in = (b"d", b"l") if dialer else (b"l", b"d")
        self._sent = self._read = 0

    def _mac(self, side: bytes, number: int, parts: tuple) -> bytes:
        h = hmac.new(self._key, side + _NUMBER.pack(number), hashlib.sha256)
        for part in parts:
            h.update(part)
        return h.digest()[:TAG]

    def tag(self, *parts: bytes) -> bytes:
        """The MAC of the next frame sent, made of ``parts`` (header, JSON, blob)."""
        self._sent += 1
        return self._mac(self._out, self._sent - 1, parts)

    def check(self, tag: bytes, *parts: bytes) -> None:
        """Raise Tampered unless ``tag`` is the MAC of the next frame expected, made of ``parts``."""
        if not hmac.compare_digest(tag, self._mac(self._in, self._read, parts)):
            raise Tampered(f"frame {self._read} on this connection failed its integrity check: it was not sent "
                           "by the peer that proved itself, or was changed on the way (a relay or a spoofed "
                           "address)")
        self._read += 1


def encode(kind: int, obj: dict, blob: bytes = b"", seal: Seal | None = None) -> bytes:
    body = json.dumps(obj, separators=(",", ":")).encode()
    head = HEADER.pack(MAGIC, kind, len(body), len(blob))
    return head + body + blob + (seal.tag(head, body, blob) if seal else b"")


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


def _parsed(body: bytes) -> dict:
    try:
        obj = json.loads(body) if body else {}
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise FrameError(f"bad JSON in frame: {exc}") from None
    if not isinstance(obj, dict):
        raise FrameError("frame JSON is not an object")
    return obj


def read_frame(sock: socket.socket, max_json: int = MAX_JSON, max_blob: int = MAX_BLOB,
               deadline: float | None = None, seal: Seal | None = None) -> tuple[int, dict, bytes]:
    """One frame; its sizes are checked against the limits before anything is allocated, and with
    ``seal`` its MAC before its JSON is parsed."""
    head = recv_exact(sock, HEADER.size, deadline)
    kind, jlen, blen = decode_header(head, max_json, max_blob)
    body = recv_exact(sock, jlen, deadline) if jlen else b""
    blob = recv_exact(sock, blen, deadline) if blen else b""
    if seal is not None:
        seal.check(recv_exact(sock, TAG, deadline), head, body, blob)
    return kind, _parsed(body), blob


def take_frame(buf: bytearray, seal: Seal | None = None) -> tuple[int, dict, bytes] | None:
    """The first whole frame in ``buf`` (bytes read so far from a non-blocking socket), removed from it;
    None while it is incomplete. Raises FrameError (Tampered) as read_frame does."""
    if len(buf) < HEADER.size:
        return None
    head = bytes(buf[:HEADER.size])
    kind, jlen, blen = decode_header(head)
    end = HEADER.size + jlen + blen
    if len(buf) < end + (TAG if seal else 0):
        return None
    body, blob = bytes(buf[HEADER.size:HEADER.size + jlen]), bytes(buf[HEADER.size + jlen:end])
    if seal is not None:
        seal.check(bytes(buf[end:end + TAG]), head, body, blob)
        end += TAG
    del buf[:end]
    return kind, _parsed(body), blob


def send_frame(sock: socket.socket, kind: int, obj: dict, blob: bytes = b"", seal: Seal | None = None) -> None:
    sock.sendall(encode(kind, obj, blob, seal))
