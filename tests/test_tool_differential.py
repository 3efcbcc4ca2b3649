"""Differential test: MemoryStoreTool against the SDK's BetaLocalFilesystemMemoryTool.

Hypothesis generates command sequences, valid and invalid, over a small set of tool
paths chosen to collide: files, directories two and three levels deep, hidden names,
``..`` and ``.`` segments, paths that escape, paths outside ``/memories``, a file used as
a directory. Both tools run every command; their answers must be equal character for
character, with the two documented exceptions (docs/TOOL.md):

* directory sizes in ``view`` (a store has no folder size);
* where the reference fails with an exception from the OS (``NotADirectoryError``,
  ``OSError: Invalid argument`` ...), the store tool must give a ToolError instead.

A store has no empty directories, so after each command the reference folder's empty
directories are removed (the reference leaves them behind a delete or a failed rename).
At the end of each sequence the store's memories must equal the folder's files.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import hypothesis.strategies as st
from anthropic.tools.memory import BetaLocalFilesystemMemoryTool
from hypothesis import HealthCheck, event, example, given, settings
from toolutil import (  # noqa: F401 - shared_server is a fixture
    folder_files,
    new_store,
    outcome,
    shared_server,
    store_files,
    sync_tool,
)

EXAMPLES = int(os.environ.get("MEMFS_TOOL_EXAMPLES", "60"))

FILES = st.sampled_from([
    "/memories/a.md", "/memories/b", "/memories/d/a.md", "/memories/d/e/a.md",
    "/memories/d/e/f/a.md",  # three levels down: below what view shows
    "/memories/d/.h",
])
DIRECTORIES = st.sampled_from(["/memories", "/memories/", "/memories/d", "/memories/d/",
                               "/memories/d/e", "/memories/x"])
ODD = st.sampled_from([
    "/memories/./a.md",
    "/memories//d//a.md",
    "/memories/d/../b",
    "/memories/../memories/a.md",
    "/memoriesd/a.md",        # the reference's prefix test: this is d/a.md
    "/memories/a.md/x",       # a file used as a directory
    "/memories/d/a.md/x",
    "/memories/../a.md",      # escapes
    "/memories/../../etc",
    "/etc/passwd",
    "memories/a.md",
])
PATHS = st.one_of(FILES, FILES, DIRECTORIES, ODD)
# Lines of a few words: an old_str is then often unique, sometimes repeated or absent.
TEXT = st.one_of(
    st.lists(st.sampled_from(["alpha", "beta", "gamma beta", ""]), max_size=4, unique=True)
    .map("\n".join),
    st.text(alphabet="ab\n", max_size=6),
)
SNIPPET = st.sampled_from(["alpha", "beta", "gamma", "a", "\n", "", "alpha\nbeta", "zz"])

VIEW = st.builds(
    lambda p, r: {"command": "view", "path": p, **({"view_range": r} if r else {})},
    PATHS,
    st.none() | st.lists(st.integers(-2, 6), min_size=1, max_size=3),
)
CREATE = st.builds(lambda p, t: {"command": "create", "path": p, "file_text": t}, PATHS, TEXT)
EDITED = st.one_of(FILES, FILES, FILES, PATHS)  # edits mostly aim at files
REPLACE = st.builds(
    lambda p, o, n: {"command": "str_replace", "path": p, "old_str": o, "new_str": n},
    EDITED, SNIPPET, st.text(alphabet="abc\n", max_size=4),
)
INSERT = st.builds(
    lambda p, n, t: {"command": "insert", "path": p, "insert_line": n, "insert_text": t},
    EDITED, st.integers(-1, 6), st.text(alphabet="c\n", max_size=3),
)
DELETE = st.builds(lambda p: {"command": "delete", "path": p}, PATHS)
RENAME = st.builds(
    lambda a, b: {"command": "rename", "old_path": a, "new_path": b},
    st.one_of(FILES, DIRECTORIES, ODD), PATHS,
)
# A few files first, so that the mixed commands after them find something to act on.
SEED = st.lists(
    st.builds(lambda p, t: {"command": "create", "path": p, "file_text": t}, FILES, TEXT),
    min_size=2, max_size=6,
)
MIXED = st.lists(
    st.one_of(CREATE, VIEW, VIEW, REPLACE, INSERT, DELETE, RENAME), min_size=4, max_size=24
)
COMMANDS = st.builds(lambda seed, mixed: seed + mixed, SEED, MIXED)


def without_directory_sizes(answer: tuple[str, object]) -> tuple[str, object]:
    """A directory listing with its directories' sizes blanked (the first row is the
    directory itself; rows ending in '/' are directories)."""
    kind, text = answer
    if kind != "ok" or not isinstance(text, str) or not text.startswith("Here're the files"):
        return answer
    header, *rows = text.split("\n")
    blanked = [
        "<dir>\t" + row.split("\t", 1)[1] if i == 0 or row.endswith("/") else row
        for i, row in enumerate(rows)
    ]
    return kind, "\n".join([header, *blanked])


def remove_empty_directories(root: Path) -> None:
    for dirpath, _dirs, _files in os.walk(root, topdown=False):
        if Path(dirpath) != root and not os.listdir(dirpath):
            os.rmdir(dirpath)


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=not os.environ.get("MEMFS_TOOL_EXPLORE"),  # fixed examples unless exploring
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    print_blob=True,
)
@given(commands=COMMANDS)
@example(commands=[  # every answer at least once, whatever Hypothesis draws
    {"command": "view", "path": "/memories"},
    {"command": "create", "path": "/memories/notes.md", "file_text": "alpha\nbeta\ngamma\n"},
    {"command": "create", "path": "/memories/d/e/f/deep.md", "file_text": "x" * 1536},
    {"command": "create", "path": "/memories/d/.hidden", "file_text": "h"},
    {"command": "create", "path": "/memories/d/a.md", "file_text": ""},
    {"command": "view", "path": "/memories"},
    {"command": "view", "path": "/memories/d/"},
    {"command": "view", "path": "/memories/notes.md", "view_range": [2, -1]},
    {"command": "view", "path": "/memories/notes.md", "view_range": [0, 1]},
    {"command": "str_replace", "path": "/memories/notes.md", "old_str": "beta", "new_str": "B"},
    {"command": "str_replace", "path": "/memories/notes.md", "old_str": "a", "new_str": "A"},
    {"command": "str_replace", "path": "/memories/notes.md", "old_str": "zz", "new_str": ""},
    {"command": "insert", "path": "/memories/notes.md", "insert_line": 0, "insert_text": "top\n"},
    {"command": "insert", "path": "/memories/notes.md", "insert_line": 9, "insert_text": "x"},
    {"command": "insert", "path": "/memories/d", "insert_line": 0, "insert_text": "x"},
    {"command": "rename", "old_path": "/memories/d", "new_path": "/memories/moved"},
    {"command": "rename", "old_path": "/memories/moved/e", "new_path": "/memories/moved/e/in"},
    {"command": "rename", "old_path": "/memories/notes.md", "new_path": "/memories/moved"},
    {"command": "rename", "old_path": "/memories", "new_path": "/memories/x"},
    {"command": "create", "path": "/memories/notes.md/x", "file_text": ""},
    {"command": "delete", "path": "/memories/moved/e"},
    {"command": "delete", "path": "/memories/moved/e"},
    {"command": "delete", "path": "/memories/"},
    {"command": "view", "path": "/memories/../secret"},
    {"command": "view", "path": "/tmp"},
    {"command": "view", "path": "/memories"},
])
def test_store_tool_answers_like_the_local_filesystem_tool(shared_server, commands):  # noqa: F811
    store = new_store(shared_server)
    ours = sync_tool(shared_server, store)
    base = Path(tempfile.mkdtemp(prefix="memfs-tool-ref-"))
    try:
        reference = BetaLocalFilesystemMemoryTool(base_path=str(base))
        root = base / "memories"
        for command in commands:
            want = outcome(reference, command)
            got = outcome(ours, command)
            remove_empty_directories(root)
            event(f"{command['command']}: {want[0]}")  # --hypothesis-show-statistics
            if want[0] == "crash":
                # Only the OS can make the reference fail this way; ours answers in words.
                assert isinstance(want[1], OSError), (command, want)
                assert got[0] == "error", (command, want, got)
                continue
            assert without_directory_sizes(got) == without_directory_sizes(want), command
        assert store_files(shared_server, store) == folder_files(root)
    finally:
        shutil.rmtree(base, ignore_errors=True)
