"""NCCL's debug log (NCCL_DEBUG=INFO, subsystems INIT, GRAPH, TUNING, NET) read into typed facts.

A line NCCL writes is `[timestamp ]host:pid:tid [dev] NCCL INFO message`; launchers and pastes add
their own prefixes ("[1] " from mpirun --tag-output, a logger's timestamp) and some logs reach us
with NCCL's prefix stripped, so the message is found wherever "NCCL INFO" is, or is the whole line.
Messages are matched against the formats NCCL 2.4 to 2.29 print (src/transport/*.cc, init.cc,
enqueue.cc); a line that matches none is ignored, so any text parses and no line raises.

A log of any size parses in flat memory and in time linear in its size: files are read a line at
a time, a line no longer than NCCL ever writes (LINE_WIDTH), what repeats is kept once, of each
kind of fact only the first MAX_KEPT, and every pattern costs a pass or two over a line.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from clusterbench.inputs import files
from clusterbench.results.nccl import NcclAlgo, NcclFacts, NcclNet, NcclPeer, NcclRank, NcclRing

# NCCL formats each line in a 1024-byte buffer (src/debug.cc); launchers' tags and timestamps add a
# few dozen characters. A longer line is not NCCL's, and is cut to this.
LINE_WIDTH = 4096
# Of each kind of fact (hosts, ranks, links, warnings ...) the first this many distinct ones are
# kept: a thousand-rank job's start-up has a few thousand links, and no log can grow the facts
# past this.
MAX_KEPT = 65_536
# Patterns searched anywhere start at a word's first character (the lookbehinds), so a long run of
# one character costs one pass over it, not one per character.
_LOGGED = re.compile(r"NCCL (INFO|WARN) ?(.*)$")
_PREFIX = re.compile(r"(?<![^\s:])([^\s:]+):\d+:\d+ \[\d+\] ")
_SOURCE = re.compile(r"(?<!\S)(\S+:\d+)(?: \(\w+\))? *$")  # the WARN's "file.cc:123 (function)"
_COMM_ID = re.compile(r"\bcommId (0x[0-9a-fA-F]+)")
_INIT = re.compile(r" - Init (?:START|COMPLETE)")
_VERSION = re.compile(r"NCCL version (\d+\.\d+\.\d+)\S*?(?:\+cuda(\d+\.\d+))?(?:\s|$)")

# NCCL's enum order (nccl_common.h); 2.20-2.23 log the numbers, 2.24+ the names.
_ALGORITHMS = ("TREE", "RING", "COLLNET_DIRECT", "COLLNET_CHAIN", "NVLS", "NVLS_TREE", "PAT")
_PROTOCOLS = ("LL", "LL128", "SIMPLE")
_TRANSPORTS = {"P2P": "P2P", "SHM": "SHM", "NET": "NET", "COLLNET": "COLLNET", "direct shared memory": "SHM"}

_PeerKey = tuple[int, int | None, str, str, str | None]  # src, dst, transport, via, side
_AlgoKey = tuple[str | None, int, str, str, int | None, int | None]  # op, bytes, algorithm, protocol, lo, hi


@dataclass
class _Log:
    """What the lines said so far; `_facts` turns it into the record."""

    version: str | None = None
    cuda_build: str | None = None
    cuda_driver: str | None = None
    hosts: dict[str, None] = field(default_factory=dict)
    nodes: int | None = None
    ranks: dict[tuple[str | None, int], NcclRank] = field(default_factory=dict)
    peers: dict[_PeerKey, set[int]] = field(default_factory=dict)
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
    algorithms: dict[_AlgoKey, NcclAlgo] = field(default_factory=dict)
    algorithm_calls: Counter[_AlgoKey] = field(default_factory=Counter)
    settings: dict[str, str] = field(default_factory=dict)
    warnings: dict[str, None] = field(default_factory=dict)
    named: set[str] = field(default_factory=set)  # the communicators the lines of one source named


_Handler = Callable[[_Log, re.Match[str], str | None], None]


@dataclass(frozen=True)
class Source:
    """What one file said of where it comes from: whether any line was NCCL's, and the
    communicators its processes set up (NCCL 2.12 on prints each one's commId)."""

    path: Path
    nccl: bool
    comm_ids: frozenset[str]


def parse(log: str | Iterable[str]) -> NcclFacts:
    """The facts in one NCCL log (or several concatenated), its text or its lines; text with no NCCL
    lines gives empty facts."""
    state = _Log()
    _feed(state, log.splitlines() if isinstance(log, str) else log)
    return _facts(state)


def read_files(paths: Iterable[str | Path]) -> tuple[NcclFacts, list[Source]]:
    """The facts in log files, merged into one set (every line carries its own host and ranks, so
    the files read as one log), and what each file said of where it comes from.

    Files are read a line at a time: memory stays flat whatever their size. A file that cannot be
    read is a one-line UsageError.
    """
    state, sources = _Log(), []
    for path in map(Path, paths):
        said = _feed(state, files.lines(path, "NCCL log", LINE_WIDTH))
        sources.append(Source(path, said, frozenset(state.named)))
    return _facts(state), sources


def _feed(log: _Log, lines: Iterable[str]) -> bool:
    """Read `lines` into `log`; whether any was NCCL's. `log.named` holds the communicators they named."""
    log.named = set()
    said = False
    for line in lines:
        said = _read(log, line[:LINE_WIDTH].strip()) or said
    return said


def _read(log: _Log, line: str) -> bool:
    version = _VERSION.search(line)
    if version and log.version is None:
        log.version, log.cuda_build = version.group(1), version.group(2)
    logged = _LOGGED.search(line)
    message = logged.group(2).strip() if logged else line
    before = line[: logged.start()] if logged else ""
    prefix = _PREFIX.search(before)
    host = prefix.group(1) if prefix else None
    if host:
        _keep(log.hosts, host)
    if logged and logged.group(1) == "WARN":
        source = _SOURCE.search(before[prefix.end() :] if prefix else before)
        _keep(log.warnings, f"{source.group(1)} {message}".strip() if source else message)
    for pattern, handle in _HANDLERS:
        match = pattern.search(message)
        if match:
            handle(log, match, host)
            return True
    return bool(version or logged)


def _keep(store: dict[Any, Any], key: Any, value: Any = None) -> Any:
    """The entry of `store` for `key`, made from `value` while the store holds fewer than MAX_KEPT;
    None once it is full."""
    if key not in store:
        if len(store) >= MAX_KEPT:
            return None
        store[key] = value
    return store[key]


def _bus_id(value: str | None) -> str | None:
    """NCCL's bus id number (busIdToInt64 of 0000:1b:00.0 is 0x1b000) in the form sysfs and NVML print."""
    if value is None:
        return None
    n = int(value, 16)
    return f"{n >> 20:04x}:{(n >> 12) & 0xFF:02x}:{(n >> 4) & 0xFF:02x}.{n & 0xF:x}"


def _on_rank(log: _Log, m: re.Match[str], host: str | None) -> None:
    # Only a communicator set up describes it ("Destroy COMPLETE" prints the same head).
    init = _INIT.search(m.string, m.end())
    if not init:
        return
    comm_id = _COMM_ID.search(m.string, m.end(), init.start())
    rank = NcclRank(
        rank=int(m["rank"]),
        nranks=int(m["nranks"]),
        host=host,
        cuda_dev=int(m["cuda"]),
        nvml_dev=int(m["nvml"]) if m["nvml"] else None,
        bus_id=_bus_id(m["bus"]),
        comm_id=comm_id[1] if comm_id else None,
    )
    _keep(log.ranks, (rank.comm_id, rank.rank), rank)
    if rank.comm_id and len(log.named) < MAX_KEPT:
        log.named.add(rank.comm_id)


def _on_nodes(log: _Log, m: re.Match[str], host: str | None) -> None:
    log.nodes = max(log.nodes or 0, int(m[1]))


def _on_peer(log: _Log, m: re.Match[str], host: str | None) -> None:
    via = m["via"].strip()
    head = next((name for name in _TRANSPORTS if via.startswith(name)), via.split("/", 1)[0])
    dst = int(m["dst"]) if m["dst"] else None
    channels = _keep(log.peers, (int(m["src"]), dst, _TRANSPORTS.get(head, head), via, m["side"]), set())
    if channels is not None:
        channels.add(int(m["channel"]))


def _on_ring(log: _Log, m: re.Match[str], host: str | None) -> None:
    # Rank 0 of each communicator prints its rings; keep the first communicator's, whole.
    channel = int(m["channel"])
    if channel in log.rings:
        log.rings_done = True
    if not log.rings_done:
        log.rings[channel] = [int(rank) for rank in m["ranks"].split()]
        if m["total"]:
            log.ring_total = max(log.ring_total or 0, int(m["total"]))


def _on_tree(log: _Log, m: re.Match[str], host: str | None) -> None:
    _keep(log.trees, m[1].strip())


def _on_channels(log: _Log, m: re.Match[str], host: str | None) -> None:
    # Since 2.21 the "collnet channels" figure repeats the coll channel count, so it says nothing of CollNet.
    log.channels = max(log.channels or 0, int(m["coll"]))
    log.p2p_channels = max(log.p2p_channels or 0, int(m["p2p"]))
    if m["nvls"] is not None:
        log.nvls_channels = max(log.nvls_channels or 0, int(m["nvls"]))


def _on_nvls(log: _Log, m: re.Match[str], host: str | None) -> None:
    log.nvls.add(m[1] is None)


def _on_collnet(log: _Log, m: re.Match[str], host: str | None) -> None:
    log.collnet.add("Connected" in m[0])


def _on_collnet_plugin(log: _Log, m: re.Match[str], host: str | None) -> None:
    log.collnet_plugin = log.collnet_plugin or m[1]


def _on_net_plugin(log: _Log, m: re.Match[str], host: str | None) -> None:
    log.net_plugin = log.net_plugin or m[1]


def _on_network(log: _Log, m: re.Match[str], host: str | None) -> None:
    log.net_name = log.net_name or m[1].strip()


_DEVICE = re.compile(r"(?<![\w.\-])[\w.\-]+:\d+/\w+(?:/\w+)*")  # "[0]mlx5_0:1/RoCE": device:port/link


def _on_ib(log: _Log, m: re.Match[str], host: str | None) -> None:
    for device in _DEVICE.findall(m["devices"]):
        _keep(log.devices, device)
    if m["oob"]:
        _keep(log.oob, m["oob"].strip())


def _on_socket(log: _Log, m: re.Match[str], host: str | None) -> None:
    for interface in re.split(r"\[\d+\]", m[1]):
        if interface.strip():
            _keep(log.interfaces, interface.strip())


def _on_bootstrap(log: _Log, m: re.Match[str], host: str | None) -> None:
    _keep(log.bootstrap, re.sub(r"^\[\d+\]", "", m[1].strip()))


def _on_gdr(log: _Log, m: re.Match[str], host: str | None) -> None:
    (log.gdr_hca if m["what"] == "HCA" else log.gdr_said).add(m["state"] == "Enabled")


def _on_setting(log: _Log, m: re.Match[str], host: str | None) -> None:
    value = m["value"].strip()
    if value.endswith(".") and value[:-1].lstrip("-").isdigit():  # numeric parameters print "3."
        value = value[:-1]
    _keep(log.settings, m["name"], value)


def _on_driver(log: _Log, m: re.Match[str], host: str | None) -> None:
    code = int(m[1])
    log.cuda_driver = log.cuda_driver or f"{code // 1000}.{code % 1000 // 10}"


def _on_algo(log: _Log, m: re.Match[str], host: str | None) -> None:
    algorithm, protocol = m["algo"].upper(), m["proto"].upper()
    if algorithm.isdecimal() and int(algorithm) < len(_ALGORITHMS):
        algorithm = _ALGORITHMS[int(algorithm)]
    if protocol.isdecimal() and int(protocol) < len(_PROTOCOLS):
        protocol = _PROTOCOLS[int(protocol)]
    lo = int(m["lo"]) if m["lo"] else None
    hi = int(m["hi"]) if m["hi"] else None
    key: _AlgoKey = (m["op"], int(m["bytes"]), algorithm, protocol, lo, hi)
    if key not in log.algorithms:  # a TUNING line per call: most repeat one already seen
        algo = NcclAlgo(size_bytes=key[1], algorithm=algorithm, protocol=protocol, op=m["op"], channel_lo=lo,
                        channel_hi=hi, model_time_us=float(m["time"]) if m["time"] else None)
        if _keep(log.algorithms, key, algo) is None:
            return
    log.algorithm_calls[key] += 1


# Numbers are as long as NCCL's can be, so a damaged log's 5,000-digit number matches nothing:
_N = r"\d{1,10}"  # a rank, a device, a count: NCCL prints int32s
_CH = r"\d{1,3}"  # a channel, or how many: below MAXCHANNELS (64 in 2.29)

_HANDLERS: tuple[tuple[re.Pattern[str], _Handler], ...] = (
    (
        re.compile(
            rf"^(?:Channel|Ring) (?P<channel>{_CH})(?:/{_CH})? : (?P<src>{_N})(?:\[\w+\])? -> (?P<dst>{_N})(?:\[\w+\])?"
            r"(?: \[(?P<side>send|receive)\])? via (?P<via>.+)$"
        ),
        _on_peer,
    ),
    (
        re.compile(
            rf"^CollNet (?P<channel>{_CH})(?:/{_CH})? : (?P<src>{_N})(?P<dst>) \[(?P<side>send|receive)\]"
            r" via (?P<via>.+)$"
        ),
        _on_peer,
    ),
    (re.compile(rf"^Channel (?P<channel>{_CH})(?:/(?P<total>{_CH}))? :(?P<ranks>(?:\s+{_N})+)$"), _on_ring),
    (re.compile(r"^Trees (.+)$"), _on_tree),
    (
        re.compile(  # what follows, " ... commId 0x... - Init COMPLETE", is read by _on_rank
            rf"\bcomm (?:0x[0-9a-fA-F]+|\(nil\)) rank (?P<rank>{_N}) nranks (?P<nranks>{_N}) cudaDev (?P<cuda>{_N})"
            rf"(?: nvmlDev (?P<nvml>{_N}))?(?: busId (?P<bus>[0-9a-fA-F]{{1,16}}))?"
        ),
        _on_rank,
    ),
    (re.compile(rf"^comm \S+ rank \d+ nRanks \d+ nNodes ({_N})"), _on_nodes),
    (
        re.compile(
            rf"^(?P<coll>{_CH}) coll channels, (?:\d+ collnet channels, )?(?:(?P<nvls>{_CH}) nvls channels, )?"
            rf"(?P<p2p>{_CH}) p2p channels"
        ),
        _on_channels,
    ),
    (
        re.compile(
            r"^(?:(?P<op>[A-Za-z]+): )?(?P<bytes>\d{1,20}) Bytes -> Algo (?P<algo>\w+) proto (?P<proto>\w+)"
            rf"(?: channel\{{Lo\.\.Hi\}}=\{{(?P<lo>{_CH})\.\.(?P<hi>{_CH})\}})?"
            r"(?: time (?P<time>\d{1,15}(?:\.\d{0,15})?)(?![\d.]))?"  # a negative time is no estimate
        ),
        _on_algo,
    ),
    (re.compile(r"^NVLS multicast support is (not )?available"), _on_nvls),
    (
        re.compile(r"^(?:rank \d+ )?Connected (?:CollNet|collnet)|CollNet is not supported|disabling CollNet"),
        _on_collnet,
    ),
    (re.compile(r"^NET/Plugin ?: Loaded coll(?:net)? plugin (.+?)(?: \(v\d+\))?$"), _on_collnet_plugin),
    (re.compile(r"^NET/Plugin ?: Loaded net plugin (.+?)(?: \(v\d+\))?$"), _on_net_plugin),
    (re.compile(r"^Using network (.+)$"), _on_network),
    (re.compile(r"^NET/IB ?: Using(?P<devices>.*?)(?:; OOB (?P<oob>.+))?$"), _on_ib),
    (re.compile(r"^NET/Socket ?: Using (\[\d+\].+)$"), _on_socket),
    (re.compile(r"^Bootstrap ?: Using (\S+)"), _on_bootstrap),
    (re.compile(r"GPU Direct RDMA (?P<state>Enabled|Disabled) for (?P<what>GPU|HCA)"), _on_gdr),
    (re.compile(r"^(?P<name>NCCL_[A-Z0-9_]+) set (?:by environment )?to (?P<value>.*)$"), _on_setting),
    (re.compile(rf"^cudaDriverVersion ({_N})"), _on_driver),
)


def _peer(key: _PeerKey, channels: set[int]) -> NcclPeer:
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


def _gdr(log: _Log, peers: list[NcclPeer]) -> bool | None:
    """What carried the NET traffic, else what NCCL decided per GPU and NIC, else what the NICs can do."""
    links = [p.gdr for p in peers if p.transport == "NET"]
    said = links or log.gdr_said
    if said:
        return all(said)
    return False if log.gdr_hca and not any(log.gdr_hca) else None


def _collnet(log: _Log, peers: list[NcclPeer]) -> bool | None:
    if any(p.transport == "COLLNET" for p in peers):
        return True
    return any(log.collnet) if log.collnet else None


def _facts(log: _Log) -> NcclFacts:
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
