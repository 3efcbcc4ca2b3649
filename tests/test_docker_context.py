"""docker/Dockerfile without a Docker engine: the wheel built from exactly the files its
COPY lines take (through .dockerignore, as the engine filters the build context) holds
the fast-open shim, and the context leaves the checkout's .venv and build leftovers out."""

from __future__ import annotations

import fnmatch
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import REPO

pytestmark = pytest.mark.timeout(300)


def ignore_rules() -> list[tuple[bool, list[str]]]:
    """(is an exception `!`, the pattern's components) of .dockerignore, in order."""
    rules = []
    for line in (REPO / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        keep = line.startswith("!")
        rules.append((keep, line.lstrip("!").strip("/").split("/")))
    return rules


def _match(pattern: list[str], parts: list[str]) -> bool:
    """Docker's rule: each component a glob (no `/` in it), `**` any number of them."""
    if not pattern:
        return not parts
    if pattern[0] == "**":
        return any(_match(pattern[1:], parts[i:]) for i in range(len(parts) + 1))
    return bool(parts) and fnmatch.fnmatchcase(parts[0], pattern[0]) and \
        _match(pattern[1:], parts[1:])


def in_context(rel: str, rules: list[tuple[bool, list[str]]]) -> bool:
    """Whether the engine sends `rel`: the last rule matching it or a parent decides."""
    parts = rel.split("/")
    kept = True
    for keep, pattern in rules:
        if any(_match(pattern, parts[:n]) for n in range(1, len(parts) + 1)):
            kept = keep
    return kept


def context_files() -> set[str]:
    rules = ignore_rules()
    out = set()
    for root, dirs, files in os.walk(REPO):
        dirs[:] = [d for d in dirs if d != ".git"]
        for name in files:
            rel = os.path.relpath(os.path.join(root, name), REPO)
            if in_context(rel, rules):
                out.add(rel)
    return out


def build_stage_copies() -> list[tuple[list[str], str]]:
    """(sources, destination) of the build stage's COPY lines (not `COPY --from`)."""
    copies = []
    for line in (REPO / "docker" / "Dockerfile").read_text().splitlines():
        words = line.split()
        if words[:1] == ["FROM"] and copies:
            break  # the runtime stage copies from the build stage only
        if words[:1] == ["COPY"] and not words[1].startswith("--"):
            copies.append((words[1:-1], words[-1]))
    return copies


def test_the_context_leaves_local_state_out():
    files = context_files()
    assert {"pyproject.toml", "setup.py", "README.md", "memfs/_fastopen.c",
            "memfs/_fastopen.map", "memfs/cli/main.py"} <= files
    assert not [f for f in files if f.startswith((".venv/", "tests/", "build/", ".git/"))
                or "__pycache__" in f or f.endswith(".so")], sorted(files)


def test_the_wheel_from_the_copied_files_has_the_shim(tmp_path: Path):
    files = context_files()
    src = tmp_path / "src"
    src.mkdir()
    for sources, dest in build_stage_copies():
        for source in sources:
            taken = [f for f in files if f == source or f.startswith(source + "/")]
            assert taken, f"COPY {source}: not in the build context"
            for f in taken:
                target = src / dest / (f if dest.endswith("/") or len(sources) > 1
                                       else os.path.relpath(f, source))
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(REPO / f, target)
    assert (src / "setup.py").exists() and (src / "memfs" / "_fastopen.c").exists()
    out = tmp_path / "wheel"
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w",
                           str(out), str(src)], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    (wheel,) = out.glob("memfs_fuse-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert [n for n in names if n.startswith("memfs/_fastopen") and n.endswith(".so")], names
    assert "-py3-none-any" not in wheel.name  # a platform wheel: compiled code inside
