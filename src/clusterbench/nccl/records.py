"""NCCL's own account of a run, as its NCCL_DEBUG=INFO log tells it (the `nccl` section of run.json).

Which transport joined each pair of ranks, over which network and NICs, with how many channels,
along which rings and trees, and which algorithm and protocol each collective got. Anything the log
did not say is None or empty. Ranks are communicator ranks as NCCL numbers them: a log with several
communicators (a world group and its sub-groups) numbers each one from 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from clusterbench.results.codec import AT_LEAST_ONE, NONNEGATIVE
from clusterbench.results.run import Section

# Bounds here are what NCCL's log can say (its numbers are unsigned): a log is read as it is, so a
# stricter bound would make a folder unreadable after a run that recorded a strange log.


@dataclass(frozen=True)
class NcclRank:
    """One rank of a communicator, from its "comm ... rank R nranks N cudaDev D ... - Init" line."""

    rank: int = field(metadata=NONNEGATIVE)
    nranks: int = field(metadata=NONNEGATIVE)
    host: str | None = None
    cuda_dev: int | None = None
    nvml_dev: int | None = None
    bus_id: str | None = None  # as sysfs spells it (0000:1b:00.0); NCCL prints 1b000, and nothing before 2.5
    comm_id: str | None = None  # NCCL 2.18+: the communicator's id, the same on each of its ranks


@dataclass(frozen=True)
class NcclHost:
    """One host the log names: the ranks that wrote from it (of the largest communicator) and its processes."""

    host: str
    ranks: list[int] = field(default_factory=list, metadata=NONNEGATIVE)  # empty: its lines name no rank
    processes: int = field(default=0, metadata=NONNEGATIVE)  # distinct host:pid prefixes
    # the processes' ranks as the launcher tagged their lines (mpirun "[n] ", "[j,n]<stdout>:", srun -l "n: ")
    launcher_ranks: list[int] = field(default_factory=list, metadata=NONNEGATIVE)


@dataclass(frozen=True)
class NcclPeer:
    """A connection NCCL set up from one rank to another, with every channel that uses it."""

    src_rank: int = field(metadata=NONNEGATIVE)
    # None for a CollNet link: a rank into the network's own reduction
    dst_rank: int | None = field(metadata=NONNEGATIVE)
    transport: str  # P2P, SHM, NET or COLLNET
    via: str  # as NCCL wrote it after "via": P2P/CUMEM/read, SHM/direct/direct, NET/IB/0/GDRDMA, NET/Socket/0
    side: str | None = None  # NET and COLLNET: "send" or "receive", the end whose log said so
    channels: list[int] = field(default_factory=list, metadata=NONNEGATIVE)
    net: str | None = None  # NET and COLLNET: the network (IB, Socket, IBext_v8, ...)
    net_dev: int | None = None  # NET and COLLNET: the NIC's index in the "NET/... : Using" list
    proxy_rank: int | None = None  # PXN: the rank on the same node whose NIC carries the traffic
    gdr: bool | None = None  # NET and COLLNET: GPUDirect RDMA on this link


@dataclass(frozen=True)
class NcclNet:
    """The network NCCL used between nodes, as each host's log announced it."""

    name: str | None = None  # IB, Socket, IBext_v8, AWS Libfabric... ("Using network X", else the NET links')
    plugin: str | None = None  # an external net plugin NCCL loaded
    devices: list[str] = field(default_factory=list)  # RDMA ports NCCL may use: mlx5_0:1/IB, mlx5_6:1/RoCE
    oob: list[str] = field(default_factory=list)  # the IB plugin's out-of-band interfaces: ib0:192.168.11.1<0>
    interfaces: list[str] = field(default_factory=list)  # NET/Socket's interfaces (listed even when IB carries)
    bootstrap: list[str] = field(default_factory=list)  # the interfaces ranks found each other over
    gdr: bool | None = None  # True: every NET link used GPUDirect RDMA; False: some or all did not
    ib_said: str | None = None  # NCCL's IB transport found nothing: "NET/IB : No device found." as NCCL wrote it
    plugin_said: str | None = None  # why no external net plugin: "NET/Plugin : No plugin found (libnccl-net.so)..."


@dataclass(frozen=True)
class NcclRing:
    """One channel's ring, as rank 0 of the communicator printed it ("Channel 01/16 :  0  8 15 ...")."""

    channel: int
    ranks: list[int] = field(default_factory=list)  # in ring order, starting at rank 0


@dataclass(frozen=True)
class NcclAlgo:
    """One algorithm and protocol choice NCCL logged for a collective of a given size (TUNING, rank 0)."""

    size_bytes: int = field(metadata=NONNEGATIVE)
    algorithm: str  # TREE, RING, COLLNET_DIRECT, COLLNET_CHAIN, NVLS, NVLS_TREE, PAT
    protocol: str  # LL, LL128, SIMPLE
    op: str | None = None  # AllReduce, AllGather...; NCCL 2.20-2.22 did not say
    channel_lo: int | None = None  # NCCL 2.24+: the channels the collective ran on
    channel_hi: int | None = None
    # NCCL 2.20-2.23: its cost model's estimate, not a measurement
    model_time_us: float | None = field(default=None, metadata=NONNEGATIVE)
    calls: int = field(default=1, metadata=AT_LEAST_ONE)  # how many times the log repeated this choice


@dataclass(frozen=True)
class NcclFacts:
    """Everything read from one run's NCCL logs, all ranks merged."""

    version: str | None = None  # 2.21.5
    cuda_build: str | None = None  # the CUDA NCCL was built for ("+cuda12.4")
    cuda_driver: str | None = None  # the CUDA version the driver supports (cudaDriverVersion 12040 -> 12.4)
    hosts: list[str] = field(default_factory=list)
    # NCCL's own count of nodes in the largest communicator (its "nRanks N nNodes M" line, 2.20+)
    nodes: int | None = field(default=None, metadata=NONNEGATIVE)
    # NCCL's own count of ranks in the largest communicator (nRanks, nranks at Init, else its longest ring)
    nranks: int | None = field(default=None, metadata=NONNEGATIVE)
    local_ranks: list[int] = field(default_factory=list, metadata=NONNEGATIVE)  # its localRanks, per node
    placement: list[NcclHost] = field(default_factory=list)  # what the log itself shows: ranks by host
    ranks: list[NcclRank] = field(default_factory=list)
    peers: list[NcclPeer] = field(default_factory=list)
    net: NcclNet = field(default_factory=NcclNet)
    # collective channels (the most any communicator used)
    channels: int | None = field(default=None, metadata=NONNEGATIVE)
    p2p_channels: int | None = field(default=None, metadata=NONNEGATIVE)
    nvls_supported: bool | None = None  # NVLink SHARP multicast available on the GPUs
    # more than 0: NVLS was set up and may run
    nvls_channels: int | None = field(default=None, metadata=NONNEGATIVE)
    collnet: bool | None = None  # True: CollNet (SHARP) connected; False: NCCL said it is off or unsupported
    collnet_plugin: str | None = None
    rings: list[NcclRing] = field(default_factory=list)  # the first communicator's, by channel
    trees: list[str] = field(default_factory=list)  # each rank's "Trees" line as NCCL wrote it
    algorithms: list[NcclAlgo] = field(default_factory=list)
    settings: dict[str, str] = field(default_factory=dict)  # NCCL_* variables the log reports as set
    warnings: list[str] = field(default_factory=list)  # NCCL WARN lines: "source:line message"


# Read from the ranks' NCCL logs once the job ends (runtime/harness.py), or by `diagnose`.
NCCL = Section("nccl", NcclFacts | None)
