"""Traffic between nodes over TCP sockets, judged from NCCL's log alone (docs/methodology.md §9).

An LLM training job whose nodes talk over NET/Socket runs its collectives at a fraction of what an
InfiniBand/RoCE fabric or a cloud fabric's plugin carries, and that is nearly always why such a job
crawls. Unlike `nccl.net.socket_with_rdma` this needs no hardware picture: the log says which links
NCCL opened, where their ends ran, and often why it fell back (its IB transport found no device,
NCCL_IB_DISABLE or NCCL_NET chose it, no net plugin loaded), and each reason has its own thing to
check.

A link is between nodes when its two ends ran on different hosts by the log's own placement, or,
where the log does not place an end, unless NCCL counted one node (nNodes 1) or the log places both
ends on one host: NCCL opens a NET link inside a node only when P2P and SHM are both off. Without
any link line, a log whose processes ran on several hosts (or whose NCCL counted several nodes)
and that says "Using network Socket" is judged by that.
"""

from __future__ import annotations

from clusterbench.nccl.records import NcclFacts, NcclPeer
from clusterbench.units import ranks_text

NAMED = 4  # hosts named in a finding; the rest are counted

_ON_EACH_NODE = ("on each node `ibv_devinfo` lists the HCAs with their ports PORT_ACTIVE, the RDMA driver "
                 "(mlx5_ib, ib_uverbs) and rdma-core's libibverbs are installed, a container has /dev/infiniband "
                 "mounted, NCCL_IB_HCA (if set) names HCAs that exist")
_PLUGIN = ("a cloud fabric (AWS EFA, GCP GPUDirect-TCPX/TCPXO, Azure) needs its net plugin: libnccl-net.so on "
           "LD_LIBRARY_PATH or named by NCCL_NET_PLUGIN, and the plugin's own lines in the log say why it failed")


def is_socket(peer: NcclPeer) -> bool:
    return peer.transport == "NET" and "socket" in (peer.net or peer.via).lower()


def hosts_of(facts: NcclFacts) -> dict[int, str]:
    """Each rank the log places on exactly one host (a rank seen on two is left unplaced)."""
    seen: dict[int, set[str]] = {}
    for placed in facts.placement:
        for rank in placed.ranks:
            seen.setdefault(rank, set()).add(placed.host)
    return {rank: next(iter(hosts)) for rank, hosts in seen.items() if len(hosts) == 1}


def between_nodes(facts: NcclFacts, peer: NcclPeer, where: dict[int, str]) -> bool:
    """Whether a NET link joins two nodes, by the module's rule."""
    a, b = where.get(peer.src_rank), where.get(peer.dst_rank) if peer.dst_rank is not None else None
    if a and b:
        return a != b
    return facts.nodes != 1


def _ends(links: list[NcclPeer], where: dict[int, str]) -> str:
    """The hosts and ranks the links join: 'node0 (ranks 0, 2) and node2 (ranks 1, 3)'."""
    by_host: dict[str, set[int]] = {}
    for link in links:
        for rank in (link.src_rank, link.dst_rank):
            if rank is not None:
                by_host.setdefault(where.get(rank, ""), set()).add(rank)
    named = [f"{host} ({ranks_text(sorted(ranks))})"
             for host, ranks in by_host.items() if host]
    more = len(named) - NAMED
    named = named[:NAMED] + ([f"{more} more host(s)"] if more > 0 else [])
    if "" in by_host:
        named.append(f"{ranks_text(sorted(by_host['']))} on hosts this log does not show")
    return " and ".join(named)


def reasons(facts: NcclFacts) -> tuple[list[str], list[str]]:
    """Why the log says NCCL used sockets, and what to check for each reason."""
    why: list[str] = []
    check: list[str] = []
    if facts.settings.get("NCCL_NET", "").lower() == "socket":
        why.append("NCCL_NET=Socket chose it")
        check.append("unset NCCL_NET")
    if facts.settings.get("NCCL_IB_DISABLE") == "1":
        why.append("NCCL_IB_DISABLE=1 turned InfiniBand/RoCE off")
        check.append("unset NCCL_IB_DISABLE where the nodes have InfiniBand or RoCE")
    if facts.net.ib_said:
        why.append(f"NCCL's InfiniBand transport found nothing to use (\"{facts.net.ib_said}\")")
        check.append(_ON_EACH_NODE)
    if not why:
        why.append("the log does not say why NCCL's InfiniBand transport was not used "
                   "(NCCL_DEBUG_SUBSYS=INIT,NET shows it)")
        check.append(_ON_EACH_NODE)
    if facts.net.plugin:
        why.append(f"the net plugin {facts.net.plugin} loaded, yet NCCL used sockets")
        check.append(_PLUGIN)
    elif facts.net.plugin_said:
        why.append(f"no external net plugin took over (\"{facts.net.plugin_said}\")")
        check.append(_PLUGIN)
    return why, check


def value(facts: NcclFacts) -> tuple[float, str] | None:
    """`nccl.net.sockets_between_nodes`: 1 with the finding when traffic between nodes goes over TCP
    sockets, 0 when it goes over another network, None when the log shows no traffic between nodes."""
    where = hosts_of(facts)
    crossing = [p for p in facts.peers if p.transport == "NET" and between_nodes(facts, p, where)]
    sockets = [p for p in crossing if is_socket(p)]
    several = (facts.nodes or 0) > 1 or len(facts.hosts) > 1
    if sockets:
        pairs = {(p.src_rank, p.dst_rank) for p in sockets}
        vias = ", ".join(sorted({p.via for p in sockets}))
        found = f"{len(pairs)} link(s) between nodes over TCP sockets ({vias}) join {_ends(sockets, where)}"
    elif crossing:
        return 0.0, "between nodes: " + ", ".join(sorted({p.via for p in crossing}))
    elif several and (facts.net.name or "").lower() == "socket":
        nodes = f"{facts.nodes} nodes" if facts.nodes else f"{len(facts.hosts)} hosts"
        found = (f"NCCL chose TCP sockets (\"Using network Socket\") for a job on {nodes} "
                 f"({', '.join(facts.hosts[:NAMED])}{', ...' if len(facts.hosts) > NAMED else ''})")
    elif several and facts.net.name:
        return 0.0, f"between nodes: network {facts.net.name}"
    else:
        return None
    why, check = reasons(facts)
    return 1.0, f"{found}: {'; '.join(why)}. Check: {'; '.join(check)}"
