"""NCCL's debug log read into facts, on real logs from public issues (tests/data/nccl/PROVENANCE.md)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from clusterbench.nccl.log import parse, read_files
from clusterbench.nccl.records import NcclAlgo, NcclFacts, NcclPeer, NcclRank, NcclRing
from clusterbench.results import codec

DATA = Path(__file__).parent / "data" / "nccl"
FIXTURES = sorted(DATA.glob("*.log"))


def facts(name: str) -> NcclFacts:
    return parse((DATA / name).read_text())


def peer(f: NcclFacts, src: int, dst: int | None, side: str | None = None) -> NcclPeer:
    (found,) = [p for p in f.peers if (p.src_rank, p.dst_rank, p.side) == (src, dst, side)]
    return found


def test_every_fixture_is_listed_in_the_provenance() -> None:
    provenance = (DATA / "PROVENANCE.md").read_text()
    assert len(FIXTURES) >= 5
    for fixture in FIXTURES:
        assert fixture.name in provenance


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda p: p.name)
def test_facts_survive_run_json(fixture: Path) -> None:
    # The facts become run.json's nccl section: they must go through the codec and back unchanged.
    f = parse(fixture.read_text())
    assert f != NcclFacts()
    assert codec.load(NcclFacts, json.loads(json.dumps(codec.dump(f)))) == f


def test_nccl_2_4_sockets_between_64_aws_instances() -> None:
    f = facts("nccl-2.4.7-aws-socket-64ranks.log")
    assert (f.version, f.cuda_build) == ("2.4.7", "9.2")
    assert f.net.name == "Socket" and f.net.gdr is False and f.net.devices == []
    assert "ens3:172.31.10.182<0>" in f.net.interfaces
    assert {p.via for p in f.peers} == {"NET/Socket/0"}
    link = peer(f, 35, 34, "send")
    assert (link.transport, link.net, link.net_dev, link.channels) == ("NET", "Socket", 0, [0])
    assert NcclRank(rank=15, nranks=64, host="ip-172-31-7-247", cuda_dev=0, nvml_dev=0) in f.ranks
    assert "[0] 22->23->-1/-1/-1" in f.trees
    assert {"ip-172-31-0-119", "ip-172-31-7-227"} <= set(f.hosts)


def test_nccl_2_4_infiniband_without_gpudirect_rdma() -> None:
    f = facts("nccl-2.4.7-ib-gdr-disabled.log")
    assert (f.version, f.cuda_build) == ("2.4.7", "10.0")
    assert f.net.name == "IB" and f.net.devices == ["mlx5_0:1/IB"] and f.net.oob == ["ib0:192.168.11.1<0>"]
    assert f.net.gdr is False
    assert peer(f, 6, 2, "send") == NcclPeer(
        src_rank=6, dst_rank=2, transport="NET", via="NET/IB/0", side="send", channels=[0], net="IB", net_dev=0,
        gdr=False,
    )
    assert peer(f, 3, 1).via == "P2P/IPC"
    assert f.settings == {"NCCL_IB_DISABLE": "0"}


def test_nccl_2_10_roce_with_gdrdma_between_two_a800_nodes() -> None:
    f = facts("nccl-2.10.3-a800-roce-gdrdma.log")
    assert (f.version, f.cuda_build, f.hosts) == ("2.10.3", "11.0", ["nodea", "nodeb"])
    assert f.net.name == "IB" and f.net.devices == ["mlx5_6:1/RoCE"] and f.net.gdr is True
    assert f.net.bootstrap == ["xgbe4:nodea_ip<0>", "xgbe0:nodeb_xgbe0_ip<0>"]
    assert peer(f, 4, 12, "send").via == "NET/IB/0/GDRDMA" and peer(f, 4, 12, "send").channels == [0, 1]
    assert peer(f, 5, 4).via == "P2P/direct pointer/read" and peer(f, 5, 4).transport == "P2P"
    assert (f.channels, f.p2p_channels) == (2, 2)
    assert f.rings == [NcclRing(channel=0, ranks=[0, 7, 6, 5, 12, 11, 10, 9, 8, 15, 14, 13, 4, 3, 2, 1])]
    assert "[0] 13/-1/-1->12->4 [1] 13/4/-1->12->-1" in f.trees
    assert f.settings == {"NCCL_IB_GID_INDEX": "3"}
    assert f.collnet is False
    assert f.warnings == [
        "graph/tuning.cc:187 CollNet is not supported or fails to initialize, ignoring NCCL_ALGO=COLLNET"
    ]


def test_mpirun_tagged_lines_with_sockets_between_nodes_and_shm_within() -> None:
    f = facts("nccl-2.17-2.18-socket-shm-mpirun-tagged.log")
    assert f.version is None and f.cuda_driver == "11.7"
    assert f.hosts == ["node0", "node2"]  # mpirun's "[1] " tag is not the host
    assert peer(f, 2, 0) == NcclPeer(src_rank=2, dst_rank=0, transport="SHM", via="SHM/direct/direct", channels=[0, 1])
    assert peer(f, 0, 1, "send").net == "Socket"
    assert f.net.name == "Socket" and f.net.gdr is False
    assert (f.channels, f.nvls_channels) == (2, 0)
    assert f.settings == {"NCCL_SOCKET_IFNAME": "en,eth,em,bond"}
    assert f.net.bootstrap == ["enp10s0:10.10.7.107<0>", "enp10s0:10.10.7.109<0>"]


def test_pcie_only_l20_node_shm_in_one_run_p2p_in_the_other() -> None:
    shm = facts("nccl-2.19-2.21-l20-pcie-shm.log")
    assert {p.transport for p in shm.peers} == {"SHM"}
    assert peer(shm, 0, 4).channels == [0, 1]
    assert shm.ranks == []  # "Destroy COMPLETE" lines describe a teardown, not the communicator
    p2p = facts("nccl-2.19-2.21-l20-pcie-p2p.log")
    assert {p.via for p in p2p.peers} == {"P2P/direct pointer"}
    assert peer(p2p, 2, 3).channels == [0, 1]
    assert (p2p.nodes, p2p.nvls_supported) == (1, False)
    assert p2p.net == NcclFacts().net


def test_nccl_2_20_tuning_choices_are_named_and_counted() -> None:
    f = facts("nccl-2.20-2.22-h100-tuning-mpirun-tagged.log")
    assert f.hosts == ["h100clust-worker-1"]
    assert f.algorithms == [
        NcclAlgo(size_bytes=262144, algorithm="TREE", protocol="LL128", model_time_us=54.707825, calls=14)
    ]


def test_nvls_in_use_over_infiniband_without_gpudirect_rdma() -> None:
    f = facts("nccl-2.20-nvls-ibext-no-gdr.log")
    assert (f.channels, f.nvls_channels, f.p2p_channels) == (16, 16, 16)
    assert f.collnet is None  # "0 collnet channels" says nothing either way
    assert f.net.name == "IBext_v8" and f.net.gdr is False
    link = peer(f, 47, 39, "receive")
    assert (link.via, link.net, link.net_dev, link.gdr) == ("NET/IBext_v8/2", "IBext_v8", 2, False)
    assert link.channels == [3, 5, 7, 9, 11, 13]
    assert f.ranks[0] == NcclRank(
        rank=32, nranks=64, host="hostname-test", cuda_dev=0, nvml_dev=0, bus_id="0000:18:00.0",
        comm_id="0x5ae77eb5ea4ec1ee",
    )
    assert [r.rank for r in f.ranks] == [32, 34, 35, 36]
    assert f.cuda_driver == "12.8" and f.settings == {"NCCL_SOCKET_IFNAME": "bond0"}


def test_nccl_2_22_nvls_capable_node_with_roce_nics() -> None:
    f = facts("nccl-2.22.3-nvls-roce-2nodes.log")
    assert f.nvls_supported is True
    assert f.net.name == "IBext_v8" and f.net.oob == ["eth0:172.24.180.73<0>"]
    assert f.net.devices == [f"mlx5_{i}:1/RoCE" for i in range(8)]
    assert f.channels == 16  # "Channel 01/16": the excerpt lacks channel 0 but NCCL says how many
    assert f.rings[0] == NcclRing(channel=1, ranks=[0, 8, 15, 14, 13, 12, 11, 10, 9, 1, 2, 3, 4, 5, 6, 7])
    assert [r.channel for r in f.rings] == [1, 2, 3, 4, 5]
    assert peer(f, 3, 4) == NcclPeer(src_rank=3, dst_rank=4, transport="P2P", via="P2P/CUMEM", channels=[7, 8])
    assert f.cuda_driver == "12.6"


def test_nccl_2_24_lines_without_nccls_prefix() -> None:
    f = facts("nccl-2.24.3-h100-nvls-sharp-bare.log")
    assert (f.version, f.cuda_build, f.cuda_driver, f.hosts) == ("2.24.3", "12.2", "12.4", [])
    assert f.ranks == [
        NcclRank(rank=0, nranks=8, cuda_dev=0, nvml_dev=0, bus_id="0000:1a:00.0", comm_id="0xd134602cf80e4ea2")
    ]
    assert f.net.name == "IBext_v8" and f.net.plugin == "NCCL RDMA Plugin v8"
    assert f.net.devices == [f"ibp{i}:1/IB/SHARP" for i in range(8)]
    assert (f.nvls_supported, f.collnet_plugin) == (True, "SHARP")
    assert f.settings == {"NCCL_SOCKET_IFNAME": "eth0", "NCCL_IB_PCI_RELAXED_ORDERING": "1"}


def test_nccl_2_27_pxn_tuning_timestamped_warnings_and_two_communicators() -> None:
    f = facts("nccl-2.27.5-roce-pxn-tuning.log")
    assert f.hosts == ["tpgds-aihub0007", "tpgds-aihub0008"] and f.nodes == 2
    pxn = peer(f, 9, 0, "send")
    assert (pxn.via, pxn.net_dev, pxn.proxy_rank, pxn.gdr) == ("NET/IB/0(8)/GDRDMA", 0, 8, True)
    assert f.algorithms == [
        NcclAlgo(size_bytes=4, algorithm="RING", protocol="SIMPLE", op="AllReduce", channel_lo=0, channel_hi=0)
    ]
    assert f.settings["NCCL_ALGO"] == "Ring" and f.settings["NCCL_PROTO"] == "Simple"
    assert f.settings["NCCL_NVLS_ENABLE"] == "0" and f.settings["NCCL_IB_TC"] == "106"
    assert (f.channels, f.nvls_channels) == (4, 0)
    assert len(f.warnings) == 2
    assert f.warnings[0].startswith("transport/net_ib.cc:2453 NET/IB: Got completion from peer 10.99.91.63<51161>")
    by_comm = {c: sorted(r.rank for r in f.ranks if r.comm_id == c) for c in {r.comm_id for r in f.ranks}}
    assert by_comm == {"0x221dee7fa4558566": [0, 2, 4, 6], "0x45a3a89de169ea18": list(range(16))}


def test_nccl_2_29_roce_gdrdma_across_two_nodes() -> None:
    f = facts("nccl-2.29.3-roce-gdrdma-2nodes.log")
    assert (f.version, f.cuda_build, f.cuda_driver) == ("2.29.3", "13.1", "13.1")
    assert f.nodes == 2 and f.channels == 16 and len(f.rings) == 16
    assert f.rings[0].ranks == [0, 7, 6, 5, 4, 3, 2, 1, 8, 15, 14, 13, 12, 11, 10, 9]
    # NCCL_IB_HCA is a prefix list: mlx5_1 also picks mlx5_10, and the log shows it.
    assert "mlx5_10:1/RoCE" in f.net.devices
    assert f.settings["NCCL_IB_HCA"] == "mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_7"
    assert f.net.name == "IB" and f.net.gdr is True
    assert peer(f, 0, 8, "send").channels == [0, 8]
    assert peer(f, 0, 7).via == "P2P/IPC"
    rank0 = f.ranks[0]
    assert (rank0.rank, rank0.nranks, rank0.bus_id, rank0.host) == (0, 16, "0000:0a:00.0", "tpgds-aihub0003")
    assert len(f.ranks) == 8


@pytest.mark.parametrize("text", ["", "no NCCL here\n" * 3, "\x00\xff\ufffd binary junk", "NCCL INFO", "x" * 100_000])
def test_text_without_nccl_lines_gives_empty_facts(text: str) -> None:
    assert parse(text) == NcclFacts()


@pytest.mark.parametrize("message", [
    "Channel 00 : x -> y via", "12 coll channels", "Channel 00/02 :", "NET/IB : Using", "Trees", "NCCL_ALGO set",
    "comm 0x1 rank 0 nranks 2 cudaDev - Init COMPLETE", "cudaDriverVersion",
    "8 Bytes -> Algo \u00b2 proto 1 time 1.2.3",
])
def test_cut_or_odd_nccl_lines_are_ignored(message: str) -> None:
    f = parse(f"host:1:2 [0] NCCL INFO {message}\nhost:1:2 [0] misc.cc:1 NCCL WARN")
    assert (f.peers, f.ranks, f.rings, f.channels, f.settings, f.cuda_driver) == ([], [], [], None, {}, None)
    assert f.hosts == ["host"]


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda p: p.name)
def test_lines_cut_anywhere_still_parse(fixture: Path) -> None:
    lines = fixture.read_text().splitlines()
    for cut in (3, 2, 1.5, 1.1):
        parse("\n".join(line[: int(len(line) / cut)] for line in lines))


def test_rank_files_merge_into_one_set_of_facts(tmp_path: Path) -> None:
    # NCCL_DEBUG_FILE=<dir>/nccl.%h.%p.log: one file per rank process; split the two-node log that way.
    lines = (DATA / "nccl-2.27.5-roce-pxn-tuning.log").read_text().splitlines()
    paths = []
    for host in ("tpgds-aihub0007", "tpgds-aihub0008"):
        path = tmp_path / f"nccl.{host}.1.log"
        path.write_text("\n".join(line for line in lines if host in line) + "\n")
        paths.append(path)
    alone = [read_files([p])[0] for p in paths]
    merged, _ = read_files(paths)
    assert merged.hosts == ["tpgds-aihub0007", "tpgds-aihub0008"]
    assert {(r.comm_id, r.rank) for r in merged.ranks} == {(r.comm_id, r.rank) for f in alone for r in f.ranks}
    assert {p.via for p in merged.peers} == {p.via for f in alone for p in f.peers}
    assert merged.algorithms == alone[0].algorithms and alone[1].algorithms == []
    assert merged == parse("\n".join(lines))


def hosts(f: NcclFacts) -> dict[str, tuple[list[int], int, list[int]]]:
    return {h.host: (h.ranks, h.processes, h.launcher_ranks) for h in f.placement}


def test_ranks_and_nodes_as_nccl_counts_them_and_as_the_log_shows_them() -> None:
    f = facts("nccl-2.27.5-roce-pxn-tuning.log")  # nRanks 16 nNodes 2 localRanks 8, both hosts' lines
    assert (f.nranks, f.nodes, f.local_ranks) == (16, 2, [8])
    assert {h: r for h, (r, _, _) in hosts(f).items()} == {"tpgds-aihub0007": list(range(8)),
                                                          "tpgds-aihub0008": list(range(8, 16))}
    # The hostname replaced on every line: NCCL's count (Init's nranks) beside the 8 processes one host shows.
    one = facts("nccl-2.18-ib-not-found-socket-16ranks-one-hostname.log")
    assert (one.nranks, one.nodes) == (16, None)
    assert hosts(one) == {"<cluster_name>": ([8, 9, 10, 11, 15], 8, [])}
    assert facts("nccl-2.7.8-gcp-slurm-socket-2nodes.log").nranks == 2  # only its ring "0 1" counts them


def test_launcher_tags_name_each_process_rank() -> None:
    ompi = facts("nccl-2.7-2.11-socket-openmpi-tagged-2nodes.log")  # "[1,n]<stdout>:" of Open MPI
    assert hosts(ompi) == {"ip-172-31-0-63": ([0, 1, 2, 3], 4, [0, 1, 2, 3]),
                           "ip-172-31-12-129": ([4, 5, 6, 7], 4, [4, 5, 6, 7])}
    mpich = facts("nccl-2.17-2.18-socket-shm-mpirun-tagged.log")  # "[n] "
    assert hosts(mpich) == {"node0": ([0, 2], 2, [0, 2]), "node2": ([1], 2, [1, 3])}
    # srun -l writes "n: " where Open MPI writes "[1,n]<stdout>:": the same log so re-tagged reads the same.
    text = (DATA / "nccl-2.7-2.11-socket-openmpi-tagged-2nodes.log").read_text()
    assert parse(re.sub(r"(?m)^\[1,(\d+)\]<stdout>:", r"\1: ", text)) == ompi


def test_a_sub_communicator_does_not_place_its_ranks_as_the_jobs() -> None:
    # Rank 0 of a 2-rank sub-communicator on host b is not the job's rank 0 (on host a).
    f = parse("a:1:1 [0] NCCL INFO comm 0x1 rank 0 nRanks 4 nNodes 2 localRanks 2 localRank 0 MNNVL 0\n"
              "b:2:2 [0] NCCL INFO comm 0x2 rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0 MNNVL 0\n"
              "b:2:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC\n")
    assert (f.nranks, f.nodes, hosts(f)) == (4, 2, {"a": ([0], 1, []), "b": ([], 1, [])})


def test_what_the_log_says_of_why_there_is_no_fabric() -> None:
    aws = facts("nccl-2.4.7-aws-socket-64ranks.log")
    assert aws.net.ib_said == "NET/IB : No device found."
    assert aws.net.plugin_said == "NET/Plugin : No plugin found (libnccl-net.so)."
    said = parse("h:1:1 [0] NCCL INFO Failed to initialize NET plugin IB\n"
                 "h:1:1 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.")
    assert (said.net.ib_said, said.net.plugin_said) == (
        "Failed to initialize NET plugin IB", "NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.")
    assert facts("nccl-2.29.3-roce-gdrdma-2nodes.log").net.ib_said is None


def test_one_file_per_rank_process_reads_as_the_whole_log(tmp_path: Path) -> None:
    # NCCL_DEBUG_FILE=<dir>/nccl.%h.%p.log: split the real Open MPI log by its host:pid into one file each.
    lines = (DATA / "nccl-2.7-2.11-socket-openmpi-tagged-2nodes.log").read_text().splitlines(True)
    by_process: dict[str, list[str]] = {}
    for line in lines:
        by_process.setdefault(re.search(r"(ip-[\d-]+:\d+):", line)[1], []).append(line)
    paths = []
    for process, own in by_process.items():
        paths.append(tmp_path / f"nccl.{process.replace(':', '.')}.log")
        paths[-1].write_text("".join(own))
    merged, sources = read_files(paths)
    assert len(sources) == 8 and merged.placement == facts("nccl-2.7-2.11-socket-openmpi-tagged-2nodes.log").placement
