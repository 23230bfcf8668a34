"""What NCCL's own log says about a run, in numbers rules can judge and lines people can read
(docs/methodology.md §9).

nccl.net.socket_with_rdma   1 when ranks on different nodes talk over TCP sockets while the host
                            has active InfiniBand/RoCE ports (the classic misconfiguration); only
                            with a hardware picture to say which ports are up
nccl.net.sockets_between_nodes   1 when traffic between nodes goes over TCP sockets, from the log
                            alone, with the reason the log gives and what to check (nccl/sockets.py)
nccl.net.gdr                1 when every network link used GPUDirect RDMA, 0 when one did not
nccl.p2p.shm_between_nvlink_gpus   links through host shared memory between GPUs of one host whose
                            GPUs have NVLink (P2P disabled or unusable)
nccl.nvls                   1 when NCCL set up NVLink SHARP channels (busbw may then pass the link)
"""

from __future__ import annotations

from collections import Counter

from clusterbench.nccl.records import NCCL, NcclFacts, NcclPeer
from clusterbench.nccl.sockets import is_socket, value
from clusterbench.results.run import Run
from clusterbench.stages.comm.links import active_rdma
from clusterbench.stages.hardware.records import HARDWARE
from clusterbench.units import ranks_text

HOSTS_SHOWN = 4  # hosts the picture's placement names; the rest are counted


def nccl_values(run: Run) -> dict[str, tuple[float, str]]:
    """Each metric this run's NCCL facts give, with its note; absent where the log cannot say."""
    facts = NCCL.of(run)
    if facts is None:
        return {}
    found: dict[str, tuple[float, str]] = {}
    net = [p for p in facts.peers if p.transport == "NET"]
    rdma = active_rdma(HARDWARE.of(run))
    sockets = [p for p in net if is_socket(p)]
    if net and HARDWARE.of(run) is not None:  # without the host's ports, sockets may be all there is
        bad = bool(sockets and rdma)
        found["nccl.net.socket_with_rdma"] = (float(bad), (
            f"{len(sockets)} links between nodes over TCP sockets ({sockets[0].via}) while rank 0's host has "
            f"{len(rdma)} active RDMA port(s) ({rdma[0].device}): NCCL did not use them" if bad else
            f"between nodes: {', '.join(sorted({p.via for p in net}))}"))
    sockets_between = value(facts)
    if sockets_between is not None:
        found["nccl.net.sockets_between_nodes"] = sockets_between
    rdma_links = [p for p in net if not is_socket(p) and p.gdr is not None]
    if rdma_links:
        off = [p for p in rdma_links if not p.gdr]
        found["nccl.net.gdr"] = (float(not off), (
            f"{len(off)} of {len(rdma_links)} network links without GPUDirect RDMA ({off[0].via}): data is "
            "staged through host memory" if off else f"GPUDirect RDMA on all {len(rdma_links)} network links"))
    nvlink = any(g.nvlink_active for g in (HARDWARE.of(run).gpus if HARDWARE.of(run) else []))
    if nvlink:
        shm = [p for p in facts.peers if p.transport == "SHM" and _same_host(facts, p)]
        found["nccl.p2p.shm_between_nvlink_gpus"] = (float(len(shm)), (
            f"{len(shm)} links between GPUs of one host go through host memory (SHM) although the GPUs have "
            "NVLink: P2P is disabled (NCCL_P2P_DISABLE, NCCL_P2P_LEVEL) or not allowed" if shm else
            "GPUs of one host talk directly (P2P), as their NVLink allows"))
    if facts.nvls_channels is not None:
        found["nccl.nvls"] = (float(facts.nvls_channels > 0), f"{facts.nvls_channels} NVLS channels")
    return found


def _same_host(facts: NcclFacts, peer: NcclPeer) -> bool:
    host = {r.rank: r.host for r in facts.ranks}
    return peer.dst_rank is not None and host.get(peer.src_rank) == host.get(peer.dst_rank)


def unjudged(facts: NcclFacts) -> str:
    """Why the log alone gives no network finding."""
    if any(p.transport in ("NET", "COLLNET") for p in facts.peers) or facts.net.name:
        return "the log shows no traffic between nodes"
    return "the log shows no network link"


def _account(facts: NcclFacts) -> str:
    """What NCCL itself counted: 'ranks: 16 on 2 nodes (NCCL: nRanks 16, nNodes 2, 8 local ranks)'."""
    if facts.nranks is None:
        return "ranks: not counted by NCCL in this log"
    said = [f"nRanks {facts.nranks}"]
    if facts.nodes is not None:
        said.append(f"nNodes {facts.nodes}")
    if facts.local_ranks:
        most = facts.local_ranks[-1]
        said.append(f"{'-'.join(map(str, sorted({facts.local_ranks[0], most})))} local rank{'s' if most > 1 else ''}")
    where = f" on {facts.nodes} node(s)" if facts.nodes is not None else ""
    return f"ranks: {facts.nranks}{where} (NCCL: {', '.join(said)})"


def _seen(facts: NcclFacts) -> str:
    """What the log's own lines show: 'ranks 0-7 on host A; ranks 8-15 on host B (16 processes)'."""
    placed = [h for h in facts.placement if h.ranks]
    tagged = [h for h in facts.placement if h.launcher_ranks]
    by_host = placed or tagged
    if not facts.placement:
        return ""
    shown = _by_host([(h.host, set(h.ranks if placed else h.launcher_ranks)) for h in by_host],
                     "" if placed else "launcher ")
    unnamed = len(facts.placement) - len(by_host)
    if unnamed:
        shown += f"{'; ' if shown else ''}{unnamed} host(s) whose lines name no rank"
    if placed and tagged and any(set(h.launcher_ranks) - set(h.ranks) for h in tagged):
        shown += "; launcher tags: " + _by_host([(h.host, set(h.launcher_ranks)) for h in tagged], "")
    processes = sum(h.processes for h in facts.placement)
    return f"seen in this log: {shown} ({processes} process(es) on {len(facts.placement)} host(s))"


def _by_host(hosts: list[tuple[str, set[int]]], kind: str) -> str:
    """'ranks 0-3 on a; rank 4 on b; 9 more ranks on 3 more hosts'."""
    def ranks(found: set[int]) -> str:
        return f"{kind}{ranks_text(sorted(found))}"
    shown = [f"{ranks(found)} on {host}" for host, found in hosts[:HOSTS_SHOWN]]
    rest = hosts[HOSTS_SHOWN:]
    if rest:
        shown.append(f"{sum(len(found) for _, found in rest)} more {kind}rank(s) on {len(rest)} more host(s)")
    return "; ".join(shown)


def _ranks_line(facts: NcclFacts) -> str:
    """NCCL's count of ranks and nodes and what the log itself shows, each said apart."""
    if facts.nranks is None and not facts.placement:
        # A run.json written before ranks were placed holds only the Init lines' ranks and the hosts.
        ranks = {r.rank for r in facts.ranks}
        if not ranks and not facts.hosts:
            return ""
        return f"ranks: {len(ranks)} seen on {len(facts.hosts) or '?'} host(s)"
    seen = _seen(facts)
    return _account(facts) + (f"; {seen}" if seen else "")


def picture(facts: NcclFacts) -> list[str]:
    """NCCL's run in a few lines: version, ranks and hosts, how pairs talk, network, channels, algorithms."""
    lines = [f"NCCL {facts.version or '(version not logged)'}"
             + (f", built for CUDA {facts.cuda_build}" if facts.cuda_build else "")
             + (f", driver supports CUDA {facts.cuda_driver}" if facts.cuda_driver else "")]
    ranks = _ranks_line(facts)
    if ranks:
        lines.append(ranks)
    by_via = Counter(p.via for p in facts.peers)
    if by_via:
        lines.append("links: " + ", ".join(f"{via} x{n}" for via, n in by_via.most_common()))
    net = facts.net
    if net.name or net.devices or net.interfaces:
        gdr = {True: "GPUDirect RDMA on", False: "GPUDirect RDMA off", None: "GPUDirect RDMA not logged"}[net.gdr]
        lines.append(f"network: {net.name or '?'}" + (f" via plugin {net.plugin}" if net.plugin else "")
                     + (f", devices {', '.join(net.devices)}" if net.devices else "")
                     + (f", sockets on {', '.join(net.interfaces)}" if net.interfaces else "") + f"; {gdr}")
    if facts.channels is not None:
        lines.append(f"channels: {facts.channels} collective"
                     + (f", NVLS {facts.nvls_channels}" if facts.nvls_channels is not None else "")
                     + (f"; CollNet {'on' if facts.collnet else 'off'}" if facts.collnet is not None else ""))
    if facts.rings:
        first = facts.rings[0]
        lines.append(f"rings: {len(facts.rings)} (channel {first.channel}: {' '.join(map(str, first.ranks))})")
    for a in facts.algorithms[:8]:
        lines.append(f"algorithm: {a.op or 'collective'} {a.size_bytes} B -> {a.algorithm}/{a.protocol}"
                     + (f" ({a.calls} calls)" if a.calls > 1 else ""))
    if facts.settings:
        lines.append("settings: " + ", ".join(f"{k}={v}" for k, v in sorted(facts.settings.items())))
    lines += [f"NCCL WARN {w}" for w in facts.warnings[:5]]
    return lines
