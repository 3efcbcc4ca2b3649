"""Every `pip install` line of the docs installs this project: never the name `memfs`
(on PyPI an unrelated project), only a checkout (or `memfs-fuse`, the distribution's
name), and only extras pyproject.toml declares."""

from __future__ import annotations

import re
import tomllib

from conftest import REPO

DOCS = [REPO / "README.md", REPO / "memfs" / "tool" / "sdk.py", REPO / "docker" / "README.md",
        *sorted((REPO / "docs").glob("*.md"))]


def test_the_distribution_has_its_own_name():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["name"] == "memfs-fuse"
    assert project["scripts"] == {"memfs": "memfs.cli.spawn:main"}


def test_every_pip_install_line_names_this_project():
    extras = set(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
                 ["optional-dependencies"])
    seen = 0
    for doc in DOCS:
        for line in doc.read_text().splitlines():
            for m in re.finditer(r"pip install (?:-q )?(?:-e )?'?([^\s'`]+)'?", line):
                target = m.group(1)
                if target.startswith("-"):
                    continue  # pip's own flags (`--upgrade pip`)
                seen += 1
                source, _, wanted = target.partition("[")
                assert source in (".", "memfs-fuse") or "/" in source, (doc.name, line)
                for extra in filter(None, wanted.rstrip("]").split(",")):
                    assert extra in extras, (doc.name, line, extra)
    assert seen >= 4
