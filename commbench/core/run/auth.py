"""Mutual proof of the run token, the token never on the wire (challenge-response).

A listener (core/run/gate.py) greets every connection with a CHALLENGE holding a fresh nonce; the
dialer answers with its HELLO, its own nonce and ``proof`` = HMAC-SHA256(token, "client" | both
nonces | the hello's fields); the listener checks it and answers PROVEN with HMAC(token, "server" |
both nonces). So each side knows the other holds the token, a recorded hello is useless against
another challenge (replay), and a program squatting on a port learns nothing it can use: it cannot
answer PROVEN, and the dialer stops there, naming it.

Both sides then hold a session key, HMAC(token, "session" | both nonces), that no one else can make,
and every frame after PROVEN is sealed with it (core/run/framing.py's ``Seal``): a relay that forwarded
the handshake can pass frames on but neither inject nor change one.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import socket

from commbench.core.run.framing import FrameError, Seal, read_frame, send_frame

CHALLENGE, PROVEN = 20, 21  # frame kinds, apart from the rendezvous's (1-11) and gate.py's HELLO and BUSY
NONCE_HEX = 32
HELLO_MAX_JSON = 4096


class Impostor(Exception):
    """The listener could not prove it knows the run token."""


class Busy(Exception):
    """The listener is full of connections that have not proven themselves (a flood): try again."""


def nonce() -> str:
    return secrets.token_hex(NONCE_HEX // 2)


def _canonical(hello: dict) -> str:
    return json.dumps({k: v for k, v in hello.items() if k not in ("nonce", "proof")}, sort_keys=True,
                      separators=(",", ":"))


def proof(token: str, role: str, challenge: str, answer: str, hello: dict | None = None) -> str:
    """HMAC(token, role | challenge nonce | answer nonce | the hello's fields), hex."""
    text = "|".join((role, challenge, answer, _canonical(hello) if hello is not None else ""))
    return hmac.new(token.encode(), text.encode(), hashlib.sha256).hexdigest()


def derived(token: str, purpose: str) -> str:
    """A name made from the token for one purpose (e.g. gRPC's service path): tells nothing of it."""
    return hmac.new(token.encode(), purpose.encode(), hashlib.sha256).hexdigest()[:32]


def hello_proven(token: str, challenge: str, hello: dict) -> bool:
    """The listener's check of a dialer's hello against the challenge it sent."""
    answer, got = hello.get("nonce"), hello.get("proof")
    if not isinstance(answer, str) or len(answer) != NONCE_HEX or not isinstance(got, str):
        return False
    return hmac.compare_digest(got, proof(token, "client", challenge, answer, hello))


def server_proof(token: str, challenge: str, hello: dict) -> dict:
    """The listener's PROVEN frame body for a hello it accepted."""
    return {"proof": proof(token, "server", challenge, str(hello.get("nonce")))}


def seal(token: str, challenge: str, answer: str, dialer: bool) -> Seal:
    """The connection's seal after a handshake of these two nonces (each side makes its own)."""
    key = hmac.new(token.encode(), f"session|{challenge}|{answer}".encode(), hashlib.sha256).digest()
    return Seal(key, dialer)


def authenticate(sock: socket.socket, token: str, hello: dict, deadline: float) -> Seal:
    """The dialer's side: read the listener's challenge, send the hello with its proof, and check the
    listener's own proof; the seal for every frame after. Raises Busy (try again), Impostor (not this
    run's listener), FrameError or OSError (not a commbench listener, or gone)."""
    kind, obj, _ = read_frame(sock, HELLO_MAX_JSON, 0, deadline)
    if obj.get("kind") == "busy":
        raise Busy()
    challenge = obj.get("nonce")
    if kind != CHALLENGE or not isinstance(challenge, str) or len(challenge) != NONCE_HEX:
        raise FrameError("the listener sent no challenge: not a commbench listener of this version")
    mine = nonce()
    body = {**hello, "nonce": mine}
    body["proof"] = proof(token, "client", challenge, mine, body)
    send_frame(sock, 1, body)
    kind, obj, _ = read_frame(sock, HELLO_MAX_JSON, 0, deadline)
    if obj.get("kind") == "busy":  # evicted by a flood before the listener read the hello
        raise Busy()
    if kind != PROVEN or not isinstance(obj.get("proof"), str) or \
            not hmac.compare_digest(obj["proof"], proof(token, "server", challenge, mine)):
        raise Impostor("it did not prove it knows the run token")
    return seal(token, challenge, mine, dialer=True)
