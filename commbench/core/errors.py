"""The ways a run ends badly, each with its exit status, and how a rank says so (``say``)."""

import contextlib
import os
import sys


class CommbenchError(Exception):
    """Base class; ``exit_code`` is what the process exits with."""

    exit_code = 1


class UsageError(CommbenchError):
    """Bad input from the user: a flag, size, transport or missing device. Exit status 2."""

    exit_code = 2


class Unavailable(UsageError):
    """A transport that cannot run here: a module, device or interface is missing. The CLI adds the
    transports that can. Exit status 2."""


class ResultsError(CommbenchError):
    """The results file cannot be written (a full disk, a read-only directory): the user's to fix
    before running again, as bad input is. Exit status 2."""

    exit_code = 2


class PeerError(CommbenchError):
    """A peer died, hung, or broke the protocol. Exit status 1."""


class PeerTimeout(PeerError):
    """No answer from a peer within the timeout (it may still be alive and busy)."""


class RunAborted(CommbenchError):
    """Another rank aborted the run and already reported why; exit quietly with its code."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


MAX_SAID = 1000  # characters of one message: a 5,000-character file name given back whole helps nobody


def shorten(message: str) -> str:
    """One line of at most MAX_SAID characters, control characters escaped (a name from a file or a peer
    may hold any): the middle of a longer one is cut (a name given back)."""
    from commbench.core.output.printable import printable

    message = printable(" ".join(message.splitlines()))
    if len(message) <= MAX_SAID:
        return message
    keep = MAX_SAID // 2 - 10
    return f"{message[:keep]} [... {len(message) - 2 * keep} characters ...] {message[-keep:]}"


# while fd 2 is caught (core/imports.py: TensorFlow's start-up notices), the real stderr: a watchdog that
# ends the process in the meantime still says why
said_to: int | None = None


def say(message: str) -> None:
    """``commbench: message`` on stderr in one write, so that lines of ranks sharing a terminal or a pipe
    never run into each other (print writes the text and its newline apart)."""
    line = f"commbench: {shorten(message)}\n"
    with contextlib.suppress(OSError, ValueError):  # stderr closed: nowhere to say it
        if said_to is not None:
            os.write(said_to, line.encode(errors="replace"))
            return
        sys.stderr.write(line)
        sys.stderr.flush()
