"""`clusterbench diagnose`: NCCL's own log, read and judged, on real NCCL logs (tests/data/nccl)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import assert_one_line_error, run_cli
from report_fixtures import gpu_run_doc, write_run

from clusterbench.results import codec
from clusterbench.stages.hardware.records import Gpu, Hardware, RdmaPort

LOGS = Path(__file__).parent / "data" / "nccl"
SOCKETS = LOGS / "nccl-2.17-2.18-socket-shm-mpirun-tagged.log"  # two nodes over NET/Socket
SHM = LOGS / "nccl-2.19-2.21-l20-pcie-shm.log"  # one host, P2P off: SHM between GPUs
IB = LOGS / "nccl-2.29.3-roce-gdrdma-2nodes.log"


def folder_with(tmp_path: Path, log: Path, hardware: Hardware) -> Path:
    """A GPU run folder as `clusterbench comm` leaves it on NCCL: run.json and the per-rank logs."""
    run_dir = write_run(tmp_path / "run", gpu_run_doc(codec.dump(hardware)))
    (run_dir / "nccl").mkdir()
    shutil.copy(log, run_dir / "nccl" / "nccl.node0.1234.log")
    return run_dir


def test_sockets_between_nodes_while_rdma_ports_are_up_fail(tmp_path: Path) -> None:
    rdma = [RdmaPort("mlx5_0", "1", "InfiniBand", "InfiniBand", "ACTIVE", 400.0, "400 Gb/sec", "IB NDR", 0, 50.0)]
    proc = run_cli("diagnose", str(folder_with(tmp_path, SOCKETS, Hardware("node0", rdma=rdma))))
    assert proc.returncode == 1, proc.stderr
    assert "links: NET/Socket/0" in proc.stdout
    finding = next(line for line in proc.stdout.splitlines() if "NCCL network" in line)
    assert finding.split()[0] == "FAIL" and "mlx5_0" in finding and "TCP sockets" in finding


def test_shared_memory_between_nvlink_gpus_warns(tmp_path: Path) -> None:
    gpus = [Gpu(i, "NVIDIA H100 80GB HBM3", nvlink_active=18, nvlink_version=4, nvlink_gbps=450.0) for i in range(8)]
    proc = run_cli("diagnose", str(folder_with(tmp_path, SHM, Hardware("node0", gpus=gpus))))
    assert proc.returncode == 0, proc.stderr
    finding = next(line for line in proc.stdout.splitlines() if "NCCL P2P" in line)
    assert finding.split()[0] == "WARN" and "SHM" in finding


def test_a_healthy_infiniband_log_passes(tmp_path: Path) -> None:
    proc = run_cli("diagnose", str(IB))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("NCCL 2.29.3")
    assert "PASS  GPUDirect RDMA" in proc.stdout
    assert "NCCL network" not in proc.stdout  # a log alone cannot say which RDMA ports the hosts have up


@pytest.mark.parametrize("log", sorted(LOGS.glob("*.log")), ids=lambda p: p.stem)
def test_every_fixture_gives_a_picture(log: Path) -> None:
    proc = run_cli("diagnose", str(log))
    assert proc.stdout.startswith("NCCL ") and "== findings" in proc.stdout
    if "  PASS " in proc.stdout or "  WARN " in proc.stdout or "  FAIL " in proc.stdout:
        assert proc.returncode == (1 if "  FAIL " in proc.stdout else 0), proc.stderr
    else:  # a log with no traffic between nodes: the picture, and no verdict over nothing
        assert_one_line_error(proc, 2, "nothing judged: the log shows no")


def test_a_run_without_nccl_or_a_missing_target_is_one_line(tmp_path: Path) -> None:
    cpu_run = write_run(tmp_path / "cpu", gpu_run_doc({}))
    assert_one_line_error(run_cli("diagnose", str(cpu_run)), 2, "holds no NCCL log")
    assert_one_line_error(run_cli("diagnose", str(tmp_path / "nothing")), 2, "no run folder or NCCL log")
    (tmp_path / "text.log").write_text("hello\n")
    assert_one_line_error(run_cli("diagnose", str(tmp_path / "text.log")), 2, "no NCCL INFO lines")


@pytest.mark.parametrize(("log", "names"), [
    # links between nodes over sockets, their ends placed by the log, the reasons it gives
    ("nccl-2.4.7-aws-socket-64ranks.log", ["ip-172-31-0-119 (rank 35)", '"NET/IB : No device found."',
                                           "ibv_devinfo", "NCCL_NET_PLUGIN"]),
    ("nccl-2.7-2.11-socket-openmpi-tagged-2nodes.log", ["ip-172-31-0-63 (ranks 0, 2-3)",
                                                        "ip-172-31-12-129 (rank 4)", "does not say why"]),
    # one hostname for 16 ranks on 2 nodes: the peers it does not show are said to be elsewhere
    ("nccl-2.18-ib-not-found-socket-16ranks-one-hostname.log", ["<cluster_name> (ranks 8, 15)",
                                                                "ranks 0, 6 on hosts this log does not show"]),
    # no link line: "Using network Socket" on two hosts
    ("nccl-2.7.8-gcp-slurm-socket-2nodes.log", ['"Using network Socket"', "2 hosts", "No device found"]),
])
def test_sockets_between_nodes_warn_from_the_log_alone(log: str, names: list[str]) -> None:
    proc = run_cli("diagnose", str(LOGS / log))
    assert proc.returncode == 0, proc.stderr
    (finding,) = [line for line in proc.stdout.splitlines() if "NCCL sockets" in line]
    assert finding.split()[0] == "WARN" and "TCP sockets" in finding
    for name in names:
        assert name in finding, finding


def test_the_picture_counts_ranks_as_nccl_does_and_as_the_log_shows() -> None:
    proc = run_cli("diagnose", str(LOGS / "nccl-2.18-ib-not-found-socket-16ranks-one-hostname.log"))
    assert ("ranks: 16 (NCCL: nRanks 16); seen in this log: ranks 8-11, 15 on <cluster_name> "
            "(8 process(es) on 1 host(s))") in proc.stdout
    proc = run_cli("diagnose", str(IB))
    assert ("ranks: 16 on 2 node(s) (NCCL: nRanks 16, nNodes 2, 8 local ranks); "
            "seen in this log: ranks 0-7 on tpgds-aihub0003") in proc.stdout
    assert "PASS  NCCL sockets     between nodes: NET/IB/0/GDRDMA" in proc.stdout


@pytest.mark.parametrize("log", ["nccl-2.19-2.21-l20-pcie-shm.log", "nccl-2.19-2.21-l20-pcie-p2p.log"])
def test_a_single_node_log_does_not_warn_of_sockets(log: str) -> None:
    assert_one_line_error(run_cli("diagnose", str(LOGS / log)), 2, "the log shows no network link")
