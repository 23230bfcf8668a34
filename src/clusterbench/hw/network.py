"""Network interfaces and RDMA ports (InfiniBand, RoCE) as /sys describes them."""

from __future__ import annotations

import re
import socket
from pathlib import Path

from clusterbench import limits
from clusterbench.argtypes import clipped
from clusterbench.errors import UsageError
from clusterbench.hw.host import numa_of, read, read_int
from clusterbench.stages.hardware.records import Nic, RdmaPort

_ARPHRD_INFINIBAND = "32"
_LISTED = 8  # interfaces an error names: a host of containers has hundreds


def net_interfaces(base: Path = Path("/sys/class/net")) -> list[Nic]:
    interfaces = []
    for dev in sorted(base.iterdir()) if base.is_dir() else []:
        if dev.name == "lo":
            continue
        speed = read_int(dev / "speed")  # -1 or unreadable when unknown or down
        speed = speed if speed and speed > 0 else None
        link_layer = "InfiniBand" if read(dev / "type") == _ARPHRD_INFINIBAND else "Ethernet"
        interfaces.append(Nic(
            name=dev.name,
            operstate=read(dev / "operstate"),
            speed_mbps=speed,
            mtu=read_int(dev / "mtu"),
            link_layer=link_layer,
            virtual=not (dev / "device").exists(),
            numa_node=numa_of(dev / "device"),
            gbps=limits.nic_gbps(link_layer, speed / 1000) if speed else None,
        ))
    return interfaces


def rdma_ports(base: Path = Path("/sys/class/infiniband")) -> list[RdmaPort]:
    ports = []
    for dev in sorted(base.iterdir()) if base.is_dir() else []:
        port_dirs = (dev / "ports").iterdir() if (dev / "ports").is_dir() else []
        for port in sorted(port_dirs, key=lambda p: int(p.name) if p.name.isdigit() else 0):
            rate_text = read(port / "rate")  # e.g. "400 Gb/sec (4X NDR)"
            match = re.match(r"\s*([\d.]+)", rate_text or "")
            rate = float(match.group(1)) if match else None
            link_layer = read(port / "link_layer")  # "InfiniBand", or "Ethernet" for RoCE
            state = read(port / "state")  # e.g. "4: ACTIVE"
            known = bool(rate) and link_layer in ("InfiniBand", "Ethernet")
            ports.append(RdmaPort(
                device=dev.name,
                port=port.name,
                link_layer=link_layer,
                kind="RoCE" if link_layer == "Ethernet" else link_layer,
                state=state.split(":", 1)[-1].strip() if state else None,
                rate_gbit=rate,
                rate_text=rate_text,
                label=limits.nic_label(link_layer, rate) if known else None,
                numa_node=numa_of(dev / "device"),
                gbps=limits.nic_gbps(link_layer, rate) if known else None,
            ))
    return ports


def check_interface(spec: str) -> None:
    """Refuse an --iface that names nothing on this host, listing what it has: Gloo and NCCL would find
    out only once the ranks have started, and say it as a failure of the measurement. `spec` is read
    as NCCL_SOCKET_IFNAME is (a name or a prefix of one, "=name" exactly, comma-separated); an
    exclusion ("^docker") names nothing to check."""
    if spec.startswith("^"):
        return
    exact = spec.startswith("=")
    try:
        names = [n for _, n in socket.if_nameindex()]
    except OSError:
        return  # the host will not say: the backend will
    wanted = [w.strip() for w in spec.removeprefix("=").split(",")]
    if all(wanted) and all(any(n == w if exact else n.startswith(w) for n in names) for w in wanted):
        return
    more = f" and {len(names) - _LISTED} more" if len(names) > _LISTED else ""
    raise UsageError(f"--iface {clipped(spec)!r}: no such network interface on {socket.gethostname()}; "
                     f"it has {', '.join(names[:_LISTED])}{more}")
