"""The package layers hold (docs/ARCHITECTURE.md, "Packages"): the import-linter contract in
pyproject.toml, plus no import cycle at all, module by module (which import-linter does not
check). Each check is also shown failing on a violation planted in a copy of the package."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import grimp

REPO = Path(__file__).resolve().parent.parent


def cycles(root: Path | None = None) -> list[list[str]]:
    """Every import cycle among memfs's modules (imports inside functions and under
    TYPE_CHECKING count too): the strongly connected components of the import graph."""
    code = ("import sys, json, grimp\n"
            "g = grimp.build_graph('memfs', cache_dir=None)\n"
            "print(json.dumps({m: sorted(g.find_modules_directly_imported_by(m))"
            " for m in g.modules}))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=root or REPO, check=True,
                         capture_output=True, text=True,
                         env={"PYTHONPATH": str(root or REPO), "PATH": "/usr/bin:/bin"}).stdout
    import json

    graph: dict[str, list[str]] = json.loads(out)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, []):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    lint = Path(sys.executable).with_name("lint-imports")
    return subprocess.run([str(lint), "--no-cache"], cwd=root, capture_output=True, text=True,
                          env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})


def planted(tmp_path: Path, edits: dict[str, str]) -> Path:
    """A copy of the package and its contract, with `edits` appended to some modules."""
    root = tmp_path / "copy"
    shutil.copytree(REPO / "memfs", root / "memfs",
                    ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    for module, line in edits.items():
        path = root / module
        path.write_text(path.read_text() + f"\n{line}\n")
    return root


def test_the_layering_contract_is_kept():
    run = lint_imports(REPO)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "2 kept, 0 broken" in run.stdout


def test_the_contract_fails_on_an_upward_import(tmp_path):
    root = planted(tmp_path, {"memfs/core/paths.py": "import memfs.cli.main  # planted"})
    run = lint_imports(root)
    assert run.returncode != 0
    assert "memfs.core is not allowed to import memfs.cli" in run.stdout
    assert "memfs.core.paths -> memfs.cli.main" in run.stdout


def test_the_sync_contract_fails_on_a_loop_importing_the_other(tmp_path):
    # The reconciler once took its rows from the pusher's module: siblings, so the package
    # layers above could not see it.
    root = planted(tmp_path,
                   {"memfs/sync/reconciler.py": "from memfs.sync import pusher  # planted"})
    run = lint_imports(root)
    assert run.returncode != 0
    assert "1 kept, 1 broken" in run.stdout
    assert "memfs.sync.reconciler -> memfs.sync.pusher" in run.stdout


def test_no_module_imports_itself_through_others():
    assert cycles() == []


def test_the_cycle_check_finds_a_planted_cycle(tmp_path):
    # Inside one package, so the layers contract alone would not see it.
    root = planted(tmp_path, {
        "memfs/core/slug.py": "from memfs.core import paths  # planted",
        "memfs/core/paths.py": "from memfs.core import slug  # planted",
    })
    assert cycles(root) == [["memfs.core.paths", "memfs.core.slug"]]
    assert lint_imports(root).returncode == 0  # why the cycle check is needed


def test_the_decision_tables_import_only_the_records():
    # Pure: no I/O, no state, no trio (what lets mutation testing run them fast).
    assert grimp.build_graph("memfs", cache_dir=None).find_modules_directly_imported_by(
        "memfs.core.decide") <= {"memfs.core.nodes"}
