"""A file moved away and back while another writer edits it comes back as its own memory
(found by the long Hypothesis run of the interleaving harness, 4 December).

`mv a.md c.md` over c.md gives c's memory a's bytes and leaves a's memory to be deleted;
`mv c.md a.md` then put c's memory at /a.md. Meanwhile another writer edited a.md: a's
delete met the edit (the edit wins, a.md restored), c's rename met a's memory at /a.md,
and a's own bytes, which the server had all along, were filed as a conflict. Now a file
moved onto the path of a pending delete, holding exactly what that memory held, takes it
back: the edit is a plain update, and c's memory is the one deleted.

Background polls, the write-back delay and the delete delay are an hour: nothing moves
but what each test asks for (`flush`, `sync_now`).
"""

from __future__ import annotations

import shutil

import pytest

# ruff: noqa: F811  (pytest fixtures imported from mountutil are redefined as arguments)
from mountutil import mounts, needs_fuse, server_memories  # noqa: F401
from synchelpers import QUIET, cat, conflicts, flush, pushed, sdk_by_path, sdk_update, wait_for

pytestmark = [pytest.mark.mount, needs_fuse]

def _two_files(mounts, server, c_content: str):
    store = mounts.new_store()
    m = mounts.mount(store, *QUIET)
    return store, m, pushed(m, server, store, {"a.md": "a\n", "c.md": c_content})


def _settled(m, server, store, ids) -> None:
    flush(m)
    m.sync_now(full=True)
    wait_for(lambda: cat(m.path / "a.md") == "a, edited there\n", what="the edit in /a.md")
    assert not (m.path / "c.md").exists()
    assert conflicts(m) == []
    flush(m)
    assert server_memories(server, store) == {"/a.md": "a, edited there\n"}
    assert sdk_by_path(server, store)["/a.md"].id == ids["/a.md"]


def test_moved_over_another_file_and_back_while_edited_there(mounts, server):
    store, m, ids = _two_files(mounts, server, "c\n")
    (m.path / "a.md").rename(m.path / "c.md")
    sdk_update(server, store, ids["/a.md"], content="a, edited there\n")
    (m.path / "c.md").rename(m.path / "a.md")
    _settled(m, server, store, ids)


def test_a_pushed_copy_moved_onto_the_deleted_original_while_edited_there(mounts, server):
    """cp a c (pushed: c's memory holds a's bytes), rm a, mv c a."""
    store, m, ids = _two_files(mounts, server, "c\n")
    shutil.copyfile(m.path / "a.md", m.path / "c.md")
    flush(m)
    assert server_memories(server, store) == {"/a.md": "a\n", "/c.md": "a\n"}
    (m.path / "a.md").unlink()
    sdk_update(server, store, ids["/a.md"], content="a, edited there\n")
    (m.path / "c.md").rename(m.path / "a.md")
    _settled(m, server, store, ids)
