"""The comm stage's metrics: comm.* (docs/methodology.md §6)."""

from __future__ import annotations

from clusterbench.analyse.metrics import SIZE_CLASSES, Metrics, mean, size_class
from clusterbench.nccl.metrics import nccl_values
from clusterbench.results.run import Run
from clusterbench.stages.comm import pairs, teams
from clusterbench.stages.comm.links import link_line
from clusterbench.stages.comm.records import COMM, COMM_OPTIONS, PAIRS, CommRow
from clusterbench.units import BITS_PER_BYTE


def metrics(run: Run, m: Metrics) -> None:
    """comm.*: wrong elements, busbw per op and size class, against the link, per scope, per pair."""
    if not COMM.of(run) and not PAIRS.of(run):
        return
    wrongs = [(f"{r.op} {r.size_bytes} B" + ("" if r.scope == "global" else f" ({r.scope} {r.team})"), r.wrong)
              for r in COMM.of(run)] + [(f"pair {p.src} -> {p.dst}", p.wrong) for p in PAIRS.of(run)]
    bad = [(what, n) for what, n in wrongs if n]
    wrong = sum(n for _, n in bad)
    where = ", ".join(f"{what} ({n} wrong)" for what, n in bad[:5])
    more = f" and {len(bad) - 5} more" if len(bad) > 5 else ""
    m.put("comm.wrong", wrong, f"{wrong} wrong elements in {len(bad)} of {len(wrongs)} measurements: {where}{more}"
          if bad else f"every element of {len(wrongs)} measurements arrived correctly")
    _scoped(COMM.of(run), m)
    _pairwise(run, m)
    by_op: dict[str, list[CommRow]] = {}
    for row in COMM.of(run):
        if row.scope == "global":
            by_op.setdefault(row.op, []).append(row)
    line, line_text = link_line(run)
    for op, op_rows in by_op.items():
        m.put(f"comm.{op}.wrong", sum(r.wrong for r in op_rows))
        if op_rows[0].world_size > 1:  # one rank has no bus bandwidth
            _busbw(op, op_rows, line, line_text, m)
        else:
            m.absent[f"comm.{op}.link_share"] = "one rank has no bus bandwidth"
    if m.values.get("comm.all_reduce.link_share", 0) > 1 and nccl_values(run).get("nccl.nvls", (0, ""))[0]:
        m.notes["comm.all_reduce.link_share"] += ("; NCCL set up NVLS channels (its log), and NVLS reduces in the "
                                                  "NVSwitch, which lets busbw pass the link")


def _scoped(rows: list[CommRow], m: Metrics) -> None:
    """Per scope and op, the worst team's busbw at its largest size."""
    groups: dict[tuple[str, str], list[CommRow]] = {}
    for r in rows:
        # Not the algo scope: a "worst algorithm" is no property of the cluster to track.
        if r.scope in ("intra", "inter") and r.world_size > 1:
            groups.setdefault((r.scope, r.op), []).append(r)
    for (scope, op), found in groups.items():
        w = teams.worst(found)
        m.put(f"comm.{scope}.{op}.busbw_gbps.worst", w.row.busbw_gbps,
              f"{op} {scope} busbw {w.row.busbw_gbps / BITS_PER_BYTE:.2f} GB/s at {w.row.size_bytes} B in "
              f"{w.row.team}, the worst of {w.teams}")
    # --algo: each send/recv algorithm's busbw at the largest sizes, kept apart from the native op's.
    built: dict[tuple[str, str], list[CommRow]] = {}
    for r in rows:
        if r.scope == "algo" and r.algo != "native" and r.world_size > 1:
            built.setdefault((r.algo, r.op), []).append(r)
    for (algo, op), found in built.items():
        largest = max(r.size_bytes for r in found)
        top = mean([r.busbw_gbps for r in found if r.size_bytes >= largest / 4])
        m.put(f"comm.algo.{algo}.{op}.busbw_gbps.top", top)


def _pairwise(run: Run, m: Metrics) -> None:
    if not PAIRS.of(run):
        return
    for k, median in pairs.medians(PAIRS.of(run)).items():
        m.put(f"comm.pairwise.{k.replace(' ', '_')}.gbps", median)
    limit = COMM_OPTIONS.of(run).flag_below if COMM_OPTIONS.of(run) else 0.8
    slow = [f for f in pairs.flags(PAIRS.of(run), limit) if f.what != "pair"]
    m.put("comm.pairwise.flagged", len(slow), "; ".join(f.text() for f in slow[:3]) if slow else
          f"no node or rank below {limit:g}x its class's median")


def _busbw(op: str, rows: list[CommRow], line: float | None, line_text: str, m: Metrics) -> None:
    sizes: dict[int, list[float]] = {}
    for row in rows:
        sizes.setdefault(row.size_bytes, []).append(row.busbw_gbps)
    per_size = {size: mean(values) for size, values in sorted(sizes.items())}
    m.put(f"comm.{op}.busbw_gbps.avg", mean(list(per_size.values())))
    for cls in SIZE_CLASSES:
        values = [v for size, v in per_size.items() if size_class(size) == cls]
        if values:
            m.put(f"comm.{op}.busbw_gbps.{cls}", mean(values))
    largest = max(per_size)
    top = mean([v for size, v in per_size.items() if size >= largest / 4])
    figure = f"{op} busbw {top / BITS_PER_BYTE:.2f} GB/s at the largest sizes"
    m.put(f"comm.{op}.busbw_gbps.top", top, figure)
    for size, v in per_size.items():
        m.put(f"comm.{op}.busbw_gbps@{size}", v)
    if line is None:
        m.absent[f"comm.{op}.link_share"] = line_text
    else:
        share = top / BITS_PER_BYTE / line
        m.put(f"comm.{op}.link_share", share, f"{figure} = {share:.0%} of {line_text}")
