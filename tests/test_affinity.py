"""Each rank's CPU affinity against its GPU's NUMA node: recorded per rank, judged, reported."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from report_fixtures import as_run, gpu_run_doc

from clusterbench.hw import affinity
from clusterbench.stages.registry import judge, page

DGX_H100 = json.loads((Path(__file__).parent / "data" / "hardware" / "dgx-h100.json").read_text())
SOCKET = {0: "0-55,112-167", 1: "56-111,168-223"}


def _rank(rank: int, cpus: str, cpu_numa: list[int]) -> dict:
    return {"rank": rank, "node": "dgx-h100-01", "local_rank": rank, "device": f"cuda:{rank}", "cpus": cpus,
            "cpu_numa": cpu_numa, "device_numa": rank // 4}


def _check(ranks: list[dict]):
    doc = gpu_run_doc(DGX_H100, verdicts=[])
    doc["env"]["ranks"] = ranks
    run = as_run(doc)
    return run, next(v for v in judge(run) if v.check == "CPU affinity")


def test_kernel_cpu_lists_round_trip() -> None:
    assert affinity.parse_cpulist("0-3,8,10-11\n") == {0, 1, 2, 3, 8, 10, 11}
    assert affinity.cpulist({0, 1, 2, 3, 8, 10, 11}) == "0-3,8,10-11"
    assert affinity.parse_cpulist("") == set() and affinity.cpulist(set()) == ""


def test_numa_nodes_of_cpus_from_sysfs(tmp_path: Path) -> None:
    for node, cpus in SOCKET.items():
        (tmp_path / f"node{node}").mkdir()
        (tmp_path / f"node{node}" / "cpulist").write_text(cpus + "\n")
    assert affinity.numa_nodes_of({3, 4}, tmp_path) == [0]
    assert affinity.numa_nodes_of({3, 60}, tmp_path) == [0, 1]
    assert affinity.numa_nodes_of({3}, tmp_path / "none") == []


def test_this_process_reports_its_own_cpus() -> None:
    cpus, _nodes, gpu_numa = affinity.mine(torch.device("cpu"))
    assert affinity.parse_cpulist(cpus) == os.sched_getaffinity(0) and gpu_numa is None


def test_pinned_across_the_socket_is_a_warning_naming_the_rank() -> None:
    good = [_rank(r, SOCKET[r // 4], [r // 4]) for r in range(8)]
    run, verdict = _check(good)
    assert verdict.status == "PASS" and "all 8 ranks run on their GPU's NUMA node" in verdict.detail
    crossed = good[:5] + [_rank(5, SOCKET[0], [0])] + good[6:]  # GPU 5 sits on NUMA 1
    run, verdict = _check(crossed)
    assert verdict.status == "WARN"
    assert "rank 5 on dgx-h100-01 (cuda:5, NUMA 1) on CPUs 0-55,112-167 (NUMA 0)" in verdict.detail
    html = page(run)
    assert 'id="placement"' in html and "another NUMA node" in html


def test_unpinned_ranks_pass_with_advice() -> None:
    loose = [_rank(r, "0-223", [0, 1]) for r in range(8)]
    _run, verdict = _check(loose)
    assert verdict.status == "PASS" and "not pinned near their GPU" in verdict.detail


@pytest.mark.parametrize("ranks", [[], [{"rank": 0, "node": "a", "local_rank": 0, "device": "cpu"}]])
def test_without_gpu_numa_there_is_no_line(ranks: list) -> None:
    doc = gpu_run_doc(DGX_H100, verdicts=[])
    doc["env"]["ranks"] = ranks
    assert all(v.check != "CPU affinity" for v in judge(as_run(doc)))
