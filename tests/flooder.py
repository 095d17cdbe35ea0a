"""A connection flood for the fault tests: keeps N connections open to the given loopback ports,
re-opening at once whatever the other end closes (or refuses, before anything listens), and never
sends a byte. On SIGTERM it prints how many connections it opened and exits.

    python tests/flooder.py N PORT [PORT ...]
"""

from __future__ import annotations

import errno
import selectors
import signal
import socket
import sys
import time


def main() -> None:
    n, ports = int(sys.argv[1]), [int(p) for p in sys.argv[2:]]
    sel = selectors.DefaultSelector()
    opened, accepted, going = 0, 0, [True]
    signal.signal(signal.SIGTERM, lambda *_: going.__setitem__(0, False))
    live: set[socket.socket] = set()
    while going[0]:
        while len(live) < n:
            s = socket.socket()
            s.setblocking(False)
            err = s.connect_ex(("127.0.0.1", ports[opened % len(ports)]))
            opened += 1
            if err not in (0, errno.EINPROGRESS):
                s.close()
                break  # nothing listens there yet: the next round tries again
            live.add(s)
            sel.register(s, selectors.EVENT_READ)
        events = sel.select(0.01)
        if not events and len(live) < n:
            time.sleep(0.002)
        for key, _ in events:
            s = key.fileobj
            try:
                data = s.recv(4096)
            except OSError:
                data = b""
            if data:
                accepted += 1  # greeted (a challenge): it holds a slot until evicted
                continue
            sel.unregister(s)
            live.discard(s)
            s.close()
    print(opened, accepted, flush=True)


if __name__ == "__main__":
    main()
