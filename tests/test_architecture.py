"""The house as docs/architecture.md draws it: layers that only look down, commands that read run
folders without torch, and one table of facts per collective that every reader agrees with."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest
from report_fixtures import gpu_run_doc, write_run

from clusterbench.analyse import predict
from clusterbench.collectives import BUILT_REDUCTIONS, COLLECTIVES, NCCL_ALGORITHMS, REDUCE_OPS
from clusterbench.comm import algos, ops

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "src" / "clusterbench"
ARCHITECTURE = (REPO / "docs" / "architecture.md").read_text()


def _layers() -> dict[str, int]:
    """Room -> layer number, from the table of docs/architecture.md."""
    rooms = {}
    for number, cell in re.findall(r"^\| (\d+) [^|]*\| ([^|]*) \|", ARCHITECTURE, re.MULTILINE):
        for room in re.findall(r"`([^`]+)`", cell):
            rooms[room] = int(number)
    return rooms


def _room(path: Path) -> str:
    rel = path.relative_to(PACKAGE)
    return f"{rel.parts[0]}/" if len(rel.parts) > 1 else rel.name


def _room_of_module(name: str) -> str | None:
    parts = name.split(".")
    if parts[0] != "clusterbench":
        return None
    if len(parts) == 1:
        return "__init__.py"
    return f"{parts[1]}/" if (PACKAGE / parts[1]).is_dir() else f"{parts[1]}.py"


def _imports() -> dict[str, set[str]]:
    """Room -> the rooms its modules import, at module level or inside functions alike."""
    found: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        mine = _room(path)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            for name in names:
                room = _room_of_module(name)
                if room is not None and room != mine and (PACKAGE / room.rstrip("/")).exists():
                    found.setdefault(mine, set()).add(room)
    return found


def test_every_room_has_a_layer_and_no_import_runs_back_up() -> None:
    layers, imports = _layers(), _imports()
    rooms = {_room(p) for p in PACKAGE.rglob("*.py")}
    assert rooms - set(layers) == set(), "rooms docs/architecture.md does not place in a layer"
    assert set(layers) - rooms == set(), "rooms docs/architecture.md names that do not exist"
    upward = [f"{a} (layer {layers[a]}) imports {b} (layer {layers[b]})"
              for a, targets in imports.items() for b in targets if layers[b] > layers[a]]
    assert upward == []


def test_no_rooms_import_each_other_in_a_circle() -> None:
    imports = _imports()

    def reach(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in imports.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    assert [room for room in imports if room in reach(room)] == []


def test_the_rooms_a_command_reads_before_its_ranks_import_no_torch() -> None:
    layers = _layers()
    free = [room for room, layer in layers.items() if layer <= 3 or layer == 6] + ["command.py", "commands/", "cli.py"]
    modules = sorted(".".join(("clusterbench", *path.relative_to(PACKAGE).with_suffix("").parts)).removesuffix(".__init__")
                     for path in PACKAGE.rglob("*.py")
                     if _room(path) in free and _room(path) != "rendezvous.py" and path.name != "__main__.py")
    code = f"import sys; import {', '.join(modules)}; print('torch' in sys.modules, 'transformers' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.split() == ["False", "False"], f"{len(modules)} modules"


@pytest.mark.parametrize("module", ["commands.compare", "commands.report", "commands.diagnose", "commands.baseline",
                                    "commands.align", "commands.cost_model", "cli"])
def test_commands_that_read_run_folders_import_no_torch(module: str) -> None:
    code = f"import clusterbench.{module}, sys; print(sorted(m for m in ('torch', 'matplotlib') if m in sys.modules))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "[]"


def test_comparing_two_runs_end_to_end_loads_no_torch(tmp_path: Path) -> None:
    """Not only the modules: the command itself, parser and all, on real run folders."""
    for name in ("a", "b"):
        write_run(tmp_path / name, gpu_run_doc({"hostname": name}))
    code = ("import sys; from clusterbench.cli import main; code = main(['compare', sys.argv[1], sys.argv[2]]); "
            "print('torch' in sys.modules, code)")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "a"), str(tmp_path / "b")],
                          capture_output=True, text=True, check=True)
    assert proc.stdout.strip().splitlines()[-1] == "False 0", proc.stdout + proc.stderr


def test_every_collective_has_its_call_and_every_algorithm_its_facts() -> None:
    assert set(ops.OPS) == set(COLLECTIVES)
    assert all(op.facts is COLLECTIVES[name] for name, op in ops.OPS.items())
    assert {(a.name, a.op) for a in algos.ALGOS} == {(name, op) for op, c in COLLECTIVES.items() for name in c.built}
    assert set(algos.COMBINE) == set(BUILT_REDUCTIONS) <= set(REDUCE_OPS)
    assert set(ops._REDUCTIONS) == set(REDUCE_OPS)
    assert {a for c in COLLECTIVES.values() for a in c.nccl} <= set(NCCL_ALGORITHMS)
    assert set(predict.ALGORITHMS) <= {name for name, c in COLLECTIVES.items() if c.latency_steps}


def test_the_files_each_recipe_names_exist() -> None:
    recipes = re.findall(r"^## To add .*?(?=^## |\Z)", ARCHITECTURE, re.MULTILINE | re.DOTALL)
    assert len(recipes) >= 5
    for recipe in recipes:
        paths = re.findall(r"^- `(src/clusterbench/[^`]+)`", recipe, re.MULTILINE)
        assert paths, recipe.splitlines()[0]
        for path in paths:
            assert (REPO / path.replace("NAME", "comm" if "stages" in path else "report")).exists(), path
