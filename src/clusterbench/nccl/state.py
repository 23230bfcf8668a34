"""What the lines of an NCCL log said so far, and the typed facts it comes to once they are read."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field, replace

from clusterbench.nccl.records import NcclAlgo, NcclFacts, NcclHost, NcclNet, NcclPeer, NcclRank, NcclRing

PeerKey = tuple[int, int | None, str, str, str | None]  # src, dst, transport, via, side
AlgoKey = tuple[str | None, int, str, str, int | None, int | None]  # op, bytes, algorithm, protocol, lo, hi


@dataclass
class LogState:
    """What the lines said so far; `facts` turns it into the record."""

    version: str | None = None
    cuda_build: str | None = None
    cuda_driver: str | None = None
    hosts: dict[str, None] = field(default_factory=dict)
    processes: dict[tuple[str, int], int | None] = field(default_factory=dict)  # (host, pid): launcher's rank
    shapes: dict[tuple[int, int, int], None] = field(default_factory=dict)  # (nRanks, nNodes, localRanks)
    sized: dict[tuple[str, int, int], None] = field(default_factory=dict)  # (host, rank, nranks) a line named
    placed: dict[tuple[str, int], None] = field(default_factory=dict)  # (host, rank) of a line naming no size
    ring_size: int | None = None  # ranks in the longest "Channel NN/MM : 0 1 2 ..." ring
    ib_said: str | None = None
    plugin_said: str | None = None
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


def _nranks(log: LogState) -> int | None:
    """NCCL's own count of ranks in the largest communicator: its nRanks/nranks lines, else its longest ring."""
    said = [shape[0] for shape in log.shapes] + [nranks for _, _, nranks in log.sized]
    return max(said) if said else log.ring_size


def _placement(log: LogState, nranks: int | None) -> list[NcclHost]:
    """Each host the log names, with the ranks of the largest communicator that wrote from it, its
    processes and their launcher ranks. Lines naming no communicator size count only while the log
    names one size: otherwise a sub-communicator's rank 0 would be taken for the job's."""
    ranks: dict[str, set[int]] = {host: set() for host in log.hosts}
    for host, rank, size in log.sized:
        if size == nranks:
            ranks.setdefault(host, set()).add(rank)
    sizes = {size for _, _, size in log.sized} | {shape[0] for shape in log.shapes}
    if len(sizes) <= 1:
        for host, rank in log.placed:
            ranks.setdefault(host, set()).add(rank)
    processes: dict[str, list[int | None]] = {}
    for (host, _), launched in log.processes.items():
        processes.setdefault(host, []).append(launched)
    return [NcclHost(host=host, ranks=sorted(found), processes=len(processes.get(host, [])),
                     launcher_ranks=sorted(r for r in processes.get(host, []) if r is not None))
            for host, found in ranks.items()]


def facts(log: LogState) -> NcclFacts:
    peers = sorted(
        (_peer(key, channels) for key, channels in log.peers.items()),
        key=lambda p: (p.transport, p.src_rank, -1 if p.dst_rank is None else p.dst_rank, p.side or "", p.via),
    )
    net_name = log.net_name or next((p.net for p in peers if p.transport == "NET"), None)
    nranks = _nranks(log)
    return NcclFacts(
        version=log.version,
        cuda_build=log.cuda_build,
        cuda_driver=log.cuda_driver,
        hosts=list(log.hosts),
        nodes=max((nodes for nranks_, nodes, _ in log.shapes if nranks_ == nranks), default=None),
        nranks=nranks,
        local_ranks=sorted({local for nranks_, _, local in log.shapes if nranks_ == nranks}),
        placement=_placement(log, nranks),
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
            ib_said=log.ib_said,
            plugin_said=log.plugin_said,
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
