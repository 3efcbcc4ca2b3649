"""Another writer's moves meeting ours, through a real mount (found by the long
Hypothesis runs of the interleaving harness, 4 December afternoon; both failed before).

Background polls, the write-back delay and the delete delay are an hour: nothing moves
but what each test asks for (`flush`, `sync_now`).
"""

from __future__ import annotations

import pytest

# ruff: noqa: F811  (pytest fixtures imported from mountutil are redefined as arguments)
from mountutil import mounts, needs_fuse, server_memories  # noqa: F401
from synchelpers import (
    QUIET,
    cat,
    conflicts,
    flush,
    pushed,
    sdk_by_path,
    sdk_create,
    sdk_delete,
    sdk_update,
    wait_for,
)

pytestmark = [pytest.mark.mount, needs_fuse]

def test_their_swap_meets_our_pending_rename_into_it(mounts, server):
    """Our `mv a.md c.md` not pushed yet; another writer moves b.md to c.md and a.md to
    b.md. The server decided both places: the files change places here (before, each
    waited on the other for ever and the mount never settled)."""
    store = mounts.new_store()
    m = mounts.mount(store, *QUIET)
    ids = pushed(m, server, store, {"a.md": "a\n", "b.md": "b\n"})
    (m.path / "a.md").rename(m.path / "c.md")
    sdk_update(server, store, ids["/b.md"], path="/c.md")
    sdk_update(server, store, ids["/a.md"], path="/b.md")
    m.sync_now(full=True)
    wait_for(lambda: cat(m.path / "c.md") == "b\n", what="b's memory at /c.md")
    assert cat(m.path / "b.md") == "a\n" and not (m.path / "a.md").exists()
    flush(m)
    assert m.status()["pending"]["renames"] == []
    assert server_memories(server, store) == {"/b.md": "a\n", "/c.md": "b\n"}
    assert {p: x.id for p, x in sdk_by_path(server, store).items()} == {
        "/b.md": ids["/a.md"], "/c.md": ids["/b.md"]}
    assert conflicts(m) == []


def test_their_swap_seen_at_once(mounts, server):
    """Another writer swaps a.md and b.md through t.md between two listings: the mount
    shows the swap (each file at the other's place, its memory with it), an edit of a.md
    not pushed yet moving with its file. Before, each waited on the other for ever
    ("the place is taken locally") and the mount never showed the swap."""
    store = mounts.new_store()
    m = mounts.mount(store, *QUIET)
    ids = pushed(m, server, store, {"a.md": "a\n", "b.md": "b\n"})
    (m.path / "a.md").write_text("a, edited here\n")
    for mid, path in ((ids["/a.md"], "/t.md"), (ids["/b.md"], "/a.md"),
                      (ids["/a.md"], "/b.md")):
        sdk_update(server, store, mid, path=path)
    m.sync_now(full=True)
    wait_for(lambda: cat(m.path / "b.md") == "a, edited here\n", what="the swap followed")
    assert cat(m.path / "a.md") == "b\n" and not (m.path / "t.md").exists()
    assert sorted(p.name for p in m.path.iterdir()) == ["a.md", "b.md"]
    flush(m)
    assert server_memories(server, store) == {"/a.md": "b\n", "/b.md": "a, edited here\n"}
    assert {p: x.id for p, x in sdk_by_path(server, store).items()} == {
        "/a.md": ids["/b.md"], "/b.md": ids["/a.md"]}
    assert conflicts(m) == []


@pytest.mark.parametrize("then", ["read", "killed"])
def test_never_read_moved_over_a_file_while_its_memory_changes_there(mounts, server, then):
    """/c.md, another writer's, is in the tree but was never read (no prefetch), and is
    moved over /a.md while that writer edits c.md: c's memory comes back with the edit,
    and /a.md still reads what it was moved with (before: EIO, never pushed). `killed`:
    the daemon killed (kill -9) first, before the moved content was ever read: the
    restarted mount still finds it (the memory that held it is noted in state.db)."""
    store = mounts.new_store()
    args = (*QUIET, "--no-prefetch")
    m = mounts.mount(store, *args)
    (m.path / "a.md").write_text("a\n")
    flush(m)
    created = sdk_create(server, store, "/c.md", "c, first\n")
    m.sync_now(full=True)
    wait_for(lambda: (m.path / "c.md").exists(), what="/c.md shown")
    sdk_update(server, store, created.id, content="c, edited there\n")
    (m.path / "c.md").rename(m.path / "a.md")
    m.sync_now(full=True)
    wait_for(lambda: (m.path / "c.md").exists(), what="/c.md back with the edit")
    if then == "killed":
        m.kill9()
        m = mounts.mount(store, *args)
    assert cat(m.path / "a.md") == "c, first\n"
    assert cat(m.path / "c.md") == "c, edited there\n"
    flush(m)
    assert server_memories(server, store) == {"/a.md": "c, first\n",
                                              "/c.md": "c, edited there\n"}
    assert conflicts(m) == []


def test_moved_onto_their_same_bytes_then_they_delete_it_keeps_ours(mounts, server):
    """Our `mv a.md d/e.md` meets another writer's /d/e.md holding the same bytes: theirs
    wins the path, the file becomes their memory and ours is deleted. Their delete of
    /d/e.md then takes the file; the conflict row still holds what the user moved, and
    restoring it brings the file back (before: no row when the bytes were equal, and the
    user's file was nowhere; found by the random interleaving search)."""
    store = mounts.new_store()
    m = mounts.mount(store, *QUIET)
    ids = pushed(m, server, store, {"a.md": "same\n", "b.md": "b\n"})
    theirs = sdk_create(server, store, "/d/e.md", "same\n").id
    (m.path / "d").mkdir()
    (m.path / "a.md").rename(m.path / "d" / "e.md")
    flush(m)
    assert cat(m.path / "d" / "e.md") == "same\n"
    [row] = conflicts(m)
    assert (row["path"], row["memory_id"]) == ("/d/e.md", theirs)
    assert {p: x.id for p, x in sdk_by_path(server, store).items()} == {
        "/b.md": ids["/b.md"], "/d/e.md": theirs}  # ours deleted: no file holds it
    sdk_delete(server, store, theirs)
    m.sync_now(full=True)
    wait_for(lambda: not (m.path / "d" / "e.md").exists(), what="their delete applied")
    m.memfs("conflicts", "restore", str(row["id"]), "--mountpoint", str(m.path))
    assert cat(m.path / "d" / "e.md") == "same\n"
    flush(m)
    assert server_memories(server, store) == {"/b.md": "b\n", "/d/e.md": "same\n"}
    assert conflicts(m) == []
