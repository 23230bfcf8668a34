"""The fleet at 512 to 10,000 nodes: synthetic fleets driven through rank 0's real code, judged against
the faults planted in them, and the whole command's wall time modelled at 400 Gbps.

    python bench/bench_fleet_scale.py [--nodes 512 1024 2048] [--seeds 3] [--faults 0.01]
        [--mix slow_nic,starved,slow_gpu,bad_link,flaky_link] [--noise 0.04] [--slow-samples 0.002]
        [--pairs auto|all|sampled] [--partners K] [--topology] [--gbps 400]
    python bench/bench_fleet_scale.py --against HEAD~1 --nodes 3 8 32 128   # verdicts beside another revision's

Each size and seed runs in a fresh process, so that its peak memory is its own. A fleet is planted
(docs/methodology.md §16 lists the kinds): healthy links at --gbps with --noise of spread, a share
--slow-samples of the rounds' figures slowed by a busy moment, and --faults of the nodes faulty by the
kinds of --mix (slow_nic: its sends, its receives or both at 0.1-0.45x; starved: a host starved of CPU,
0.25x both ways and 4x the latency; slow_gpu: its matmul at 0.7x; bad_rack: the nodes of one leaf switch
send at 0.3x across the spine and normally inside; bad_link and flaky_link: a link between two healthy
nodes at 0.1x, for good or in the rounds only, which nobody is excluded for).

What rank 0 does with the measurements is the real code, timed: the run folder (run.json and pairs.csv
on disk), the node-local phase's records, the rechecks' choice, the plan of pairs (stages/fleet/coverage.py),
each round's rows as they arrive (stages/comm/schedule.round_rows, RunFolder.extend), the retests' plan and
their rows (stages/fleet/retests.Looks), and after the ranks, the folder read back (load_run), the stage's
conclusion and rules (commands/stage.conclude) and run.json saved. Making up the measurements is not
timed. "judge" is that time; "rank-0 peak" the process's peak resident memory above what it held before
the fleet; "false" the healthy nodes excluded, "missed" the faulty ones not excluded, summed over seeds.

"qualify" models the whole command's wall time for the plan the run made: --start-s (launch and
rendezvous) and --node-local-s (the node-local phase), neither measured on GPUs here, so both given; each
round of pairs at --gbps (--pair-bytes each way, 1 + iters messages each way, the latency round trips and
a round's reduce and barrier); the retests' and the second look's rounds as planned, with the second
look's pause; and the judge as measured. The last line reads
`nodes N: judge S s, rank-0 peak M MiB, false F, missed K, qualify at 400 Gbps T min` for the largest size.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import math
import pickle
import random
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

from clusterbench.commands.stage import conclude as conclude_command
from clusterbench.errors import RunFailed
from clusterbench.nodechecks import bands
from clusterbench.nodechecks.measures import Found
from clusterbench.results import codec
from clusterbench.results.run import Env, Placement
from clusterbench.stages.comm.pairwise import BW_ITERS, LATENCY_ITERS
from clusterbench.stages.comm.records import PairRow
from clusterbench.stages.comm.schedule import round_rows
from clusterbench.stages.fleet import coverage, local, retests, suspects
from clusterbench.stages.fleet.links import LOOK_APART_S, RETEST_ITERS
from clusterbench.stages.fleet.options import PARTNERS, FleetOptions
from clusterbench.stages.fleet.records import FLEET, Fleet, Retest
from clusterbench.stages.fleet.stage import FLEET_STAGE, FleetJob
from clusterbench.stages.registry import load_run, run_folder

NODE_FAULTS = ("slow_nic", "starved", "slow_gpu", "bad_rack")
LINK_FAULTS = ("bad_link", "flaky_link")
LOSSES = [10.375, 10.25, 9.9375, 9.6875, 9.375, 9.125, 8.8125, 8.5]  # the numerics task's, alike on every device
# A DGX H100's facts, as hw/facts.py reads them.
FACTS = {"cpu": "Intel(R) Xeon(R) Platinum 8480C", "cpu cores": "224", "numa nodes": "2", "gpus": "8",
         "gpu model": "NVIDIA H100 80GB HBM3", "pcie": "gen5 x16", "nvlinks per gpu": "18", "nics": "8",
         "nic speed": "400000 Mb/s", "rdma ports": "8", "rdma rate": "400 Gb/sec (4X NDR)", "driver": "550.54.15",
         "cuda": "12.4", "nccl": "2.21.5", "torch": "2.5.1", "kernel": "5.15.0-105-generic", "ecc": "on",
         "persistence": "on", "mig": "off"}
MATMUL, COPY, INTRA = 760.0, 2900.0, 3600.0  # the node-local figures of a healthy node (their scale is immaterial)
LATENCY_US = 5.0


@dataclass
class Truth:
    """A planted fleet: every node's and link's real pace, and which nodes are faulty."""

    names: list[str]
    racks: list[str]
    gbps: float
    noise: float
    slow_samples: float
    send: list[float]
    recv: list[float]
    lag: list[float]  # latency factor
    gpu: list[float]
    bad_rack: str | None
    bad_links: dict[tuple[int, int], float] = field(default_factory=dict)
    flaky: set[tuple[int, int]] = field(default_factory=set)
    faulty: set[str] = field(default_factory=set)
    kinds: Counter = field(default_factory=Counter)

    def pace(self, a: int, b: int, retest: bool) -> float:
        pace = self.gbps * min(self.send[a], self.recv[b]) * self.bad_links.get((a, b), 1.0)
        if self.bad_rack is not None and self.racks[a] == self.bad_rack and self.racks[b] != self.bad_rack:
            pace *= 0.3
        if (a, b) in self.flaky and not retest:
            pace *= 0.2
        return pace

    def measure(self, a: int, b: int, look: int, seed: int) -> tuple[float, float, float]:
        """One way of a pair: Gbps, latency, wrong elements. look 0: a round's median of messages; 1 and 2:
        a retest's fastest message, in its first and second look (noise only slows a link, and a busy moment
        seldom spans every message of a retest)."""
        rng = random.Random(hash((seed, a, b, look)))
        lag = LATENCY_US * max(self.lag[a], self.lag[b])
        if look == 0:
            gbps = self.pace(a, b, False) * (1 + self.noise * rng.gauss(0, 1))
            latency = lag * (1 + self.noise * abs(rng.gauss(0, 1)))
            if rng.random() < self.slow_samples:
                gbps *= rng.uniform(0.1, 0.5)
                latency *= rng.uniform(1.0, 5.0)
        else:
            gbps = self.pace(a, b, True) * (1 - self.noise / 3 * abs(rng.gauss(0, 1)))
            latency = lag * (1 + self.noise / 3 * abs(rng.gauss(0, 1)))
            if rng.random() < self.slow_samples / 10:
                gbps *= rng.uniform(0.1, 0.5)
        return max(gbps, 1e-3), latency, 0.0


def plant(n: int, rack_size: int, faults: float, mix: list[str], truth_seed: int, args: argparse.Namespace) -> Truth:
    rng = random.Random(truth_seed)
    names = [f"gpu{i:05d}" for i in range(n)]
    racks = [f"leaf{i // rack_size:04d}" for i in range(n)]
    t = Truth(names, racks, args.gbps, args.noise, args.slow_samples, [1.0] * n, [1.0] * n, [1.0] * n, [1.0] * n, None)
    kinds = [k for k in mix if k in NODE_FAULTS and k != "bad_rack"]
    count = max(1, round(faults * n)) if kinds or "bad_rack" in mix else 0
    healthy = list(range(n))
    rng.shuffle(healthy)
    if "bad_rack" in mix:
        t.bad_rack = racks[healthy[0]]
        inside = [i for i in range(n) if racks[i] == t.bad_rack]
        t.faulty.update(names[i] for i in inside)
        t.kinds["bad_rack"] += len(inside)
        healthy = [i for i in healthy if racks[i] != t.bad_rack]
        count = max(0, count - len(inside)) if kinds else 0
    for j in range(count):
        i, kind = healthy.pop(), kinds[j % len(kinds)]
        t.faulty.add(names[i])
        t.kinds[kind] += 1
        if kind == "slow_nic":
            way = rng.choice(("send", "recv", "both"))
            factor = rng.uniform(0.1, 0.45)
            if way in ("send", "both"):
                t.send[i] = factor
            if way in ("recv", "both"):
                t.recv[i] = factor
        elif kind == "starved":
            t.send[i] = t.recv[i] = 0.25
            t.lag[i] = 4.0
        else:
            t.gpu[i] = 0.7
    links = max(1, round(faults * n / 2))
    for kind in LINK_FAULTS:
        if kind not in mix:
            continue
        for _ in range(min(links, len(healthy) // 2)):
            a, b = healthy.pop(), healthy.pop()
            if kind == "bad_link":
                t.bad_links[(a, b)] = 0.1
            else:
                t.flaky.add((a, b))
            t.kinds[kind] += 1
    return t


class Clock:
    """The time spent inside rank 0's own code."""

    def __init__(self) -> None:
        self.seconds = 0.0

    @contextlib.contextmanager
    def on(self):
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds += time.perf_counter() - started


def _rss_kib() -> int:
    return next(int(line.split()[1]) for line in Path("/proc/self/status").read_text().splitlines()
                if line.startswith("VmRSS:"))


def _measured(truth: Truth, schedule: list[list[tuple[int, int]]], look: int, seed: int) -> list[list[list[float]]]:
    """What each round's receivers send rank 0, slot by slot (comm/schedule.round_rows reads it)."""
    return [[list(truth.measure(a, b, look, seed)) for x, y in pairs for a, b in ((x, y), (y, x))]
            for pairs in schedule]


def one(n: int, seed: int, args: argparse.Namespace) -> dict:
    """One fleet of n nodes through rank 0's code; what it cost and what it concluded."""
    truth = plant(n, args.rack_size, args.faults, args.mix, seed, args)
    gpus = args.gpus_per_node
    node_of = {i * gpus: name for i, name in enumerate(truth.names)}
    leaders = [i * gpus for i in range(n)]
    nbytes = args.pair_bytes
    options = FleetOptions(pair_bytes=nbytes, pairs=args.pairs, partners=args.partners, seed=seed)
    clock = Clock()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "run"
        before = _rss_kib()
        ranks = [Placement(r, truth.names[r // gpus], r % gpus, f"cuda:{r % gpus}", "0-55,112-167", [0], 0)
                 for r in range(n * gpus)]
        env = Env(hostname=truth.names[0], backend="nccl", device_type="cuda", world_size=n * gpus,
                  hosts=[p.node for p in ranks], devices=[p.device for p in ranks], ranks=ranks)
        # The node-local phase's parts, pickled as gather_object sends them to rank 0.
        parts = [pickle.dumps(local.Part(r, truth.names[r // gpus], "NVIDIA H100 80GB HBM3",
                                         Found(figures={"matmul_tflops": MATMUL * truth.gpu[r // gpus],
                                                        "copy_gbps": COPY, "intra_busbw_gbps": INTRA},
                                               losses=list(LOSSES)),
                                         local.Picture(FACTS, FACTS["cpu"], 224, gpus) if r % gpus == 0 else None))
                 for r in range(n * gpus)]
        nodes = {name: list(range(i * gpus, (i + 1) * gpus)) for i, name in enumerate(truth.names)}
        with clock.on():
            folder = run_folder(path).begin("fleet", ["clusterbench", "fleet"])
            folder.record(env=env)
            fleet = Fleet(pair_bar=options.pair_bar, tolerance=options.tolerance,
                          racks=dict(zip(truth.names, truth.racks)) if args.topology else {})
            folder.record(fleet=fleet)
            fleet.probes, fleet.numerics = local.assemble([pickle.loads(part) for part in parts], nodes)
            folder.record(fleet=fleet)
            figures = {p.node: (p.klass, p.metrics) for p in fleet.probes}
            again = sorted(bands.outliers(figures, bands.learn_all(figures, options.tolerance), options.tolerance))
        index = {name: i for i, name in enumerate(truth.names)}
        rechecked = {name: {**fleet.probes[index[name]].metrics} for name in again}
        with clock.on():
            fleet.rechecks = rechecked
            mode = options.pairs if options.pairs != "auto" or options.partners is None else "sampled"
            schedule, fleet.coverage = coverage.plan(n, mode, options.partners or PARTNERS, seed,
                                                     truth.racks if args.topology else None)
            folder.record(fleet=fleet)
        rows: list[PairRow] = []
        for i, (pairs, slots) in enumerate(zip(schedule, _measured(truth, schedule, 0, seed)), 1):
            with clock.on():
                found = round_rows(slots, pairs, leaders, node_of, nbytes, i)
                rows += found
                folder.extend("pairs", found)
        with clock.on():
            looks = retests.Looks(rows, truth.names, options.pair_bar)
            first = retests.rounds_of(looks.todo)
        planned = [len(first), 0]
        for look, plan in ((1, first), (2, None)):
            if plan is None:
                with clock.on():
                    plan = retests.rounds_of(looks.still_slow())
                planned[1] = len(plan)
            named = [[(index[p.a], index[p.b]) for p in pairs] for pairs in plan]
            for pairs, slots in zip(named, _measured(truth, named, look, seed)):
                with clock.on():
                    looks.keep(round_rows(slots, pairs, leaders, node_of, nbytes, 0))
                    fleet.retests = list(looks.kept.values())
                    folder.record(fleet=fleet, min_interval_s=folder.hot_interval_s)
        with clock.on():
            folder.record(fleet=fleet)
            folder.finish("complete")
            json_mib = (path / "run.json").stat().st_size / 2**20
            # After the ranks, as the harness does: the folder read back once, concluded, saved.
            run = load_run(path)
            with contextlib.redirect_stdout(io.StringIO()):
                try:
                    conclude_command(FLEET_STAGE, run, FleetJob(options), path)
                except RunFailed:
                    pass  # the fleet check fails where a node is excluded: the command's exit 1
            run_folder(path).save(run)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    verdict = {r.node: r.verdict for r in FLEET.of(run).nodes}
    excluded = {node for node, v in verdict.items() if v == "EXCLUDE"}
    measured_bad = [(a, b) for a, b in truth.bad_links if any({a, b} == set(p) for r in schedule for p in r)]
    return {
        "nodes": n, "seed": seed, "judge_s": clock.seconds, "peak_mib": peak / 1024, "json_mib": json_mib,
        "false": len(excluded - truth.faulty), "missed": len(truth.faulty - excluded),
        "faulty": len(truth.faulty), "suspects": sum(v == "SUSPECT" for v in verdict.values()),
        "false_names": sorted(excluded - truth.faulty)[:5], "missed_names": sorted(truth.faulty - excluded)[:5],
        "rows": len(rows), "rounds": len(schedule), "retest_rounds": planned[0], "second_rounds": planned[1],
        "retests": len(FLEET.of(run).retests), "bad_links": len(FLEET.of(run).bad_links),
        "planted_bad": len(truth.bad_links),
        "bad_measured": len(measured_bad), "flaky": len(FLEET.of(run).flaky), "switches": FLEET.of(run).bad_switches,
        "coverage": codec.dump(FLEET.of(run).coverage), "ranks": n * gpus,
    }


def qualify_minutes(r: dict, args: argparse.Namespace) -> float:
    """The modelled wall time of the whole command, in minutes (the module's docstring says what it holds)."""
    message = args.pair_bytes * 8 / (args.gbps * 1e9)
    pings = 2 * (2 + LATENCY_ITERS) * 2 * LATENCY_US * 1e-6  # both sides' round trips
    collective = 2 * math.ceil(math.log2(max(2, r["ranks"]))) * args.hop_s  # the round's reduce and barrier
    pair_round = 2 * (1 + BW_ITERS) * message + pings + collective
    retest_round = 2 * (1 + RETEST_ITERS) * message + pings + collective
    seconds = (args.start_s + args.node_local_s + r["rounds"] * pair_round
               + (r["retest_rounds"] + r["second_rounds"]) * retest_round
               + (LOOK_APART_S if r["second_rounds"] else 0.0) + r["judge_s"])
    return seconds / 60


def against(n: int, seed: int, args: argparse.Namespace, old: object) -> dict:
    """The links' verdicts of this tree and of another revision's retests (`old`) on the same fleet:
    the same rounds, and each pair's retests measured from the same truth (whichever partners each plan picks);
    "right" where the condemned are exactly the nodes planted with a fault of their links."""
    truth = plant(n, args.rack_size, args.faults, args.mix, seed, args)
    names = truth.names
    schedule = coverage.plan(n, "all", 0, seed)[0]
    node_of = {i: name for i, name in enumerate(names)}
    rows = [row for i, (pairs, slots) in enumerate(zip(schedule, _measured(truth, schedule, 0, seed)), 1)
            for row in round_rows(slots, pairs, list(range(n)), node_of, args.pair_bytes, i)]
    index = {name: i for i, name in enumerate(names)}
    verdicts = []
    for learn, plan, judge, new in ((suspects.learn, retests.plan, retests.judge, True),
                                    (old.learn, old.plan, old.judge, False)):
        b, found = learn(rows, 0.5)
        todo = plan(rows, names, b, found)
        kept = []
        for p in todo:
            a, c, why = p[0], p[1], p[2]
            for s, d in ((a, c), (c, a)):
                gbps, latency, _ = truth.measure(index[s], index[d], 1, seed)
                extra = {"suspect": p.suspect} if new else {}
                kept.append(Retest(s, d, gbps, latency, None, b.slow(gbps, latency), why, **extra))
        v = judge(rows, kept, names, 0.5)
        verdicts.append((sorted(v.condemned), sorted(v.suspects)))
    (cond, sus), (old_cond, old_sus) = verdicts
    # The faults the links can prove: a slow GPU is the node-local phase's to find.
    faulty = sorted(name for i, name in enumerate(names) if (truth.send[i], truth.recv[i], truth.lag[i]) != (1, 1, 1)
                    or (truth.bad_rack is not None and truth.racks[i] == truth.bad_rack))
    return {"nodes": n, "seed": seed, "same": verdicts[0] == verdicts[1], "condemned": cond, "old_condemned": old_cond,
            "suspects": sus, "old_suspects": old_sus, "faulty": faulty}


# Where the modules the retests import lay before the stages became packages: a revision from before reads them
# under their old names, which stand here for this tree's.
_MOVED = {"clusterbench.analyse.suspects": "clusterbench.stages.fleet.suspects",
          "clusterbench.results.fleet": "clusterbench.stages.fleet.records",
          "clusterbench.results.schema": "clusterbench.stages.comm.records"}


def _old_retests(revision: str) -> object:
    """The fleet's retests as `revision` has them (stages/fleet/retests.py, or analyse/retests.py before the
    stages were packages), loaded beside this tree's records."""
    for path in ("src/clusterbench/stages/fleet/retests.py", "src/clusterbench/analyse/retests.py"):
        shown = subprocess.run(["git", "-C", str(REPO), "show", f"{revision}:{path}"], capture_output=True, text=True)
        if shown.returncode == 0:
            break
    else:
        raise SystemExit(f"{revision} holds no retests.py of the fleet")
    for old, new in _MOVED.items():
        sys.modules.setdefault(old, importlib.import_module(new))
    folder = Path(tempfile.mkdtemp())
    (folder / "old_retests.py").write_text(shown.stdout)
    spec = importlib.util.spec_from_file_location("old_retests", folder / "old_retests.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["old_retests"] = module
    spec.loader.exec_module(module)
    return module


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, nargs="+", default=[512, 1024, 2048])
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--faults", type=float, default=0.01, help="share of the nodes planted faulty")
    p.add_argument("--mix", default="slow_nic,starved,slow_gpu,bad_link,flaky_link",
                   help=f"comma-separated kinds: {', '.join(NODE_FAULTS + LINK_FAULTS)}")
    p.add_argument("--noise", type=float, default=0.04, help="the healthy figures' relative spread")
    p.add_argument("--slow-samples", type=float, default=0.002, help="share of the rounds' figures a busy moment slows")
    p.add_argument("--pairs", choices=("auto", "all", "sampled"), default="auto")
    p.add_argument("--partners", type=int)
    p.add_argument("--topology", action="store_true", help="the judge knows each node's leaf switch")
    p.add_argument("--rack-size", type=int, default=16)
    p.add_argument("--gpus-per-node", type=int, default=8, help="ranks (and numerics devices) per node")
    p.add_argument("--gbps", type=float, default=400.0)
    p.add_argument("--pair-bytes", type=int, default=256 * 1024**2)
    p.add_argument("--start-s", type=float, default=60.0, help="model: launch and rendezvous (not measured here)")
    p.add_argument("--node-local-s", type=float, default=60.0, help="model: the node-local phase (not measured here)")
    p.add_argument("--hop-s", type=float, default=20e-6, help="model: one step of a small collective's tree")
    p.add_argument("--against", metavar="REV", help="compare the links' verdicts with this git revision's")
    p.add_argument("--one", nargs=2, type=int, help=argparse.SUPPRESS)  # a child: one size and seed, as JSON
    args = p.parse_args()
    args.mix = [k for k in args.mix.split(",") if k]
    if args.one:
        print(json.dumps(one(*args.one, args)))
        return
    if args.against:
        old = _old_retests(args.against)
        print("| nodes | seeds | verdicts as REV's | right, this tree / REV | healthy nodes condemned, this tree / REV | "
              "where they differ (seed: condemned here / by REV; planted) |\n|---:|---:|---:|---:|---:|---|")
        for n in args.nodes:
            found = [against(n, seed, args, old) for seed in range(args.seeds)]
            odd = [f"{f['seed']}: {f['condemned']} / {f['old_condemned']}; {f['faulty']}" for f in found if not f["same"]]
            right = [sum(f[key] == f["faulty"] for f in found) for key in ("condemned", "old_condemned")]
            false = [sum(len(set(f[key]) - set(f["faulty"])) for f in found) for key in ("condemned", "old_condemned")]
            print(f"| {n} | {args.seeds} | {sum(f['same'] for f in found)} | {right[0]} / {right[1]} | "
                  f"{false[0]} / {false[1]} | {'; '.join(odd) or '-'} |", flush=True)
        return
    print("| nodes | seeds | pair rows | rounds | retest rounds | judge s (max) | rank-0 peak MiB (max) | run.json MiB "
          "| false | missed | faulty | suspects | bad links found / measured / planted | qualify min |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|")
    last = None
    for n in args.nodes:
        found = []
        for seed in range(args.seeds):
            child = subprocess.run([sys.executable, __file__, *sys.argv[1:], "--one", str(n), str(seed)],
                                   capture_output=True, text=True, check=False)
            if child.returncode != 0:
                sys.exit(f"nodes {n} seed {seed}: {child.stderr[-2000:]}")
            found.append(json.loads(child.stdout.splitlines()[-1]))
        judge = max(f["judge_s"] for f in found)
        peak = max(f["peak_mib"] for f in found)
        false, missed = sum(f["false"] for f in found), sum(f["missed"] for f in found)
        minutes = max(qualify_minutes(f, args) for f in found)
        print(f"| {n} | {len(found)} | {found[0]['rows']} | {found[0]['rounds']} | "
              f"{max(f['retest_rounds'] + f['second_rounds'] for f in found)} | {judge:.2f} | {peak:.0f} | "
              f"{max(f['json_mib'] for f in found):.1f} | {false} | {missed} | {sum(f['faulty'] for f in found)} | "
              f"{sum(f['suspects'] for f in found)} | {sum(f['bad_links'] for f in found)} / "
              f"{sum(f['bad_measured'] for f in found)} / {sum(f['planted_bad'] for f in found)} | {minutes:.1f} |",
              flush=True)
        for f in found:
            if f["false"] or f["missed"] or f["switches"]:
                print(f"  seed {f['seed']}: false {f['false_names']}, missed {f['missed_names']}, "
                      f"switches {f['switches']}", flush=True)
        last = (n, judge, peak, false, missed, minutes)
    if last is not None:
        n, judge, peak, false, missed, minutes = last
        print(f"nodes {n}: judge {judge:.1f} s, rank-0 peak {peak:.0f} MiB, false {false}, missed {missed}, "
              f"qualify at {args.gbps:g} Gbps {minutes:.1f} min")


if __name__ == "__main__":
    main()
