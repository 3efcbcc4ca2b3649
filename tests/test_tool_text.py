"""The memory tool's pure text rules (memfs/tool/text.py), and the packaging promise that
only memfs.tool needs the `anthropic` package."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import REPO

from memfs.tool.text import ToolFailure, format_size, render_directory, resolve


@pytest.mark.parametrize(("size", "shown"), [
    (0, "0B"), (1, "1B"), (1023, "1023B"), (1024, "1K"), (1536, "1.5K"), (4096, "4K"),
    (5632, "5.5K"), (102_400, "100K"), (1_258_291, "1.2M"), (10**12, "931.3G"),
])
def test_sizes_print_like_the_reference(size, shown):
    assert format_size(size) == shown


@pytest.mark.parametrize(("path", "memory_path"), [
    ("/memories", "/"),
    ("/memories/", "/"),
    ("/memories/.", "/"),
    ("/memories/a/..", "/"),
    ("/memories//a//b/", "/a/b"),
    ("/memories/./a/./b", "/a/b"),
    ("/memories/a/../b", "/b"),
    ("/memories/../memories/a", "/a"),    # out to the folder holding memories/, and back
    ("/memories..", None),
    ("/memoriesX/a", "/X/a"),             # the reference only tests the raw prefix
    ("/memories/../a", None),
    ("/memories/../../memory/memories/a", None),  # depends on the reference's base folder
    ("/memories/%2e%2e/a", "/%2e%2e/a"),  # no URL decoding: just a strange name
    ("memories/a", None),
    ("/etc/passwd", None),
])
def test_tool_paths_map_to_memory_paths(path, memory_path):
    if memory_path is None:
        with pytest.raises(ToolFailure) as caught:
            resolve(path)
        assert caught.value.message in (
            f"Path must start with /memories, got: {path}",
            f"Path {path} would escape /memories directory",
        )
    else:
        assert resolve(path).memory_path == memory_path


def test_directory_view_is_two_levels_with_hidden_names_skipped():
    below = [(("a.md",), 3), ((".h",), 5), (("d", "x.md"), 1024), (("d", "e", "f", "g.md"), 7),
             (("d", ".h2", "y"), 1), (("B",), 0)]
    assert render_directory("/memories", below) == (
        "Here're the files and directories up to 2 levels deep in /memories, "
        "excluding hidden items:\n"
        "1.0K\t/memories\n"
        "0B\t/memories/B\n"          # names sort by code point, as the reference sorts them
        "3B\t/memories/a.md\n"
        "1.0K\t/memories/d/\n"
        "7B\t/memories/d/e/\n"
        "1K\t/memories/d/x.md"
    )


def test_the_filesystem_does_not_import_anthropic():
    code = (
        "import sys, memfs.cli.main, memfs.tool.store, memfs.cli.tool\n"
        "assert 'anthropic' not in sys.modules, 'anthropic was imported'\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
