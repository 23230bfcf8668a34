"""The pairwise section: the matrix as a heatmap, the class medians, the flags (docs/methodology.md §8)."""

from __future__ import annotations

import heapq

from clusterbench.report.blocks import details, esc, note, section, table
from clusterbench.report.plots import heatmap_plot
from clusterbench.results.run import Run
from clusterbench.stages.comm import pairs
from clusterbench.stages.comm.records import COMM_OPTIONS, PAIRS, CommOptions
from clusterbench.units import BANDWIDTH_UNITS, bandwidth, duration

# Past this many ranks a matrix is a wall of pixels (and n² cells to draw): the slowest pairs are listed instead.
MATRIX_UP_TO = 128
LISTED = 200  # the slowest directions the table lists; pairs.csv holds every one


def _ranks(run: Run) -> list[int]:
    return sorted({p.src for p in PAIRS.of(run)} | {p.dst for p in PAIRS.of(run)})


def plot_count(run: Run) -> int:
    return int(len(_ranks(run)) <= MATRIX_UP_TO)


def pairs_section(run: Run) -> str:
    options = COMM_OPTIONS.of(run) or CommOptions()
    unit = options.unit
    label, scale = BANDWIDTH_UNITS[unit]
    ranks = _ranks(run)
    if len(ranks) <= MATRIX_UP_TO:
        nodes = {p.src: p.src_node for p in PAIRS.of(run)} | {p.dst: p.dst_node for p in PAIRS.of(run)}
        cell = {(p.src, p.dst): p.gbps * scale for p in PAIRS.of(run)}
        cells = [[cell.get((s, d)) for d in ranks] for s in ranks]
        plot = heatmap_plot("pairs", [f"{r} {nodes[r]}" for r in ranks], cells, label)
    else:
        plot = note(esc(f"{len(ranks)} ranks: too many for a matrix; the slowest pairs are listed below, and "
                        "pairs.csv holds every one."))
    latency = pairs.latencies(PAIRS.of(run))
    medians = "".join(f"<li>{esc(k)}: median {bandwidth(m, unit)} {esc(label)}, median latency "
                      f"{duration(latency[k])}</li>" for k, m in pairs.medians(PAIRS.of(run)).items())
    found = pairs.flags(PAIRS.of(run), options.flag_below)
    flagged = "".join(note(esc(f.text()), "warn") for f in found if f.what != "pair") or note(
        esc(f"No node or rank below {options.flag_below:g}x its class's median."))
    slow_pairs = [f for f in found if f.what == "pair"]
    slowest = heapq.nsmallest(LISTED, PAIRS.of(run), key=lambda p: p.gbps)
    rows = [[str(p.src), esc(p.src_node), str(p.dst), esc(p.dst_node), bandwidth(p.gbps, unit),
             duration(p.latency_us), str(p.wrong)] for p in slowest]
    listed = (f"{len(PAIRS.of(run))} directions, slowest first" if len(slowest) == len(PAIRS.of(run))
              else f"the slowest {len(slowest)} of {len(PAIRS.of(run))} directions (every one: pairs.csv)")
    body = (f'<div class="op"><div>{plot}</div><div><ul>{medians}</ul>{flagged}'
            f"<p>{len(slow_pairs)} of {len(PAIRS.of(run))} pairs below the limit.</p></div></div>"
            + details(f"table: {listed}",
                      table(["src", "node", "dst", "node", f"{label}", "latency", "#wrong"], rows, numeric_from=4)))
    lead = (f"Every pair of ranks alone on its links, each way, in rounds of disjoint pairs; flagged below "
            f"{options.flag_below:g}x the median of its class (within a node, across nodes).")
    return section("pairs", "Pairwise links", body, lead=lead)
