"""Emulated hosts on this machine (the library; the command is ``commbench hosts``,
commands/hosts.py, whose help says what they are): network namespaces joined by veth pairs to
bridges, shaped with tc; their state and topology; where the local launcher puts rank r."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from commbench.core.analysis.topology import Topology
from commbench.core.errors import UsageError
from commbench.core.run import hostset
from commbench.core.run.hostset import host_name, link_name, root_netns, state_path

MAX_HOSTS = 64
RATE_RE = re.compile(r"^(\d+(?:\.\d+)?)(bit|kbit|mbit|gbit|tbit|bps|kbps|mbps|gbps)$", re.I)
BITS = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12,
        "bps": 8, "kbps": 8e3, "mbps": 8e6, "gbps": 8e9}
DEFAULT_SUBNET = 0  # 10.77.0.0/24: the default set's


def parse_rate(text: str, flag: str = "--rate") -> float | None:
    """Bits per second from tc's notation (100mbit, 1gbit, 50mbps); None for 'none' (unshaped)."""
    if text.lower() in ("none", "unshaped", "0"):
        return None
    m = RATE_RE.match(text.strip())
    if not m or float(m.group(1)) <= 0:
        raise UsageError(f"bad {flag} {text!r}: use tc's notation, e.g. 100mbit, 1gbit, 500kbit, or none")
    return float(m.group(1)) * BITS[m.group(2).lower()]


def _run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    p = subprocess.run(cmd, capture_output=True, text=True)
    if check and p.returncode != 0:
        raise UsageError(f"`{' '.join(cmd)}` failed: {p.stderr.strip() or p.stdout.strip()}")
    return p


def _need_root(what: str) -> None:
    if os.geteuid() != 0:
        raise UsageError(f"commbench hosts {what} needs root (network namespaces and tc): run it with sudo")


def existing(s: str = "") -> list[str]:
    """The namespaces of set s that exist, in host order."""
    pat = hostset.host_pattern(s)
    names = [line.split()[0] for line in _run("ip", "netns", "list", check=False).stdout.splitlines() if line]
    found = {int(m.group(1)): n for n in names if (m := pat.match(n))}
    return [found[i] for i in sorted(found)]


def _links_of(s: str) -> list[str]:
    """Set s's links left in the root namespace (a pair outliving its namespace, bridges, uplinks)."""
    pat = re.compile(rf"^cb{re.escape(s)}(?:v|br|u|s|sp)\d+$")  # a host's own end (e) lives in its namespace
    names = re.findall(r"^\d+: ([^:@\s]+)", _run("ip", "-o", "link", check=False).stdout, re.M)
    return [n for n in names if pat.match(n)]


def down(s: str = "") -> list[str]:
    """Remove set s's hosts, bridges, uplinks and state file; returns the hosts removed."""
    _need_root("down")
    gone = existing(s)
    for ns in gone:
        _run("ip", "netns", "del", ns, check=False)  # its veth pair goes with it, once no process is left in it
    links = _links_of(s)
    for dev in sorted(links, key=lambda d: ("br" in d or "sp" in d, d)):  # pairs first, then the bridges
        _run("ip", "link", "del", dev, check=False)
    if shutil.which("nft"):
        _run("nft", "delete", "table", "netdev", loss_table(s), check=False)
    _run("ip", "netns", "del", root_netns(s), check=False)  # only the name: the namespace is this machine's own
    state_path(s).unlink(missing_ok=True)
    topology_path(s).unlink(missing_ok=True)
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


def parse_rate_of(items: Sequence[str], n: int, flag: str = "--rate-of", what: str = "host") -> dict[int, str]:
    """``--rate-of I=RATE`` items: host index -> rate (checked: the host exists, the rate parses); the
    same for ``--uplink-of K=RATE`` (rack K's uplink)."""
    out: dict[int, str] = {}
    for item in items:
        idx, eq, rate = item.partition("=")
        if not eq or not idx.strip().isdigit() or len(idx.strip()) > 4:
            raise UsageError(f"{flag} {item!r}: give {what.upper()}=RATE, e.g. {flag} 1=200mbit ({what} 1 of 0 to "
                             f"{n - 1})")
        i = int(idx)
        if i >= n:
            raise UsageError(f"{flag} {item}: there is no {what} {i}; this makes {what}s 0 to {n - 1}")
        parse_rate(rate, f"{flag} {idx}=")
        out[i] = rate
    return out


def parse_loss_of(items: Sequence[str], n: int) -> dict[int, float]:
    """``--loss-of I=P%`` items: host index -> the share of its frames dropped each way (0 < P < 100)."""
    out: dict[int, float] = {}
    for item in items:
        idx, eq, pct = item.partition("=")
        num = pct.strip().removesuffix("%")
        try:
            share = float(num) / 100 if eq and len(num) <= 12 else -1.0
        except ValueError:
            share = -1.0
        if not idx.strip().isdigit() or len(idx.strip()) > 4 or not 0 < share < 1:
            raise UsageError(f"--loss-of {item[:40]!r}: give HOST=PERCENT, e.g. --loss-of 1=0.5% (host 1 of 0 to "
                             f"{n - 1} drops 0.5 % of its frames each way; 0 < PERCENT < 100)")
        if int(idx) >= n:
            raise UsageError(f"--loss-of {item[:40]}: there is no host {int(idx)}; this makes hosts 0 to {n - 1}")
        out[int(idx)] = share
    return out


LOSS_STEPS = 1_000_000  # numgen's range: a share of frames in steps of 0.0001 %


def loss_table(s: str) -> str:
    """The nftables table (netdev family, root namespace) holding set s's dropping rules."""
    return f"cbloss{s}"


def make_lossy(s: str, lossy: dict[str, float]) -> None:
    """Each root-side device of ``lossy`` (its host's link) drops that share of the frames through it,
    each way, at random (nftables' numgen on the device's ingress and egress hooks), with its
    offloads off so that a frame dropped is one frame, not a 64 KB segment."""
    if shutil.which("nft") is None or shutil.which("ethtool") is None:
        raise UsageError("--loss-of needs nftables and ethtool (apt-get install nftables ethtool)")
    t = loss_table(s)
    _run("nft", "add", "table", "netdev", t)
    for dev, share in lossy.items():
        _run("ethtool", "-K", dev, "tso", "off", "gso", "off", "gro", "off", check=False)
        for hook in ("ingress", "egress"):
            chain = f"{dev}_{hook}"
            _run("nft", "add", "chain", "netdev", t, chain,
                 f'{{ type filter hook {hook} device "{dev}" priority 0 ; }}')
            _run("nft", "add", "rule", "netdev", t, chain, "numgen", "random", "mod", str(LOSS_STEPS), "<",
                 str(max(1, round(share * LOSS_STEPS))), "counter", "drop")


def _subnet(s: str) -> int:
    """The third octet of set s's 10.77.X.0/24: 0 for the default set, else one no other set and no
    address of this machine uses."""
    if not s:
        return DEFAULT_SUBNET
    used = {int(m) for m in re.findall(r"inet 10\.77\.(\d+)\.", _run("ip", "-4", "-o", "addr", check=False).stdout)}
    for path in hostset.STATE_DIR.glob("commbench-hosts*.json"):
        try:
            used.add(int(json.loads(path.read_text())["subnet"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    free = next((x for x in range(1, 251) if x not in used), None)
    if free is None:
        raise UsageError("no free subnet in 10.77.1-250.0/24 for another host set: take some sets down")
    return free


def parse_cables(items: Sequence[str], n: int) -> dict[tuple[int, int], str]:
    """``--cable I-J=RATE`` items: (i, j) with i < j -> rate (checked: both hosts exist, the rate parses)."""
    out: dict[tuple[int, int], str] = {}
    for item in items:
        pair, eq, rate = item.partition("=")
        ends = pair.split("-")
        if not eq or len(ends) != 2 or not all(e.strip().isdigit() and len(e.strip()) <= 4 for e in ends):
            raise UsageError(f"--cable {item!r}: give I-J=RATE, e.g. --cable 2-5=50mbit (hosts 0 to {n - 1})")
        i, j = sorted(int(e) for e in ends)
        if i == j or j >= n:
            raise UsageError(f"--cable {item}: give two different hosts of 0 to {n - 1}")
        parse_rate(rate, f"--cable {pair}=")
        out[(i, j)] = rate
    return out


def shape_cables(ns: str, dev: str, host_bps: float | None, slow: dict[str, float]) -> None:
    """Host ns's egress as htb: its own rate by default, and a class at each slow cable's rate for the
    packets to that cable's other end (u32 on the destination address), so one pair is slow and the
    host's other pairs are not (a bad cable or port between two healthy hosts)."""
    top = int(host_bps or 100e9)
    pre = ("ip", "netns", "exec", ns, "tc")
    _run(*pre, "qdisc", "replace", "dev", dev, "root", "handle", "1:", "htb", "default", "1")
    _run(*pre, "class", "add", "dev", dev, "parent", "1:", "classid", "1:1", "htb", "rate", f"{top}bit")
    for k, (addr, bps) in enumerate(sorted(slow.items()), 2):
        _run(*pre, "class", "add", "dev", dev, "parent", "1:", "classid", f"1:{k}", "htb", "rate",
             f"{int(min(bps, top))}bit")
        _run(*pre, "filter", "add", "dev", dev, "parent", "1:", "protocol", "ip", "prio", "1", "u32", "match", "ip",
             "dst", f"{addr}/32", "flowid", f"1:{k}")


def topology_path(s: str = "") -> Path:
    """Where ``up`` writes its hosts' topology as Slurm's topology.conf (for cluster --topology)."""
    return state_path(s).with_suffix(".topology.conf")


def up(n: int, rate: str, rate_of: Sequence[str] = (), racks: int = 1, uplink: str | None = None,
       s: str = "", uplink_of: Sequence[str] = (), cables: Sequence[str] = (), loss_of: Sequence[str] = ()) -> dict:
    s = hostset.check_set(s)
    bps = parse_rate(rate)
    if not 1 <= n <= MAX_HOSTS:
        raise UsageError(f"hosts up takes 1 to {MAX_HOSTS} hosts, not {n}")
    rates = parse_rate_of(rate_of, n)
    losses = parse_loss_of(loss_of, n)
    slow_cables = parse_cables(cables, n)
    if racks < 1 or racks > n or n % racks:
        raise UsageError(f"--racks {racks} does not divide {n} hosts into equal racks: choose a divisor of {n} "
                         f"({', '.join(str(d) for d in range(1, n + 1) if n % d == 0)})")
    if (uplink is not None or uplink_of) and racks == 1:
        raise UsageError("--uplink and --uplink-of shape the links between racks: give --racks K (K >= 2) with them")
    up_bps = parse_rate(uplink, "--uplink") if uplink is not None else None
    uplinks = parse_rate_of(uplink_of, racks, "--uplink-of", "rack")
    _need_root("up")
    down(s)
    net = _subnet(s)
    root_addr = f"10.77.{net}.254"
    per_rack = n // racks
    bridges = [link_name("br", k, s) for k in range(racks)]
    try:
        for br in bridges:
            _run("ip", "link", "add", br, "type", "bridge")
            _run("ip", "link", "set", br, "up")
        core = bridges[0]
        if racks > 1:  # a spine bridge carries the root address; each rack reaches it by a shaped uplink
            core = link_name("sp", 0, s)
            _run("ip", "link", "add", core, "type", "bridge")
            _run("ip", "link", "set", core, "up")
            for k, br in enumerate(bridges):
                rack_end, spine_end = link_name("u", k, s), link_name("s", k, s)
                _run("ip", "link", "add", rack_end, "type", "veth", "peer", "name", spine_end)
                _run("ip", "link", "set", rack_end, "master", br)
                _run("ip", "link", "set", spine_end, "master", core)
                rack_bps = parse_rate(uplinks[k]) if k in uplinks else up_bps
                for dev in (rack_end, spine_end):
                    _run("ip", "link", "set", dev, "up")
                    if rack_bps:
                        shape(dev, rack_bps)
        _run("ip", "addr", "add", f"{root_addr}/24", "dev", core)
        _run("ip", "netns", "attach", root_netns(s), str(os.getpid()))  # where the links meet, for --traffic
        for i in range(n):
            ns, inner, outer = host_name(i, s), link_name("e", i, s), link_name("v", i, s)
            _run("ip", "netns", "add", ns)
            _run("ip", "link", "add", outer, "type", "veth", "peer", "name", inner)
            _run("ip", "link", "set", inner, "netns", ns)
            _run("ip", "link", "set", outer, "master", bridges[i // per_rack])
            _run("ip", "link", "set", outer, "up")
            _run("ip", "-n", ns, "addr", "add", f"10.77.{net}.{i + 1}/24", "dev", inner)
            _run("ip", "-n", ns, "link", "set", inner, "up")
            _run("ip", "-n", ns, "link", "set", "lo", "up")
            host_bps = parse_rate(rates[i]) if i in rates else bps
            mine = {f"10.77.{net}.{(b if a == i else a) + 1}": parse_rate(r) or 100e9
                    for (a, b), r in slow_cables.items() if i in (a, b)}
            if mine:
                shape_cables(ns, inner, host_bps, mine)
            elif host_bps:
                shape(inner, host_bps, ns)
            if host_bps:
                shape(outer, host_bps)
        if losses:
            make_lossy(s, {link_name("v", i, s): share for i, share in losses.items()})
    except BaseException:
        down(s)
        raise
    state = {"set": s, "hosts": n, "rate": rate, "bps": bps, "subnet": net, "root_address": root_addr,
             "bridge": core, "racks": racks, "uplink": uplink,
             "names": [host_name(i, s) for i in range(n)],
             "rates": {host_name(i, s): rates.get(i, rate) for i in range(n)},
             "rack_of": {host_name(i, s): i // per_rack for i in range(n)},
             "addresses": {host_name(i, s): f"10.77.{net}.{i + 1}" for i in range(n)}}
    topo = Topology({host_name(i, s): f"rack{i // per_rack}" for i in range(n)},
                    {f"rack{k}": "spine" for k in range(racks)} if racks > 1 else {})
    state["topology"] = str(topology_path(s))
    state["uplinks"] = {f"rack{k}": uplinks.get(k, uplink) for k in range(racks)} if racks > 1 else {}
    state["cables"] = {f"{host_name(a, s)} - {host_name(b, s)}": r for (a, b), r in slow_cables.items()}
    state["loss"] = {host_name(i, s): f"{share * 100:g}%" for i, share in losses.items()}
    topology_path(s).write_text(topo.to_conf(f"commbench hosts up {n} --racks {racks}" + (f" --set {s}" if s else "")))
    state_path(s).write_text(json.dumps(state))
    return state


def state(s: str = "") -> dict | None:
    try:
        return json.loads(state_path(s).read_text())
    except (OSError, ValueError):
        return None


def placement_for(n: int, s: str = "") -> dict:
    """What the local launcher needs to put rank r in host r mod n; a one-line error if not up."""
    st = state(s)
    have = existing(s)
    if not st or len(have) < n or st.get("hosts", 0) < n:
        flag = f" --set {s}" if s else ""
        raise UsageError(f"--hosts {n}: {len(have)} emulated hosts are up{' in set ' + s if s else ''}; run "
                         f"`commbench hosts up {n}{flag} --rate RATE` first (as root)")
    return st
