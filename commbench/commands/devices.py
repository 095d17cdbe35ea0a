"""``commbench devices``: what this host has and which transports will work, with the reason when not
(the report: transports/devices.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from commbench.commands import command
from commbench.core.config.options import Options, opt
from commbench.transports.devices import report


@dataclass(frozen=True)
class DevicesOptions(Options):
    json: bool = opt(False, action="store_true", help="print the report as JSON")


def add_parser(sub) -> None:
    command(sub, "devices", DevicesOptions, devices,
            help="RDMA devices, network interfaces, libraries, and which transports work here")


def devices(o: DevicesOptions) -> int:
    r = report()
    if o.json:
        print(json.dumps(r, indent=2))
        return 0
    print(f"# commbench devices on {r['host']}")
    print("RDMA devices:")
    if not r["rdma"]:
        print(f"  none: {r['rdma_reason']}")
    for d in r["rdma"]:
        print(f"  {d['name']}" + (f": {d['error']}" if d.get("error") else ""))
        for p in d["ports"]:
            print(f"    port {p['port']}: {p['state']}, {p['link_layer']}, {p['rate_gbps'] or '?'} Gb/s, "
                  f"mtu {p['active_mtu']}, lid {p['lid']}; GIDs: "
                  + (", ".join(f"[{i}] {g}" for i, g in p["gids"].items()) or "none"))
    print("network interfaces:")
    for name, i in r["interfaces"].items():
        speed = f"{i['speed_mbps']} Mb/s" if i["speed_mbps"] else "speed unknown"
        print(f"  {name:10s} {i['link'] or '?':11s} {i['state'] or '?':8s} mtu {i['mtu'] or '?':<6} {speed:14s} "
              f"{', '.join(i['ipv4']) or '-'}")
    print("libraries: " + ", ".join(f"{k} {v}" for k, v in r["libraries"].items() if v))
    print("transports:")
    for name, s in r["transports"].items():
        print(f"  {name:8s} {s}")
    return 0
