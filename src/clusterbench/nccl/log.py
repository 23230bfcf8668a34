"""NCCL's debug log (NCCL_DEBUG=INFO, subsystems INIT, GRAPH, TUNING, NET) read into typed facts.

A line NCCL writes is `[timestamp ]host:pid:tid [dev] NCCL INFO message`; launchers and pastes add
their own prefixes (a logger's timestamp; the launcher's rank of the process: "[1] " from MPICH's
-prepend-rank, "[1,3]<stdout>:" from Open MPI's --tag-output, "3: " from srun -l) and some logs
reach us with NCCL's prefix stripped, so the message is found wherever "NCCL INFO" is, or is the
whole line. The host and pid of the prefix name the process a line comes from, the launcher's tag its
rank in the job; many processes and hosts may write into one file, or each into a file of its own.

Where a rank runs is read from the lines a rank writes about itself: its "Init START/COMPLETE" and
"nRanks ... nNodes" lines, the sending end of a link it set up (the receiving end of a NET
"[receive]" link), its own place in "Trees". A line that names no communicator size (links, trees)
is trusted only while the log names one size of communicator: ranks of a sub-communicator are
numbered from 0 again and would land on the wrong host (state.facts decides).
Messages are matched against the formats NCCL 2.4 to 2.29 print (src/transport/*.cc, init.cc,
enqueue.cc); a line that matches none is ignored, so any text parses and no line raises.

A log of any size parses in flat memory and in time linear in its size: files are read a line at
a time, a line no longer than NCCL ever writes (LINE_WIDTH), what repeats is kept once, of each
kind of fact only the first MAX_KEPT, and every pattern costs a pass or two over a line.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clusterbench.inputs import files
from clusterbench.nccl.records import NcclAlgo, NcclFacts, NcclRank
from clusterbench.nccl.state import AlgoKey, LogState, facts

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
_PREFIX = re.compile(r"(?<![^\s:])([^\s:]+):(\d{1,10}):\d+ \[\d+\] ")
# The launcher's rank of the process, at the very start of the line: Open MPI's "[job,rank]<stdout>:",
# MPICH's "[rank] ", srun -l's "rank: ".
_TAG = re.compile(r"^(?:\[\d{1,10},(\d{1,10})\]<std(?:out|err)>: ?|\[(\d{1,10})\] |\s*(\d{1,10}): )")
_OWN_TREE = re.compile(r"->(\d{1,10})->")  # "Trees [0] 13/-1/-1->12->4": the middle rank is the writer's
_SOURCE = re.compile(r"(?<!\S)(\S+:\d+)(?: \(\w+\))? *$")  # the WARN's "file.cc:123 (function)"
_COMM_ID = re.compile(r"\bcommId (0x[0-9a-fA-F]+)")
_INIT = re.compile(r" - Init (?:START|COMPLETE)")
_VERSION = re.compile(r"NCCL version (\d+\.\d+\.\d+)\S*?(?:\+cuda(\d+\.\d+))?(?:\s|$)")

# NCCL's enum order (nccl_common.h); 2.20-2.23 log the numbers, 2.24+ the names.
_ALGORITHMS = ("TREE", "RING", "COLLNET_DIRECT", "COLLNET_CHAIN", "NVLS", "NVLS_TREE", "PAT")
_PROTOCOLS = ("LL", "LL128", "SIMPLE")
_TRANSPORTS = {"P2P": "P2P", "SHM": "SHM", "NET": "NET", "COLLNET": "COLLNET", "direct shared memory": "SHM"}

_Handler = Callable[[LogState, re.Match[str], str | None], None]


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
    state = LogState()
    _feed(state, log.splitlines() if isinstance(log, str) else log)
    return facts(state)


def read_files(paths: Iterable[str | Path]) -> tuple[NcclFacts, list[Source]]:
    """The facts in log files, merged into one set (every line carries its own host and ranks, so
    the files read as one log), and what each file said of where it comes from.

    Files are read a line at a time: memory stays flat whatever their size. A file that cannot be
    read is a one-line UsageError.
    """
    state, sources = LogState(), []
    for path in map(Path, paths):
        said = _feed(state, files.lines(path, "NCCL log", LINE_WIDTH))
        sources.append(Source(path, said, frozenset(state.named)))
    return facts(state), sources


def _feed(log: LogState, lines: Iterable[str]) -> bool:
    """Read `lines` into `log`; whether any was NCCL's. `log.named` holds the communicators they named."""
    log.named = set()
    said = False
    for line in lines:
        said = _read(log, line[:LINE_WIDTH].strip()) or said
    return said


def _read(log: LogState, line: str) -> bool:
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
        tag = _TAG.match(before)
        launched = next((int(t) for t in tag.groups() if t is not None), None) if tag else None
        process = (host, int(prefix.group(2)))
        _keep(log.processes, process)
        if launched is not None and process in log.processes:
            log.processes[process] = launched
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


def _place(log: LogState, host: str | None, rank: int, nranks: int | None = None) -> None:
    """The writer of a line on `host` is `rank` (of a communicator of `nranks`, where the line says)."""
    if host is None:
        return
    if nranks is None:
        _keep(log.placed, (host, rank))
    else:
        _keep(log.sized, (host, rank, nranks))


def _bus_id(value: str | None) -> str | None:
    """NCCL's bus id number (busIdToInt64 of 0000:1b:00.0 is 0x1b000) in the form sysfs and NVML print."""
    if value is None:
        return None
    n = int(value, 16)
    return f"{n >> 20:04x}:{(n >> 12) & 0xFF:02x}:{(n >> 4) & 0xFF:02x}.{n & 0xF:x}"


def _on_rank(log: LogState, m: re.Match[str], host: str | None) -> None:
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
    _place(log, host, rank.rank, rank.nranks)
    if rank.comm_id and len(log.named) < MAX_KEPT:
        log.named.add(rank.comm_id)


def _on_nodes(log: LogState, m: re.Match[str], host: str | None) -> None:
    _keep(log.shapes, (int(m["nranks"]), int(m["nodes"]), int(m["local"])))
    _place(log, host, int(m["rank"]), int(m["nranks"]))


def _on_peer(log: LogState, m: re.Match[str], host: str | None) -> None:
    via = m["via"].strip()
    head = next((name for name in _TRANSPORTS if via.startswith(name)), via.split("/", 1)[0])
    dst = int(m["dst"]) if m["dst"] else None
    channels = _keep(log.peers, (int(m["src"]), dst, _TRANSPORTS.get(head, head), via, m["side"]), set())
    if channels is not None:
        channels.add(int(m["channel"]))
    # NCCL prints a link at its sending end, but a NET link's "[receive]" at its receiving end.
    own = dst if m["side"] == "receive" else int(m["src"])
    if own is not None:
        _place(log, host, own)


def _on_ring(log: LogState, m: re.Match[str], host: str | None) -> None:
    # Rank 0 of each communicator prints its rings; keep the first communicator's, whole.
    channel = int(m["channel"])
    if channel in log.rings:
        log.rings_done = True
    ranks = m["ranks"].split()
    log.ring_size = max(log.ring_size or 0, len(ranks))
    if not log.rings_done:
        log.rings[channel] = [int(rank) for rank in ranks]
        if m["total"]:
            log.ring_total = max(log.ring_total or 0, int(m["total"]))


def _on_tree(log: LogState, m: re.Match[str], host: str | None) -> None:
    _keep(log.trees, m[1].strip())
    own = _OWN_TREE.search(m[1])
    if own:
        _place(log, host, int(own[1]))


def _on_channels(log: LogState, m: re.Match[str], host: str | None) -> None:
    # Since 2.21 the "collnet channels" figure repeats the coll channel count, so it says nothing of CollNet.
    log.channels = max(log.channels or 0, int(m["coll"]))
    log.p2p_channels = max(log.p2p_channels or 0, int(m["p2p"]))
    if m["nvls"] is not None:
        log.nvls_channels = max(log.nvls_channels or 0, int(m["nvls"]))


def _on_nvls(log: LogState, m: re.Match[str], host: str | None) -> None:
    log.nvls.add(m[1] is None)


def _on_collnet(log: LogState, m: re.Match[str], host: str | None) -> None:
    log.collnet.add("Connected" in m[0])


def _on_collnet_plugin(log: LogState, m: re.Match[str], host: str | None) -> None:
    log.collnet_plugin = log.collnet_plugin or m[1]


def _on_net_plugin(log: LogState, m: re.Match[str], host: str | None) -> None:
    log.net_plugin = log.net_plugin or m[1]


def _on_plugin_missing(log: LogState, m: re.Match[str], host: str | None) -> None:
    log.plugin_said = log.plugin_said or m[0].strip()


def _on_ib_missing(log: LogState, m: re.Match[str], host: str | None) -> None:
    log.ib_said = log.ib_said or m[0].strip()


def _on_plugin_failed(log: LogState, m: re.Match[str], host: str | None) -> None:
    # 2.29+ treats IB and Socket as plugins too: "Failed to initialize NET plugin IB" is IB's own failure.
    if m[1] == "IB":
        _on_ib_missing(log, m, host)
    elif m[1] != "Socket":
        _on_plugin_missing(log, m, host)


def _on_network(log: LogState, m: re.Match[str], host: str | None) -> None:
    log.net_name = log.net_name or m[1].strip()


_DEVICE = re.compile(r"(?<![\w.\-])[\w.\-]+:\d+/\w+(?:/\w+)*")  # "[0]mlx5_0:1/RoCE": device:port/link


def _on_ib(log: LogState, m: re.Match[str], host: str | None) -> None:
    for device in _DEVICE.findall(m["devices"]):
        _keep(log.devices, device)
    if m["oob"]:
        _keep(log.oob, m["oob"].strip())


def _on_socket(log: LogState, m: re.Match[str], host: str | None) -> None:
    for interface in re.split(r"\[\d+\]", m[1]):
        if interface.strip():
            _keep(log.interfaces, interface.strip())


def _on_bootstrap(log: LogState, m: re.Match[str], host: str | None) -> None:
    _keep(log.bootstrap, re.sub(r"^\[\d+\]", "", m[1].strip()))


def _on_gdr(log: LogState, m: re.Match[str], host: str | None) -> None:
    (log.gdr_hca if m["what"] == "HCA" else log.gdr_said).add(m["state"] == "Enabled")


def _on_setting(log: LogState, m: re.Match[str], host: str | None) -> None:
    value = m["value"].strip()
    if value.endswith(".") and value[:-1].lstrip("-").isdigit():  # numeric parameters print "3."
        value = value[:-1]
    _keep(log.settings, m["name"], value)


def _on_driver(log: LogState, m: re.Match[str], host: str | None) -> None:
    code = int(m[1])
    log.cuda_driver = log.cuda_driver or f"{code // 1000}.{code % 1000 // 10}"


def _on_algo(log: LogState, m: re.Match[str], host: str | None) -> None:
    algorithm, protocol = m["algo"].upper(), m["proto"].upper()
    if algorithm.isdecimal() and int(algorithm) < len(_ALGORITHMS):
        algorithm = _ALGORITHMS[int(algorithm)]
    if protocol.isdecimal() and int(protocol) < len(_PROTOCOLS):
        protocol = _PROTOCOLS[int(protocol)]
    lo = int(m["lo"]) if m["lo"] else None
    hi = int(m["hi"]) if m["hi"] else None
    key: AlgoKey = (m["op"], int(m["bytes"]), algorithm, protocol, lo, hi)
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
    (
        re.compile(rf"^comm \S+ rank (?P<rank>{_N}) nRanks (?P<nranks>{_N}) nNodes (?P<nodes>{_N})"
                   rf" localRanks (?P<local>{_N})"),
        _on_nodes,
    ),
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
    # Why no external net plugin carries the traffic, in the words of NCCL 2.4 to 2.29.
    (re.compile(r"^NET/Plugin ?: ?.*(?:No plugin found|Plugin load|Could not find|Using internal|using internal).*$"),
     _on_plugin_missing),
    (re.compile(r"^(?:NET/IB ?: No device found|NET/IB ?: No IP interface found|Failed to open libibverbs).*$"),
     _on_ib_missing),
    (re.compile(r"^Failed to initialize NET plugin (\S+)"), _on_plugin_failed),
    (re.compile(r"^NET/IB ?: Using(?P<devices>.*?)(?:; OOB (?P<oob>.+))?$"), _on_ib),
    (re.compile(r"^NET/Socket ?: Using (\[\d+\].+)$"), _on_socket),
    (re.compile(r"^Bootstrap ?: Using (\S+)"), _on_bootstrap),
    (re.compile(r"GPU Direct RDMA (?P<state>Enabled|Disabled) for (?P<what>GPU|HCA)"), _on_gdr),
    (re.compile(r"^(?P<name>NCCL_[A-Z0-9_]+) set (?:by environment )?to (?P<value>.*)$"), _on_setting),
    (re.compile(rf"^cudaDriverVersion ({_N})"), _on_driver),
)
