"""``commbench hosts up N --rate R | down | status``: N emulated hosts on this machine.

Each host is a network namespace ``cbhI`` with one interface ``cbeI`` (10.77.0.I+1/24), joined to
a bridge ``cbbr0`` in the root namespace (10.77.0.254, where the local launcher's rendezvous
listens; named ``cbroot`` too, so that ``--traffic``'s capture can enter it) by a veth pair whose
root end is ``cbvI``. ``--rate`` shapes every host's link with tc
tbf on both ends (shaping is egress only; netem, hence added delay, is not in this kernel), so a
flow between two hosts runs at the rate. Benchmarks and ``train`` run across them with
``--hosts N`` (rank r in host r mod N). ``up`` replaces whatever ``up`` made before (idempotent)
and removes what it made if a step fails. Needs root.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
from collections.abc import Sequence
from pathlib import Path

from commbench.core.argtypes import integer
from commbench.core.capture import ROOT_NETNS
from commbench.core.errors import UsageError

PREFIX = "cbh"
BRIDGE = "cbbr0"
SUBNET = "10.77.0"
ROOT_ADDR = f"{SUBNET}.254"
STATE = Path(os.environ.get("COMMBENCH_HOSTS_STATE", "/run/commbench-hosts.json"))
MAX_HOSTS = 64
RATE_RE = re.compile(r"^(\d+(?:\.\d+)?)(bit|kbit|mbit|gbit|tbit|bps|kbps|mbps|gbps)$", re.I)
BITS = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12,
        "bps": 8, "kbps": 8e3, "mbps": 8e6, "gbps": 8e9}


def parse_rate(text: str) -> float | None:
    """Bits per second from tc's notation (100mbit, 1gbit, 50mbps); None for 'none' (unshaped)."""
    if text.lower() in ("none", "unshaped", "0"):
        return None
    m = RATE_RE.match(text.strip())
    if not m or float(m.group(1)) <= 0:
        raise UsageError(f"bad --rate {text!r}: use tc's notation, e.g. 100mbit, 1gbit, 500kbit, or none")
    return float(m.group(1)) * BITS[m.group(2).lower()]


def host_name(i: int) -> str:
    return f"{PREFIX}{i}"


def address(i: int) -> str:
    return f"{SUBNET}.{i + 1}"


def _run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    p = subprocess.run(cmd, capture_output=True, text=True)
    if check and p.returncode != 0:
        raise UsageError(f"`{' '.join(cmd)}` failed: {p.stderr.strip() or p.stdout.strip()}")
    return p


def _need_root(what: str) -> None:
    if os.geteuid() != 0:
        raise UsageError(f"commbench hosts {what} needs root (network namespaces and tc): run it with sudo")


def existing() -> list[str]:
    out = _run("ip", "netns", "list", check=False).stdout
    return sorted((line.split()[0] for line in out.splitlines() if re.match(rf"^{PREFIX}\d+\b", line)),
                  key=lambda n: int(n[len(PREFIX):]))


def down() -> list[str]:
    """Remove every emulated host, the bridge and the state file; returns the hosts removed."""
    _need_root("down")
    gone = existing()
    for ns in gone:
        _run("ip", "netns", "del", ns, check=False)  # its veth pair goes with it, once no process is left in it
    for dev in re.findall(r"^\d+: (cbv\d+)@", _run("ip", "-o", "link", check=False).stdout, re.M):
        _run("ip", "link", "del", dev, check=False)  # a pair outliving its namespace's name (a rank still in it)
    _run("ip", "link", "del", BRIDGE, check=False)
    _run("ip", "netns", "del", ROOT_NETNS, check=False)  # only the name: the namespace is this machine's own
    STATE.unlink(missing_ok=True)
    return gone


BURST_S = 0.0005  # s of the rate that tbf lets through at once
MIN_BURST = 4 << 10  # bytes: a few frames (tbf splits larger GSO packets to fit)


def shape(dev: str, bps: float, netns: str | None = None) -> None:
    """tbf at ``bps`` on dev's egress, with a burst of 0.5 ms of the rate. The burst is what an idle
    link lets through at once: a timer tick's worth at HZ 250 (the old rule, 500 KB at 1 Gbit/s) let
    half of a 1 MiB message through unshaped (4.9 ms one way where the wire needs 8.4). With the
    kernel's high-resolution qdisc timers a short burst still holds the rate."""
    burst = max(MIN_BURST, int(bps / 8 * BURST_S))
    pre = ("ip", "netns", "exec", netns) if netns else ()
    _run(*pre, "tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate", f"{int(bps)}bit",
         "burst", str(burst), "latency", "50ms")


def up(n: int, rate: str) -> dict:
    bps = parse_rate(rate)
    if not 1 <= n <= MAX_HOSTS:
        raise UsageError(f"hosts up takes 1 to {MAX_HOSTS} hosts, not {n}")
    _need_root("up")
    down()
    try:
        _run("ip", "link", "add", BRIDGE, "type", "bridge")
        _run("ip", "addr", "add", f"{ROOT_ADDR}/24", "dev", BRIDGE)
        _run("ip", "link", "set", BRIDGE, "up")
        _run("ip", "netns", "attach", ROOT_NETNS, str(os.getpid()))  # where the links meet, for --traffic
        for i in range(n):
            ns, inner, outer = host_name(i), f"cbe{i}", f"cbv{i}"
            _run("ip", "netns", "add", ns)
            _run("ip", "link", "add", outer, "type", "veth", "peer", "name", inner)
            _run("ip", "link", "set", inner, "netns", ns)
            _run("ip", "link", "set", outer, "master", BRIDGE)
            _run("ip", "link", "set", outer, "up")
            _run("ip", "-n", ns, "addr", "add", f"{address(i)}/24", "dev", inner)
            _run("ip", "-n", ns, "link", "set", inner, "up")
            _run("ip", "-n", ns, "link", "set", "lo", "up")
            if bps:
                shape(inner, bps, ns)
                shape(outer, bps)
    except BaseException:
        down()
        raise
    state = {"hosts": n, "rate": rate, "bps": bps, "bridge": BRIDGE, "root_address": ROOT_ADDR,
             "addresses": {host_name(i): address(i) for i in range(n)}}
    STATE.write_text(json.dumps(state))
    return state


def state() -> dict | None:
    try:
        return json.loads(STATE.read_text())
    except (OSError, ValueError):
        return None


def placement_for(n: int) -> dict:
    """What the local launcher needs to put rank r in host r mod n; a one-line error if not up."""
    s = state()
    have = existing()
    if not s or len(have) < n or s.get("hosts", 0) < n:
        raise UsageError(f"--hosts {n}: {len(have)} emulated hosts are up; run `commbench hosts up {n} --rate RATE` "
                         "first (as root)")
    return s


def add_parser(sub) -> None:
    p = sub.add_parser("hosts", help="emulated hosts: network namespaces joined by shaped links (root)",
                       description=__doc__.split("\n\n")[0].replace("``", ""))
    hs = p.add_subparsers(dest="action", required=True, metavar="up|down|status")
    u = hs.add_parser("up", help="make N hosts joined at --rate")
    u.add_argument("n", type=integer(1, 64), help="number of hosts")
    u.add_argument("--rate", default="none", help="link rate in tc notation (100mbit, 1gbit) or none (default)")
    hs.add_parser("down", help="remove the emulated hosts")
    hs.add_parser("status", help="what is up")
    p.set_defaults(func=run)


def run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    if args.action == "up":
        s = up(args.n, args.rate)
        print(f"commbench hosts: {s['hosts']} hosts up at {s['rate']}: " +
              ", ".join(f"{k} {v}" for k, v in s["addresses"].items()) + f"; rendezvous side {ROOT_ADDR}")
    elif args.action == "down":
        gone = down()
        print(f"commbench hosts: removed {', '.join(gone) or 'nothing (none were up)'}")
    else:
        s, have = state(), existing()
        print(json.dumps({"namespaces": have, "state": s}, indent=2))
    return 0
