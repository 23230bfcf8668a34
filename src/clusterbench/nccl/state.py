"""What the lines of an NCCL log said so far, and the typed facts it comes to once they are read."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field, replace

from clusterbench.results.nccl import NcclAlgo, NcclFacts, NcclNet, NcclPeer, NcclRank, NcclRing

PeerKey = tuple[int, int | None, str, str, str | None]  # src, dst, transport, via, side
AlgoKey = tuple[str | None, int, str, str, int | None, int | None]  # op, bytes, algorithm, protocol, lo, hi


@dataclass
class LogState:
    """What the lines said so far; `facts` turns it into the record."""

    version: str | None = None
    cuda_build: str | None = None
    cuda_driver: str | None = None
    hosts: dict[str, None] = field(default_factory=dict)
    nodes: int | None = None
    ranks: dict[tuple[str | None, int], NcclRank] = field(default_factory=dict)
    peers: dict[PeerKey, set[int]] = field(default_factory=dict)
    net_name: str | None = None
    net_plugin: str | None = None
    devices: dict[str, None] = field(default_factory=dict)
    oob: dict[str, None] = field(default_factory=dict)
    interfaces: dict[str, None] = field(default_factory=dict)
    bootstrap: dict[str, None] = field(default_factory=dict)
    gdr_said: set[bool] = field(default_factory=set)  # "GPU Direct RDMA Enabled/Disabled for GPU ... / HCA ..."
    gdr_hca: set[bool] = field(default_factory=set)  # "... for HCA n 'mlx5_0'": what the NIC can do
    channels: int | None = None
    p2p_channels: int | None = None
    nvls: set[bool] = field(default_factory=set)
    nvls_channels: int | None = None
    collnet: set[bool] = field(default_factory=set)
    collnet_plugin: str | None = None
    rings: dict[int, list[int]] = field(default_factory=dict)
    rings_done: bool = False
    ring_total: int | None = None  # the "/16" of "Channel 01/16": how many rings there are
    trees: dict[str, None] = field(default_factory=dict)
    algorithms: dict[AlgoKey, NcclAlgo] = field(default_factory=dict)
    algorithm_calls: Counter[AlgoKey] = field(default_factory=Counter)
    settings: dict[str, str] = field(default_factory=dict)
    warnings: dict[str, None] = field(default_factory=dict)
    named: set[str] = field(default_factory=set)  # the communicators the lines of one source named



def _peer(key: PeerKey, channels: set[int]) -> NcclPeer:
    src, dst, transport, via, side = key
    net = re.match(r"(?:NET|COLLNET)/(.+?)/(\d+)(?:\((\d+)\))?(/.*)?$", via)
    return NcclPeer(
        src_rank=src,
        dst_rank=dst,
        transport=transport,
        via=via,
        side=side,
        channels=sorted(channels),
        net=net[1] if net else None,
        net_dev=int(net[2]) if net else None,
        proxy_rank=int(net[3]) if net and net[3] else None,
        gdr="/GDRDMA" in (net[4] or "") if net else None,
    )


def _gdr(log: LogState, peers: list[NcclPeer]) -> bool | None:
    """What carried the NET traffic, else what NCCL decided per GPU and NIC, else what the NICs can do."""
    links = [p.gdr for p in peers if p.transport == "NET"]
    said = links or log.gdr_said
    if said:
        return all(said)
    return False if log.gdr_hca and not any(log.gdr_hca) else None


def _collnet(log: LogState, peers: list[NcclPeer]) -> bool | None:
    if any(p.transport == "COLLNET" for p in peers):
        return True
    return any(log.collnet) if log.collnet else None


def facts(log: LogState) -> NcclFacts:
    peers = sorted(
        (_peer(key, channels) for key, channels in log.peers.items()),
        key=lambda p: (p.transport, p.src_rank, -1 if p.dst_rank is None else p.dst_rank, p.side or "", p.via),
    )
    net_name = log.net_name or next((p.net for p in peers if p.transport == "NET"), None)
    return NcclFacts(
        version=log.version,
        cuda_build=log.cuda_build,
        cuda_driver=log.cuda_driver,
        hosts=list(log.hosts),
        nodes=log.nodes,
        ranks=sorted(log.ranks.values(), key=lambda r: (r.comm_id or "", r.rank)),
        peers=peers,
        net=NcclNet(
            name=net_name,
            plugin=log.net_plugin,
            devices=list(log.devices),
            oob=list(log.oob),
            interfaces=list(log.interfaces),
            bootstrap=list(log.bootstrap),
            gdr=_gdr(log, peers),
        ),
        channels=log.channels if log.channels is not None else log.ring_total or len(log.rings) or None,
        p2p_channels=log.p2p_channels,
        nvls_supported=any(log.nvls) if log.nvls else None,
        nvls_channels=log.nvls_channels,
        collnet=_collnet(log, peers),
        collnet_plugin=log.collnet_plugin,
        rings=[NcclRing(channel=c, ranks=log.rings[c]) for c in sorted(log.rings)],
        trees=list(log.trees),
        algorithms=[replace(algo, calls=log.algorithm_calls[key]) for key, algo in log.algorithms.items()],
        settings=dict(log.settings),
        warnings=list(log.warnings),
    )
