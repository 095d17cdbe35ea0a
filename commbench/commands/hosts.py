"""``commbench hosts up N --rate R [--rate-of I=R] [--cable I-J=R] [--loss-of I=P%] [--racks K --uplink R
[--uplink-of K=R]] [--set S] | down | status``: N emulated hosts on this machine.

Each host is a network namespace ``cbhI`` with one interface ``cbeI`` (10.77.0.I+1/24), joined by a
veth pair (root end ``cbvI``) to a bridge in the root namespace: ``cbbr0`` (10.77.0.254, where the local
launcher's rendezvous listens). ``--rate`` shapes every host's link with tc tbf on both ends (shaping
is egress only; netem, hence added delay, is not in this kernel), so a flow between two hosts runs at
the rate; ``--rate-of I=R`` gives host I a rate of its own (a slow node); ``--cable I-J=R`` shapes the
pair of hosts I and J alone (htb on each one's egress, a class for the other's address: a bad cable
between two healthy hosts); ``--loss-of I=P%`` makes host I's link drop P % of its frames each way at
random (nftables' ``numgen random`` on the root end's ingress and egress, offloads off: a lossy link,
which TCP's retransmissions show). ``--racks K`` puts the hosts under K bridges (``cbbrK``, host I in rack
I // (N / K)) joined to a spine bridge (``cbsp0``, which carries 10.77.0.254) by uplinks shaped at
``--uplink``: cross-rack traffic shares them, as in a fat tree with a tapered spine; ``--uplink-of
K=R`` gives rack K's uplink a rate of its own (a degraded uplink). ``up`` writes the hosts' topology as
Slurm's topology.conf beside its state (switches ``rackK`` under ``spine``) for ``cluster
--topology``. The root namespace is named ``cbroot`` too, so that ``--traffic``'s capture can enter
it. ``--set S`` makes a set of hosts of its own (names in core/run/hostset.py), which no other set's
``up`` or ``down`` touches. Benchmarks and ``train`` run across them with ``--hosts N [--host-set S]``
(rank r in host r mod N). ``up`` replaces what the same set's ``up`` made before (idempotent) and
removes what it made if a step fails. Needs root.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from commbench.commands import command
from commbench.core.config.argtypes import integer
from commbench.core.config.options import Options, opt
from commbench.core.run import hostset
from commbench.launch.hosts import MAX_HOSTS, down, existing, state, up


@dataclass(frozen=True)
class HostSet(Options):
    set: str | None = opt(None, metavar="S", help="the set of hosts (1-4 letters or digits; default "
                                                  "$COMMBENCH_HOSTS_SET, else the default set)")

    def chosen(self) -> str:
        return hostset.check_set(hostset.default_set() if self.set is None else self.set)


@dataclass(frozen=True)
class HostsStatusOptions(HostSet):
    json: bool = opt(False, action="store_true",
                     help="the set's state as JSON (what `up` wrote, and the namespaces that exist)")


@dataclass(frozen=True)
class HostsUpOptions(HostSet):
    n: int = opt(0, "n", type=integer(1, MAX_HOSTS), help="number of hosts")
    rate: str = opt("none", help="link rate in tc notation (100mbit, 1gbit) or none (default)")
    rate_of: list[str] | None = opt(None, action="append", metavar="I=RATE",
                                    help="host I's link at RATE instead (a slow node or cable; repeatable)")
    racks: int = opt(1, type=integer(1, MAX_HOSTS), metavar="K",
                     help="K racks of N/K hosts each, under a spine (default 1: one bridge)")
    uplink: str | None = opt(None, metavar="RATE", help="each rack's link to the spine, in tc notation (with --racks)")
    uplink_of: list[str] | None = opt(None, action="append", metavar="K=RATE",
                                      help="rack K's uplink at RATE instead (a degraded uplink; repeatable)")
    cable: list[str] | None = opt(None, action="append", metavar="I-J=RATE",
                                  help="the pair of hosts I and J at RATE, their other pairs not (a bad cable; "
                                       "repeatable)")
    loss_of: list[str] | None = opt(None, action="append", metavar="I=PCT%",
                                    help="host I's link drops PCT %% of its frames each way, at random (a lossy "
                                         "link; nftables; repeatable)")


def add_parser(sub) -> None:
    p = sub.add_parser("hosts", help="emulated hosts: network namespaces joined by shaped links (root)",
                       description=__doc__.split("\n\n")[0].replace("``", ""))
    hs = p.add_subparsers(dest="action", required=True, metavar="up|down|status")
    command(hs, "up", HostsUpOptions, hosts_up, help="make N hosts joined at --rate")
    command(hs, "down", HostSet, hosts_down, help="remove this set's hosts")
    command(hs, "status", HostsStatusOptions, hosts_status, help="this set's hosts: each one's address, rack and rate")


def hosts_up(o: HostsUpOptions) -> int:
    st = up(o.n, o.rate, o.rate_of or [], o.racks, o.uplink, o.chosen(), o.uplink_of or [],
            o.cable or [], o.loss_of or [])
    odd = {k: v for k, v in st["rates"].items() if v != o.rate}
    odd.update({f"rack{k}'s uplink": v for k, v in enumerate(st["uplinks"].values()) if v != o.uplink})
    odd.update({f"cable {k}": v for k, v in st["cables"].items()})
    odd.update({f"{k}'s link": f"{v} loss" for k, v in st["loss"].items()})
    racks = f" in {st['racks']} racks, uplinks at {st['uplink'] or 'none'}" if st["racks"] > 1 else ""
    print(f"commbench hosts: {st['hosts']} hosts up at {st['rate']}{racks}"
          + (f" ({', '.join(f'{k} at {v}' for k, v in odd.items())})" if odd else "") + ": "
          + ", ".join(f"{k} {v}" for k, v in st["addresses"].items()) + f"; rendezvous side {st['root_address']}"
          + f"; topology {st['topology']} (for cluster --topology)")
    return 0


def hosts_down(o: HostSet) -> int:
    gone = down(o.chosen())
    print(f"commbench hosts: removed {', '.join(gone) or 'nothing (none were up)'}")
    return 0


def hosts_status(o: HostsStatusOptions) -> int:
    s = o.chosen()
    have, st = existing(s), state(s)
    if o.json:
        print(json.dumps({"namespaces": have, "state": st}, indent=2))
        return 0
    name = f"set {s}" if s else "the default set"
    if not st:
        print(f"commbench hosts: {name}: no hosts up" + (f" ({len(have)} namespaces left: `commbench hosts down`)"
                                                         if have else ""))
        return 0
    print(f"commbench hosts: {name}: {len(have)} of {st['hosts']} hosts up at {st['rate']}"
          + (f" in {st['racks']} racks, uplinks at {st['uplink'] or 'none'}" if st["racks"] > 1 else "")
          + f"; rendezvous side {st['root_address']}; topology {st['topology']}")
    print(f"{'host':<14} {'address':<15} {'rack':<6} rate")
    for h in st["names"]:
        print(f"{h:<14} {st['addresses'][h]:<15} {'rack' + str(st['rack_of'][h]):<6} {st['rates'][h]}")
    for k, v in st["uplinks"].items():
        if v != st["uplink"]:
            print(f"uplink of {k} at {v}")
    for k, v in st["cables"].items():
        print(f"cable {k} at {v}")
    for k, v in st.get("loss", {}).items():
        print(f"{k}'s link drops {v} of its frames each way")
    return 0
