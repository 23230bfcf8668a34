"""The house as docs/architecture.md draws it: layers that only look down, commands that read run
folders without torch, and one table of facts per collective that every reader agrees with."""

from __future__ import annotations

import ast
import fnmatch
import re
import subprocess
import sys
from pathlib import Path

import pytest
from report_fixtures import gpu_run_doc, write_run

from clusterbench.collectives import BUILT_REDUCTIONS, COLLECTIVES, NCCL_ALGORITHMS, REDUCE_OPS
from clusterbench.stages.comm import algos, ops, predict

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "src" / "clusterbench"
ARCHITECTURE = (REPO / "docs" / "architecture.md").read_text()


ROLES = ("basics", "records", "analysis", "report", "machine", "measurement", "stages", "runtime", "commands")


def _role_table() -> list[tuple[str, str]]:
    """(pattern, role) from the table of docs/architecture.md: a file (`errors.py`), a folder (`results/`) or a
    pattern of a stage's package (`stages/*/records.py`)."""
    table = []
    for role, cell in re.findall(r"^\| ([a-z]+) \| ([^|]*) \|", ARCHITECTURE, re.MULTILINE):
        if role in ROLES:
            table += [(pattern, role) for pattern in re.findall(r"`([^`]+)`", cell)]
    return table


def _specificity(pattern: str) -> tuple[int, int, int]:
    parts = pattern.rstrip("/").split("/")
    return (sum(part != "*" for part in parts), len(parts), not pattern.endswith("/"))


def _matches(pattern: str, rel: str) -> bool:
    """`FOLDER/`: everything under it; a file, where a `*` stands for one folder."""
    if pattern.endswith("/"):
        return fnmatch.fnmatch(rel, pattern + "*") and rel.count("/") >= pattern.count("/")
    return fnmatch.fnmatch(rel, pattern) and rel.count("/") == pattern.count("/")


def _modules() -> dict[str, str]:
    """Module -> its path under the package (errors.py, runtime/launch.py)."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE).as_posix()
        name = ".".join(("clusterbench", *path.relative_to(PACKAGE).with_suffix("").parts)).removesuffix(".__init__")
        found[name] = rel
    return found


def _role_of(rel: str, table: list[tuple[str, str]]) -> str | None:
    fitting = [(pattern, role) for pattern, role in table if _matches(pattern, rel)]
    return max(fitting, key=lambda fit: _specificity(fit[0]))[1] if fitting else None


def _imports(modules: dict[str, str]) -> dict[str, set[str]]:
    """Module -> the modules of the package it imports, at module level or inside functions alike."""
    found: dict[str, set[str]] = {}
    for name, rel in modules.items():
        for node in ast.walk(ast.parse((PACKAGE / rel).read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                # `from PACKAGE import MODULE` imports that module; `from MODULE import NAME`, that module
                names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                         for a in node.names]
            else:
                continue
            for target in names:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target.startswith("clusterbench") and target != name:
                    found.setdefault(name, set()).add(target)
    return found


def test_every_module_has_a_role_and_no_import_runs_back_up() -> None:
    table, modules = _role_table(), _modules()
    roles = {name: _role_of(rel, table) for name, rel in modules.items()}
    assert [rel for name, rel in modules.items() if roles[name] is None] == [], \
        "modules docs/architecture.md gives no role"
    unused = [pattern for pattern, _ in table if not any(_matches(pattern, rel) for rel in modules.values())]
    assert unused == [], "patterns docs/architecture.md names that match no module"
    rank = {role: i for i, role in enumerate(ROLES)}
    upward = [f"{modules[a]} ({roles[a]}) imports {modules[b]} ({roles[b]})"
              for a, targets in _imports(modules).items() for b in targets
              if rank[roles[b]] > rank[roles[a]] and b != "clusterbench"]
    assert upward == []


# The command line's entry: the top level's only modules that are not shared basics.
ENTRY = ("cli.py", "__main__.py")
LONGEST = 400  # lines: past it a module is split by what it does


def test_the_top_level_holds_only_the_shared_basics_and_no_module_is_long() -> None:
    table = _role_table()
    top = [path.name for path in PACKAGE.glob("*.py") if path.name not in ENTRY]
    assert [name for name in top if _role_of(name, table) != "basics"] == []
    long = [f"{rel}: {n} lines" for rel in _modules().values()
            if (n := len((PACKAGE / rel).read_text().splitlines())) > LONGEST]
    assert long == []


def test_no_modules_import_each_other_in_a_circle() -> None:
    imports = _imports(_modules())

    def reach(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in imports.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    assert [module for module in imports if module in reach(module)] == []


# Read by every command's parser, though of the run-time: they load no torch.
TORCH_FREE_RUNTIME = ("runtime/command.py", "runtime/launchers.py")


def test_the_modules_a_command_reads_before_its_ranks_import_no_torch() -> None:
    table, modules = _role_table(), _modules()
    free = {"basics", "records", "analysis", "report", "stages", "commands"}
    names = sorted(name for name, rel in modules.items()
                   if (_role_of(rel, table) in free or rel in TORCH_FREE_RUNTIME) and rel != "__main__.py")
    code = f"import sys; import {', '.join(names)}; print('torch' in sys.modules, 'transformers' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.split() == ["False", "False"], f"{len(names)} modules"


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
